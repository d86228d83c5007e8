"""A partitioned topic's stats from its partitions' (``topics partitioned-stats``), added
up as Pulsar's ``TopicStatsImpl.add`` does: rates, counters and sizes are summed,
``averageMsgSize`` is the mean of the partitions', publishers and each subscription's
consumers are added by position, subscriptions by name; the earliest creation and the
latest publish time are kept.

It works on the stats as JSON: partitions served by other brokers answer over HTTP."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

TOPIC_SUMS = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "msgInCounter",
    "bytesInCounter",
    "msgOutCounter",
    "bytesOutCounter",
    "storageSize",
    "backlogSize",
    "offloadedStorageSize",
    "waitingPublishers",
)
PUBLISHER_SUMS = ("msgRateIn", "msgThroughputIn", "msgInCounter", "bytesInCounter")
SUBSCRIPTION_SUMS = (
    "msgRateOut",
    "msgThroughputOut",
    "msgRateRedeliver",
    "msgOutCounter",
    "bytesOutCounter",
    "msgBacklog",
    "backlogSize",
    "msgBacklogNoDelayed",
    "msgDelayed",
    "unackedMessages",
)
CONSUMER_SUMS = (
    "msgRateOut",
    "msgThroughputOut",
    "msgRateRedeliver",
    "msgOutCounter",
    "bytesOutCounter",
    "availablePermits",
    "unackedMessages",
)


def aggregate(partitions: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The partitioned topic's totals (without ``metadata`` and ``partitions``)."""
    stats = list(partitions)
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for each in stats:
        subscriptions = each.get("subscriptions")
        for name, subscription in (
            subscriptions if isinstance(subscriptions, dict) else {}
        ).items():
            if isinstance(subscription, dict):
                by_name.setdefault(name, []).append(subscription)
    created = [c for s in stats if (c := _number(s.get("topicCreationTimeStamp"))) > 0]
    return {
        **_sums(stats, TOPIC_SUMS),
        "averageMsgSize": _mean(stats, "averageMsgSize"),
        "topicCreationTimeStamp": int(min(created, default=0)),
        "lastPublishTimeStamp": int(
            max((_number(s.get("lastPublishTimeStamp")) for s in stats), default=0)
        ),
        "publishers": [
            {
                **group[0],
                **_sums(group, PUBLISHER_SUMS),
                "averageMsgSize": _mean(group, "averageMsgSize"),
            }
            for group in _by_position([s.get("publishers") for s in stats])
        ],
        "subscriptions": {name: _subscription(group) for name, group in by_name.items()},
        "replication": {},
    }


def _subscription(group: list[Mapping[str, Any]]) -> dict[str, Any]:
    consumers = _by_position([s.get("consumers") for s in group])
    return {
        **group[-1],
        **_sums(group, SUBSCRIPTION_SUMS),
        "isDurable": any(s.get("isDurable") for s in group),
        "consumers": [{**c[0], **_sums(c, CONSUMER_SUMS)} for c in consumers],
    }


def _by_position(lists: Iterable[object]) -> list[list[Mapping[str, Any]]]:
    """The ``i``-th items of the lists, for each ``i``."""
    groups: list[list[Mapping[str, Any]]] = []
    for items in lists:
        mappings = [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
        for index, item in enumerate(mappings):
            if index == len(groups):
                groups.append([])
            groups[index].append(item)
    return groups


def _sums(group: Iterable[Mapping[str, Any]], keys: tuple[str, ...]) -> dict[str, float]:
    totals: dict[str, float] = dict.fromkeys(keys, 0)
    for stats in group:
        for key in keys:
            totals[key] += _number(stats.get(key))
    return totals


def _mean(group: list[Mapping[str, Any]], key: str) -> float:
    return sum(_number(s.get(key)) for s in group) / len(group) if group else 0.0


def _number(value: object) -> float:
    """A numeric field (absent or not a number: 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return value
