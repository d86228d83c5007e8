"""Exposition text of the metrics registry, checked byte for byte."""

from __future__ import annotations

import asyncio
import math

import pytest

from dedup_broker.admin import Request, Router, metrics_handler
from dedup_broker.admin.metrics import (
    CONTENT_TYPE,
    DEFAULT_BUCKETS,
    Counter,
    Registry,
    format_value,
    new_registry,
)


def test_counter_with_labels_renders_children_in_creation_order() -> None:
    registry = new_registry()
    published = registry.counter(
        "pulsar_in_messages_total", "Messages published.", ["topic", "producer"]
    )
    published.labels(topic="persistent://public/default/a", producer="p-1").inc()
    child = published.labels("persistent://public/default/b", 'we"ird\\name\nx')
    child.inc(3)
    published.labels(topic="persistent://public/default/a", producer="p-1").inc(2)
    assert registry.render() == (
        "# HELP pulsar_in_messages_total Messages published.\n"
        "# TYPE pulsar_in_messages_total counter\n"
        'pulsar_in_messages_total{topic="persistent://public/default/a",producer="p-1"} 3\n'
        'pulsar_in_messages_total{topic="persistent://public/default/b",'
        'producer="we\\"ird\\\\name\\nx"} 3\n'
    )


def test_labels_returns_the_cached_child() -> None:
    counter = Counter("c_total", "c", ["topic"])
    first = counter.labels(topic="t")
    assert counter.labels("t") is first
    assert counter.labels(topic="u") is not first


def test_unlabelled_counter_gauge_and_help_escaping() -> None:
    registry = Registry()
    errors = registry.counter("errors_total", "Errors.\nSecond line with \\ backslash.")
    errors.inc()
    errors.inc(0.5)
    connections = registry.gauge("connections", "Open connections.")
    connections.inc(5)
    connections.dec(2)
    ratio = registry.gauge("ratio", "A ratio.")
    ratio.set(0.25)
    assert registry.render() == (
        "# HELP errors_total Errors.\\nSecond line with \\\\ backslash.\n"
        "# TYPE errors_total counter\n"
        "errors_total 1.5\n"
        "# HELP connections Open connections.\n"
        "# TYPE connections gauge\n"
        "connections 3\n"
        "# HELP ratio A ratio.\n"
        "# TYPE ratio gauge\n"
        "ratio 0.25\n"
    )


def test_gauge_callback_is_evaluated_at_scrape_time() -> None:
    registry = Registry()
    backlog = registry.gauge("pulsar_msg_backlog", "Unacknowledged messages.", ["topic"])
    depth = {"a": 7}
    backlog.labels(topic="a").set_function(lambda: depth["a"])
    backlog.labels(topic="b").set(2)
    expected = (
        "# HELP pulsar_msg_backlog Unacknowledged messages.\n"
        "# TYPE pulsar_msg_backlog gauge\n"
        'pulsar_msg_backlog{topic="a"} {a}\n'
        'pulsar_msg_backlog{topic="b"} 2\n'
    )
    assert registry.render() == expected.replace("{a}", "7")
    depth["a"] = 11
    assert registry.render() == expected.replace("{a}", "11")
    backlog.labels(topic="a").set_function(None)
    assert registry.render() == expected.replace("{a}", "0")


def test_failing_gauge_callback_drops_only_its_sample(caplog: pytest.LogCaptureFixture) -> None:
    registry = Registry()
    gauge = registry.gauge("g", "g", ["k"])

    def broken() -> float:
        raise RuntimeError("store unavailable")

    gauge.labels(k="bad").set_function(broken)
    gauge.labels(k="good").set(1)
    assert registry.render() == '# HELP g g\n# TYPE g gauge\ng{k="good"} 1\n'
    assert [r.exc_info is not None for r in caplog.records] == [True]


