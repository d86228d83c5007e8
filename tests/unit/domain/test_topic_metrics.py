"""Pulsar's per-topic metric families: read from the topics' own numbers, labelled as
Pulsar labels them, summed per namespace on request, and streamed in slices that give
the event loop back."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from dedup_broker.domain import topic_metrics
from dedup_broker.domain.write_stats import WriteStats
from dedup_broker.metrics_registry import exposition, render_exposition
from harness.domain_links import ConsumerSide, new_producer, publish, subscribe
from harness.memory_broker import MemoryBroker

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
