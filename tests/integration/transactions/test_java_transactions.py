"""Transactions of the official Java client on one broker: what readers see before and
after a commit or an abort, a transaction left to time out, and a broker that restarts
(kill -9) with transactions open and ended."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.broker_process import BrokerProcess
from harness.pulsar_java_txn import JavaTransactionError, JavaTransactions
from tests.integration.conftest import serve
from tests.integration.transactions.conftest import (
    abandon_then_see_it_aborted,
    subscribed,
    visible,
)


def test_commit_shows_every_message_at_once_across_two_topics(
    txn_broker: BrokerProcess, topic: str
) -> None:
    url, other = txn_broker.service_url, topic + "-other"
    with JavaTransactions(url) as java:
        java.send_plain(topic, "before")
        java.new()
        java.send(topic, "t1")
        java.send(other, "o1")
        java.send_plain(topic, "after")  # behind the open transaction: held back too
        java.send(topic, "t2")
        assert visible(url, topic) == ["before"]
        assert visible(url, other) == []
        assert subscribed(url, topic, "early", 500) == ["before"]
        java.commit()
    assert visible(url, topic) == ["before", "t1", "after", "t2"]
    assert visible(url, other) == ["o1"]
    # the subscription that waited at the open transaction receives the rest
    assert subscribed(url, topic, "early", 1000) == ["t1", "after", "t2"]


def test_abort_drops_the_messages_for_good(txn_broker: BrokerProcess, topic: str) -> None:
    url = txn_broker.service_url
    with JavaTransactions(url) as java:
        java.new()
        java.send(topic, "a1")
        java.send_plain(topic, "p1")
        java.send(topic, "a2")
        java.abort()
        java.send_plain(topic, "p2")
        java.new()
        java.send(topic, "c1")
        java.commit()
        with pytest.raises(JavaTransactionError):
            java.commit()  # ended already
    assert visible(url, topic) == ["p1", "p2", "c1"]
    assert subscribed(url, topic, "s", 1000) == ["p1", "p2", "c1"]
    txn_broker.restart(kill=True)  # kill -9: the aborted set comes back from the topic
    assert visible(url, topic) == ["p1", "p2", "c1"]
    assert subscribed(url, topic, "s2", 1000) == ["p1", "p2", "c1"]


def test_a_transaction_left_open_is_aborted_after_its_timeout(
    txn_broker: BrokerProcess, topic: str
) -> None:
    url = txn_broker.service_url
    abandon_then_see_it_aborted(url, topic)


def test_a_broker_killed_mid_transaction_keeps_it_whole(
    txn_broker: BrokerProcess, topic: str
) -> None:
    """kill -9 of the broker with one transaction committed and one open: after the
    restart the committed one is visible, the open one still held, and its commit (the
    client's, on the recovered coordinator) shows it whole."""
    url = txn_broker.service_url
    with JavaTransactions(url) as java:
        java.new()
        java.send(topic, "c1")
        java.commit()
        java.new(timeout_seconds=120)
        java.send(topic, "o1")
        java.send(topic, "o2")
        txn_broker.restart(kill=True)
        assert visible(url, topic) == ["c1"]
        java.send(topic, "o3")
        java.commit()
    assert visible(url, topic) == ["c1", "o1", "o2", "o3"]


def test_transactions_are_refused_while_the_coordinator_is_off(
    broker: BrokerProcess, topic: str
) -> None:
    with pytest.raises(Exception, match=r"(?i)transaction"):
        JavaTransactions(broker.service_url, start_timeout=120).close()


def test_consume_process_produce_is_exactly_once_across_an_abort(
    txn_broker: BrokerProcess, topic: str
) -> None:
    """Read from one topic and write to another in one transaction: an aborted step
    leaves its input unacknowledged (delivered again) and its output invisible; the
    committed retry acknowledges the input and shows the output once."""
    url, output = txn_broker.service_url, topic + "-out"
    with JavaTransactions(url) as java:
        for i in range(3):
            java.send_plain(topic, f"in{i}")
        java.new()
        assert java.consume(topic, "app", 3) == ["in0", "in1", "in2"]
        for i in range(3):
            java.send(output, f"out{i}")
        java.abort()
    with JavaTransactions(url) as java:  # the application restarts and tries again
        java.new()
        assert java.consume(topic, "app", 3) == ["in0", "in1", "in2"]
        for i in range(3):
            java.send(output, f"out{i}")
        java.commit()
    assert visible(url, output) == ["out0", "out1", "out2"]
    assert subscribed(url, topic, "app", 1000) == []  # the input is acknowledged
    txn_broker.restart(kill=True)
    assert subscribed(url, topic, "app", 1000) == []
    assert visible(url, output) == ["out0", "out1", "out2"]


def test_a_message_acknowledged_in_one_transaction_conflicts_in_another(
    txn_broker: BrokerProcess, topic: str
) -> None:
    url = txn_broker.service_url
    with JavaTransactions(url) as java:
        java.send_plain(topic, "in0")
        java.new(timeout_seconds=120)
        assert java.consume(topic, "app", 1) == ["in0"]
        txn_broker.restart(kill=True)  # the held acknowledgement outlives the broker
        # a second client on the same (Shared) subscription gets nothing: in0 is held
        assert subscribed(url, topic, "app", 1500) == []
        java.commit()
    assert subscribed(url, topic, "app", 1000) == []


def test_deduplication_drops_a_resent_message_of_a_transaction(
    kafka_bootstrap: str, tmp_path: Path, topic: str
) -> None:
    """With deduplication on, a transactional producer's sequence ids are checked like
    any producer's (as in Pulsar): a message sent again with the same id is not stored
    again, and the transaction holds it once."""
    for broker in serve(
        kafka_bootstrap,
        tmp_path,
        transaction_coordinator_enabled=True,
        broker_deduplication_enabled=True,
    ):
        url = broker.service_url
        with JavaTransactions(url) as java:
            java.new()
            assert not java.send(topic, "m0", sequence_id=0).startswith("-1:-1")
            assert not java.send(topic, "m1", sequence_id=1).startswith("-1:-1")
            assert java.send(topic, "m1-again", sequence_id=1).startswith("-1:-1")
            java.commit()
        assert visible(url, topic) == ["m0", "m1"]


def test_a_cumulative_acknowledgement_in_a_transaction(
    txn_broker: BrokerProcess, topic: str
) -> None:
    """On a Failover subscription: aborted, everything comes again; committed, the
    subscription stands after the last message (also after kill -9 of the broker)."""
    url = txn_broker.service_url
    with JavaTransactions(url) as java:
        for i in range(4):
            java.send_plain(topic, f"in{i}")
        java.new()
        assert java.consume(topic, "app", 3, cumulative=True) == ["in0", "in1", "in2"]
        java.abort()
    with JavaTransactions(url) as java:
        java.new()
        assert java.consume(topic, "app", 3, cumulative=True) == ["in0", "in1", "in2"]
        java.commit()
    txn_broker.restart(kill=True)
    with JavaTransactions(url) as java:
        java.new()
        assert java.consume(topic, "app", 1, cumulative=True) == ["in3"]
        java.commit()
