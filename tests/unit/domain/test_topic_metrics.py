"""Pulsar's per-topic metric families: read from the topics' own numbers, labelled as
Pulsar labels them, summed per namespace on request, and streamed in slices that give
the event loop back."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dedup_broker.domain import topic_metrics
from dedup_broker.domain.topic_rates import StatsUpdates
from dedup_broker.domain.write_stats import WriteStats
from dedup_broker.metrics_registry import exposition, render_exposition
from harness.domain_links import ConsumerSide, new_producer, publish, subscribe
from harness.memory_broker import MemoryBroker, settle
from tests.metric_names import BROKER_SUMS

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

TOPIC = "persistent://public/default/orders"
LABELS = (("cluster", "standalone"), ("namespace", "public/default"), ("topic", TOPIC))
SUBSCRIPTION = (*LABELS, ("subscription", "sub"))


def samples_of(text: str) -> Samples:
    return {
        (s.name, tuple(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


async def scraped(broker: MemoryBroker) -> Samples:
    return samples_of((await render_exposition(broker.broker.metrics.registry)).decode())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stats_updates_on(broker: MemoryBroker, clock: Clock) -> StatsUpdates:
    """The broker's stats update (as ``Broker`` wires it) on a clock the test moves."""
    updates = StatsUpdates(
        broker.broker.rated_topics, clock, stored=lambda: broker.broker.topics.values()
    )
    broker.broker.stats_updates = updates
    return updates


def broker_sums(samples: Samples, cluster: str = "standalone") -> dict[str, float]:
    """The ``pulsar_broker_*`` samples, by the name of the family they sum."""
    return {
        name: samples[(f"pulsar_broker_{name}", (("cluster", cluster),))] for name in BROKER_SUMS
    }


def summed(samples: Samples, name: str) -> float:
    """``pulsar_{name}`` summed over its series (topics or namespaces)."""
    return sum(value for (family, _), value in samples.items() if family == f"pulsar_{name}")


async def test_a_topics_families_carry_its_numbers_and_pulsars_labels() -> None:
    broker = MemoryBroker.configured(broker_deduplication_enabled=True)
    topic = await broker.topic(TOPIC)
    await topic.dedup.apply_policy()
    await subscribe(topic, ConsumerSide(), "c")
    producer = new_producer("p")
    topic.add_producer(producer)
    for sequence in range(5):
        await publish(topic, producer, sequence)
    await publish(topic, producer, 2)  # a duplicate
    before = await scraped(broker)
    assert before[("pulsar_storage_write_latency_count", LABELS)] == 0  # no period closed
    await broker.broker.update_stats()
    samples = await scraped(broker)
    stats = topic.stats()
    assert samples[("pulsar_topics_count", LABELS[:2])] == 1
    assert samples[("pulsar_in_messages_total", LABELS)] == stats["msgInCounter"] == 5
    assert samples[("pulsar_producers_count", LABELS)] == 1
    assert samples[("pulsar_consumers_count", LABELS)] == 1
    assert samples[("pulsar_rate_in", LABELS)] == stats["msgRateIn"] > 0
    assert samples[("pulsar_storage_logical_size", LABELS)] == stats["storageSize"] > 0
    assert samples[("pulsar_storage_backlog_size", LABELS)] == stats["backlogSize"]
    assert samples[("pulsar_msg_backlog", LABELS)] == 5
    assert samples[("pulsar_subscription_back_log", SUBSCRIPTION)] == 5
    assert samples[("pulsar_subscription_consumers_count", SUBSCRIPTION)] == 1
    assert samples[("pulsar_out_messages_total", SUBSCRIPTION)] == 0
    assert samples[("pulsar_storage_write_latency_count", LABELS)] == 5
    assert samples[("pulsar_entry_size_count", LABELS)] == 5
    assert samples[("pulsar_entry_size_le_128", LABELS)] == 5
    assert samples[("pulsar_entry_size_sum", LABELS)] == stats["bytesInCounter"]
    assert samples[("dedup_broker_deduplication_producers", LABELS)] == 1
    verdict = ("dedup_broker_deduplication_verdicts_total", (*LABELS, ("verdict", "Dup")))
    assert samples[verdict] == 1


