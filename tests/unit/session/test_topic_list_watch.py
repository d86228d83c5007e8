"""Pattern subscriptions' commands: GET_TOPICS_OF_NAMESPACE with a pattern and a hash, and
the topic-list watch that reports topics created or deleted later."""

from __future__ import annotations

from dedup_broker.domain.topic_list import topics_hash
from dedup_broker.domain_base.names import TopicName
from dedup_broker.protocol import pulsar_api_pb2 as pb
from harness.memory_broker import MemoryBroker

NS = "public/default"
PATTERN = "persistent://public/default/orders-.*"


def _get_topics(request_id: int, pattern: str | None, known_hash: str | None) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=pb.BaseCommand.GET_TOPICS_OF_NAMESPACE)
    cmd.getTopicsOfNamespace.request_id = request_id
    cmd.getTopicsOfNamespace.namespace = NS
    cmd.getTopicsOfNamespace.mode = pb.CommandGetTopicsOfNamespace.PERSISTENT
    if pattern is not None:
        cmd.getTopicsOfNamespace.topics_pattern = pattern
    if known_hash is not None:
        cmd.getTopicsOfNamespace.topics_hash = known_hash
    return cmd


def _watch(request_id: int, watcher_id: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=pb.BaseCommand.WATCH_TOPIC_LIST)
    cmd.watchTopicList.request_id = request_id
    cmd.watchTopicList.watcher_id = watcher_id
    cmd.watchTopicList.namespace = NS
    cmd.watchTopicList.topics_pattern = PATTERN
    return cmd


async def test_listing_is_filtered_by_the_pattern_and_unchanged_by_its_hash() -> None:
    broker = MemoryBroker()
    for name in ("orders-eu", "orders-us", "payments"):
        await broker.topic(f"persistent://{NS}/{name}")
    client = await broker.client()
    (frame,) = await client.exchange(_get_topics(1, PATTERN, None))
    response = frame.command.getTopicsOfNamespaceResponse
    expected = [f"persistent://{NS}/orders-eu", f"persistent://{NS}/orders-us"]
    assert list(response.topics) == expected
    assert response.filtered and response.changed
    assert response.topics_hash == topics_hash(expected)

    (frame,) = await client.exchange(_get_topics(2, PATTERN, response.topics_hash))
    again = frame.command.getTopicsOfNamespaceResponse
    assert not again.changed and list(again.topics) == []

    (frame,) = await client.exchange(_get_topics(3, None, None))
    everything = frame.command.getTopicsOfNamespaceResponse
    assert len(everything.topics) == 3 and not everything.filtered


async def test_a_watch_hears_of_topics_created_and_deleted_later() -> None:
    broker = MemoryBroker()
    await broker.topic(f"persistent://{NS}/orders-eu")
    client = await broker.client()
    (frame,) = await client.exchange(_watch(1, 7))
    success = frame.command.watchTopicListSuccess
    assert (success.watcher_id, list(success.topic)) == (7, [f"persistent://{NS}/orders-eu"])

    await broker.topic(f"persistent://{NS}/orders-us")
    await broker.topic(f"persistent://{NS}/payments")
    await broker.broker.namespaces.watches.check_now()
    (frame,) = client.received()
    update = frame.command.watchTopicUpdate
    assert list(update.new_topics) == [f"persistent://{NS}/orders-us"]
    assert list(update.deleted_topics) == []
    both = [f"persistent://{NS}/orders-eu", f"persistent://{NS}/orders-us"]
    assert update.topics_hash == topics_hash(both)

    await broker.broker.topic_registry.delete_topic(TopicName.parse(f"persistent://{NS}/orders-eu"))
    await broker.broker.namespaces.watches.check_now()
    (frame,) = client.received()
    assert list(frame.command.watchTopicUpdate.deleted_topics) == [f"persistent://{NS}/orders-eu"]

    close = pb.BaseCommand(type=pb.BaseCommand.WATCH_TOPIC_LIST_CLOSE)
    close.watchTopicListClose.request_id = 2
    close.watchTopicListClose.watcher_id = 7
    (frame,) = await client.exchange(close)
    assert frame.command.type == pb.BaseCommand.SUCCESS
    await broker.topic(f"persistent://{NS}/orders-asia")
    await broker.broker.namespaces.watches.check_now()
    assert client.received() == []