def test_histogram_buckets_are_cumulative_with_inf_sum_and_count() -> None:
    registry = Registry()
    latency = registry.histogram(
        "pulsar_publish_latency_seconds", "Publish latency.", ["topic"], buckets=[0.001, 0.01, 1]
    )
    child = latency.labels(topic="t")
    for value in (0.0005, 0.001, 0.002, 0.5, 3.0):
        child.observe(value)
    assert registry.render() == (
        "# HELP pulsar_publish_latency_seconds Publish latency.\n"
        "# TYPE pulsar_publish_latency_seconds histogram\n"
        'pulsar_publish_latency_seconds_bucket{topic="t",le="0.001"} 2\n'
        'pulsar_publish_latency_seconds_bucket{topic="t",le="0.01"} 3\n'
        'pulsar_publish_latency_seconds_bucket{topic="t",le="1"} 4\n'
        'pulsar_publish_latency_seconds_bucket{topic="t",le="+Inf"} 5\n'
        'pulsar_publish_latency_seconds_sum{topic="t"} 3.5035\n'
        'pulsar_publish_latency_seconds_count{topic="t"} 5\n'
    )


def test_unlabelled_histogram_with_default_buckets() -> None:
    registry = Registry()
    histogram = registry.histogram("h_seconds", "h")
    histogram.observe(0.003)
    histogram.observe(20)
    les = [format_value(b) for b in DEFAULT_BUCKETS] + ["+Inf"]
    assert les[0] == "0.0005" and les[-2] == "10"
    counts = [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2]
    expected = ["# HELP h_seconds h", "# TYPE h_seconds histogram"]
    expected += [f'h_seconds_bucket{{le="{le}"}} {n}' for le, n in zip(les, counts, strict=True)]
    expected += ["h_seconds_sum 20.003", "h_seconds_count 2"]
    assert registry.render() == "\n".join(expected) + "\n"


def test_labelled_metric_without_children_renders_only_help_and_type() -> None:
    registry = Registry()
    registry.counter("a_total", "a", ["topic"])
    assert registry.render() == "# HELP a_total a\n# TYPE a_total counter\n"
    assert Registry().render() == ""


def test_remove_and_clear_forget_series() -> None:
    registry = Registry()
    counter = registry.counter("a_total", "a", ["topic"])
    counter.labels(topic="x").inc()
    counter.labels(topic="y").inc()
    counter.remove(topic="x")
    counter.remove("never-created")
    assert registry.render().splitlines()[2:] == ['a_total{topic="y"} 1']
    counter.clear()
    assert registry.render().splitlines()[2:] == []


def test_misuse_is_refused() -> None:
    registry = Registry()
    counter = registry.counter("a_total", "a", ["topic"])
    with pytest.raises(ValueError, match="already registered"):
        registry.counter("a_total", "again")
    with pytest.raises(ValueError, match=r"use \.labels"):
        counter.inc()
    with pytest.raises(ValueError, match="takes labels"):
        counter.labels(queue="q")
    with pytest.raises(ValueError, match="takes labels"):
        counter.labels("a", "b")
    with pytest.raises(ValueError, match="cannot decrease"):
        counter.labels(topic="t").inc(-1)
    with pytest.raises(ValueError, match="invalid metric name"):
        registry.gauge("bad-name", "x")
    with pytest.raises(ValueError, match="invalid label name"):
        registry.gauge("g", "x", ["__reserved"])
    with pytest.raises(ValueError, match="'le'"):
        registry.histogram("h", "x", ["le"])
    with pytest.raises(ValueError, match="must increase"):
        registry.histogram("h", "x", buckets=[1, 1])
    registry.unregister(counter)
    registry.counter("a_total", "registered again after unregister")


def test_format_value() -> None:
    assert [format_value(v) for v in (3, 2.0, 0.1, math.inf, -math.inf, 1e-05)] == [
        "3",
        "2",
        "0.1",
        "+Inf",
        "-Inf",
        "1e-05",
    ]
    assert format_value(math.nan) == "NaN"


def test_metrics_handler_serves_the_registry() -> None:
    registry = Registry()
    registry.gauge("up", "Broker is up.").set(1)
    router = Router()
    router.add("GET", "/metrics", metrics_handler(registry))
    response = asyncio.run(router.dispatch(Request("GET", "/metrics")))
    assert response.status == 200
    assert response.content_type == CONTENT_TYPE
    assert response.body == b"# HELP up Broker is up.\n# TYPE up gauge\nup 1\n"