async def test_with_topic_level_metrics_off_the_families_are_summed_per_namespace() -> None:
    broker = MemoryBroker.configured(expose_topic_level_metrics_in_prometheus=False)
    await broker.authorizer.tenancy.create_namespace("public/other")
    for name, messages in (("default/a", 2), ("default/b", 3), ("other/c", 4)):
        topic = await broker.topic(f"persistent://public/{name}")
        await subscribe(topic, ConsumerSide(), "c")
        producer = new_producer("p")
        topic.add_producer(producer)
        for sequence in range(messages):
            await publish(topic, producer, sequence)
    samples = await scraped(broker)
    default = (("cluster", "standalone"), ("namespace", "public/default"))
    other = (("cluster", "standalone"), ("namespace", "public/other"))
    assert samples[("pulsar_in_messages_total", default)] == 5
    assert samples[("pulsar_in_messages_total", other)] == 4
    assert samples[("pulsar_topics_count", default)] == 2
    assert samples[("pulsar_msg_backlog", default)] == 5
    assert samples[("pulsar_out_messages_total", default)] == 0
    labelled = {name for name, labels in samples if any(k == "topic" for k, _ in labels)}
    assert labelled == set()
    assert not any(name.startswith("pulsar_subscription_back_log") for name, _ in samples)


async def test_the_streamed_families_are_the_collected_ones_and_the_loop_runs_between() -> None:
    broker = MemoryBroker()
    side = ConsumerSide()
    for index in range(100):
        topic = await broker.topic(f"persistent://public/default/t-{index}")
        await subscribe(topic, side, f"c-{index}")
        producer = new_producer(f"p-{index}")
        topic.add_producer(producer)
        await publish(topic, producer, 0)
    registry = broker.broker.metrics.registry
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    ticker = asyncio.ensure_future(tick())
    original = topic_metrics.SLICE_SECONDS
    topic_metrics.SLICE_SECONDS = 0.0
    try:
        streamed = await render_exposition(registry)
    finally:
        topic_metrics.SLICE_SECONDS = original
        ticker.cancel()
    assert ticks > 30  # every few rows and lines, the loop served others
    one_go = samples_of(exposition(registry).decode())  # prometheus_client sorts labels
    assert {(n, tuple(sorted(k))): v for (n, k), v in samples_of(streamed.decode()).items()} == {
        (n, tuple(sorted(k))): v for (n, k), v in one_go.items()
    }
    assert streamed.count(b"\npulsar_in_messages_total{") == 100


def test_write_stats_fill_pulsars_buckets_per_stats_period() -> None:
    stats = WriteStats()
    stats.record(0.0004, 100)  # <= 0.5 ms, <= 128 bytes
    stats.record(0.001, 128)  # a bound is in its own bucket
    stats.record(3.0, 2_000_000)  # overflow, overflow
    assert stats.period == (0,) * 23  # shown: the last closed period
    stats.roll()
    latency, sizes = stats.period[:12], stats.period[12:]
    assert latency == (1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 3, 400 + 1000 + 3_000_000)
    assert sizes == (2, 0, 0, 0, 0, 0, 0, 0, 1, 3, 2_000_228)
    stats.roll()
    assert stats.period == (0,) * 23


