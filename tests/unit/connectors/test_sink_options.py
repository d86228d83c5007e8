"""The sink refuses configurations that could not recognise replays."""

from __future__ import annotations

import pytest

from connectors.sink import PulsarSink
from connectors.sink_options import Routing, SinkMode

URL = "pulsar://127.0.0.1:6650"
TOPIC = "persistent://public/default/t"


def test_sequence_and_columns_modes_need_a_stable_name() -> None:
    with pytest.raises(ValueError, match="name="):
        PulsarSink(URL, TOPIC)
    with pytest.raises(ValueError, match="name="):
        PulsarSink(URL, TOPIC, mode="columns", producer_column="p", sequence_column="o")
    with pytest.raises(ValueError):
        PulsarSink(URL, TOPIC, name="has space")


def test_columns_mode_needs_both_columns() -> None:
    with pytest.raises(ValueError, match="producer_column"):
        PulsarSink(URL, TOPIC, mode="columns", name="q", producer_column="p")


def test_key_mode_needs_a_key_and_no_name() -> None:
    with pytest.raises(ValueError, match="key="):
        PulsarSink(URL, TOPIC, mode="key")
    sink = PulsarSink(URL, TOPIC, mode="key", key="k")
    assert sink.mode is SinkMode.KEY
    assert sink.routing is Routing.KEY


def test_routing_defaults_and_requirements() -> None:
    assert PulsarSink(URL, TOPIC, name="q").routing is Routing.SPARK_PARTITION
    assert PulsarSink(URL, TOPIC, name="q", key="k").routing is Routing.KEY
    with pytest.raises(ValueError, match="partition_column"):
        PulsarSink(URL, TOPIC, name="q", routing="column")
    with pytest.raises(ValueError, match="key="):
        PulsarSink(URL, TOPIC, name="q", routing="key")
    with pytest.raises(ValueError):
        PulsarSink(URL, TOPIC, name="q", routing="round-robin")


def test_num_partitions_must_be_positive() -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        PulsarSink(URL, TOPIC, name="q", order_by=["id"], num_partitions=0)
