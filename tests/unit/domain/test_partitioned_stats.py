"""A partitioned topic's stats add its partitions' up as Pulsar's ``TopicStatsImpl.add``:
sums, the mean of the average sizes, publishers and consumers by position,
subscriptions by name."""

from __future__ import annotations

from typing import Any

from dedup_broker.domain.partitioned_stats import aggregate


def partition(rate: float, size: float, backlog: int, consumer: str) -> dict[str, Any]:
    return {
        "msgRateIn": rate,
        "msgThroughputIn": rate * size,
        "msgRateOut": rate / 2,
        "msgThroughputOut": rate / 2 * size,
        "msgInCounter": 100,
        "bytesInCounter": int(100 * size),
        "msgOutCounter": 50,
        "bytesOutCounter": int(50 * size),
        "averageMsgSize": size,
        "storageSize": int(100 * size),
        "backlogSize": int(backlog * size),
        "waitingPublishers": 0,
        "deduplicationStatus": "Disabled",
        "publishers": [
            {
                "producerName": "p",
                "msgRateIn": rate,
                "msgThroughputIn": rate * size,
                "averageMsgSize": size,
                "msgInCounter": 100,
                "bytesInCounter": int(100 * size),
            }
        ],
        "subscriptions": {
            "sub": {
                "type": "Shared",
                "isDurable": True,
                "msgRateOut": rate / 2,
                "msgThroughputOut": rate / 2 * size,
                "msgRateRedeliver": 1.0,
                "msgBacklog": backlog,
                "backlogSize": int(backlog * size),
                "msgOutCounter": 50,
                "consumers": [
                    {"consumerName": consumer, "msgRateOut": rate / 2, "availablePermits": 10}
                ],
            }
        },
    }


def test_rates_counters_and_sizes_are_summed() -> None:
    total = aggregate([partition(10.0, 100, 4, "c-0"), partition(30.0, 200, 6, "c-1")])
    assert total["msgRateIn"] == 40.0
    assert total["msgThroughputIn"] == 10.0 * 100 + 30.0 * 200
    assert total["msgRateOut"] == 20.0
    assert total["msgThroughputOut"] == 5.0 * 100 + 15.0 * 200
    assert (total["msgInCounter"], total["msgOutCounter"]) == (200, 100)
    assert total["bytesInCounter"] == 100 * 100 + 100 * 200
    assert total["storageSize"] == 100 * 100 + 100 * 200
    assert total["backlogSize"] == 4 * 100 + 6 * 200
    assert total["averageMsgSize"] == 150.0  # Pulsar: the mean of the partitions'
    assert total["replication"] == {}


def test_publishers_go_by_position_and_subscriptions_by_name() -> None:
    total = aggregate([partition(10.0, 100, 4, "c-0"), partition(30.0, 200, 6, "c-1")])
    [publisher] = total["publishers"]
    assert publisher["producerName"] == "p"
    assert (publisher["msgRateIn"], publisher["msgInCounter"]) == (40.0, 200)
    assert publisher["averageMsgSize"] == 150.0
    subscription = total["subscriptions"]["sub"]
    assert (subscription["type"], subscription["isDurable"]) == ("Shared", True)
    assert subscription["msgRateOut"] == 20.0
    assert subscription["msgRateRedeliver"] == 2.0
    assert subscription["msgBacklog"] == 10
    assert subscription["backlogSize"] == 4 * 100 + 6 * 200
    [consumer] = subscription["consumers"]
    assert (consumer["msgRateOut"], consumer["availablePermits"]) == (20.0, 20)


def test_a_subscription_of_some_partitions_only_and_odd_shapes() -> None:
    first = partition(10.0, 100, 4, "c-0")
    second = partition(10.0, 100, 4, "c-1")
    second["subscriptions"] = {"other": {"msgBacklog": 3, "isDurable": False, "consumers": []}}
    odd = {"msgRateIn": "fast", "publishers": None, "subscriptions": ["not", "a", "map"]}
    total = aggregate([first, second, odd])
    assert total["msgRateIn"] == 20.0
    assert total["subscriptions"]["sub"]["msgBacklog"] == 4
    assert total["subscriptions"]["other"]["msgBacklog"] == 3
    assert total["subscriptions"]["other"]["isDurable"] is False
    assert aggregate([])["averageMsgSize"] == 0.0