async def test_storage_rates_and_the_ack_rate_count_entries_and_messages() -> None:
    broker = MemoryBroker()
    updates = stats_updates_on(broker, clock := Clock())
    topic = await broker.topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    for sequence in range(9):
        await publish(topic, producer, sequence)
    await publish(topic, producer, 9, num_messages_in_batch=5)  # 10 entries, 14 messages
    side = ConsumerSide()
    consumer = await subscribe(topic, side, "c")
    subscription = consumer.subscription
    subscription.on_flow(consumer, 100)
    await settle()
    positions = side.positions_of("c")
    assert len(positions) == 10
    subscription.on_ack(consumer, positions[:3], cumulative=False)  # 3 messages
    subscription.on_ack(consumer, [positions[-1]], cumulative=True)  # 6 and a batch of 5
    before = await scraped(broker)
    assert before[("pulsar_subscription_msg_ack_rate", SUBSCRIPTION)] == 0  # no period yet
    clock.now += 2
    await updates.update()
    samples = await scraped(broker)
    assert samples[("pulsar_storage_write_rate", LABELS)] == 5.0  # entries per second
    assert samples[("pulsar_storage_read_rate", LABELS)] == 5.0
    assert samples[("pulsar_rate_in", LABELS)] == 7.0  # messages per second
    assert samples[("pulsar_subscription_msg_ack_rate", SUBSCRIPTION)] == 7.0
    sums = broker_sums(samples)
    assert (sums["storage_write_rate"], sums["storage_read_rate"]) == (5.0, 5.0)
    clock.now += 1  # a quiet period: every rate falls to zero
    await updates.update()
    quiet = await scraped(broker)
    assert quiet[("pulsar_storage_write_rate", LABELS)] == 0
    assert quiet[("pulsar_storage_read_rate", LABELS)] == 0
    assert quiet[("pulsar_subscription_msg_ack_rate", SUBSCRIPTION)] == 0


async def load_topics(broker: MemoryBroker) -> None:
    """Three topics in two namespaces, each with a producer and a consumer that received
    and acknowledged part of what was published."""
    await broker.authorizer.tenancy.create_namespace("public/other")
    for name, messages in (("default/a", 2), ("default/b", 3), ("other/c", 4)):
        topic = await broker.topic(f"persistent://public/{name}")
        producer = new_producer("p")
        topic.add_producer(producer)
        for sequence in range(messages):
            await publish(topic, producer, sequence)
        side = ConsumerSide()
        consumer = await subscribe(topic, side, "c")
        consumer.subscription.on_flow(consumer, messages - 1)
        await settle()
        consumer.subscription.on_ack(consumer, side.positions_of("c")[:1], cumulative=False)


async def test_the_broker_families_are_the_sums_over_its_topics() -> None:
    broker = MemoryBroker()
    await load_topics(broker)
    await broker.broker.update_stats()  # the broker's own stats update
    samples = await scraped(broker)
    sums = broker_sums(samples)
    assert sums["topics_count"] == 3
    assert (sums["producers_count"], sums["consumers_count"]) == (3, 3)
    assert sums["subscriptions_count"] == 3
    assert sums["msg_backlog"] == 9 - 3  # one acknowledged on each topic
    assert sums["storage_logical_size"] == summed(samples, "storage_logical_size") > 0
    for name in ("rate_in", "rate_out", "storage_write_rate", "storage_read_rate"):
        assert sums[name] > 0, name
    for name in BROKER_SUMS:
        assert sums[name] == pytest.approx(summed(samples, name)), name


async def test_with_topic_level_metrics_off_the_broker_sums_the_namespaces() -> None:
    broker = MemoryBroker.configured(expose_topic_level_metrics_in_prometheus=False)
    updates = stats_updates_on(broker, clock := Clock())
    await load_topics(broker)
    clock.now += 1
    await updates.update()
    samples = await scraped(broker)
    default = (("cluster", "standalone"), ("namespace", "public/default"))
    assert samples[("pulsar_storage_write_rate", default)] == 5.0  # 2 + 3 entries in 1 s
    assert samples[("pulsar_storage_read_rate", default)] == 3.0  # 1 + 2 read
    sums = broker_sums(samples)
    assert (sums["topics_count"], sums["storage_write_rate"], sums["rate_out"]) == (3, 9.0, 6.0)
    for name in BROKER_SUMS:
        assert sums[name] == summed(samples, name), name
    assert not any(name == "pulsar_subscription_msg_ack_rate" for name, _ in samples)


async def test_a_broker_without_topics_shows_its_families_at_zero() -> None:
    samples = await scraped(MemoryBroker())
    assert broker_sums(samples) == dict.fromkeys(BROKER_SUMS, 0)
