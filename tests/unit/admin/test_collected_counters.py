"""prometheus_client counters served by the broker's registry: the same lines as native
counters, read live, without the ``_created`` series."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as ClientCounter

from dedup_broker.admin.collected import show_counters
from dedup_broker.admin.metrics import new_registry


def test_collected_counters_render_like_native_ones() -> None:
    source = CollectorRegistry()
    sent = ClientCounter(
        "dedup_broker_ledger_deletion_intents_sent_total",
        "Deletion intents Kafka acknowledged",
        ("type",),
        registry=source,
    )
    plain = ClientCounter("plain_total", 'Help with "quotes"', registry=source)
    native = new_registry()
    native.counter("native_total", "Native")
    show_counters(source, native)

    sent.labels(type="ledger").inc()
    sent.labels(type="ledger").inc()
    sent.labels(type='odd"value').inc(3)
    plain.inc()
    assert native.render() == (
        "# HELP native_total Native\n"
        "# TYPE native_total counter\n"
        "native_total 0\n"
        "# HELP dedup_broker_ledger_deletion_intents_sent_total "
        "Deletion intents Kafka acknowledged\n"
        "# TYPE dedup_broker_ledger_deletion_intents_sent_total counter\n"
        'dedup_broker_ledger_deletion_intents_sent_total{type="ledger"} 2\n'
        'dedup_broker_ledger_deletion_intents_sent_total{type="odd\\"value"} 3\n'
        '# HELP plain_total Help with "quotes"\n'
        "# TYPE plain_total counter\n"
        "plain_total 1\n"
    )
    plain.inc()
    assert "plain_total 2\n" in native.render()
