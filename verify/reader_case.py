"""The read that once skipped the rest of a ledger, rebuilt: one broker, deduplication
off, rounds of batched messages with a kill -9 and a restart after each (so the topic has
a ledger per round), then Readers from earliest one after another, each of which must
deliver every message once and in order."""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path

import pulsar

from harness.broker_process import BrokerProcess
from verify.check import Mode, PathSpec
from verify.environment import pulsar_client
from verify.final import READ_MS, RECEIVER_QUEUE
from verify.history import History
from verify.load import id_of, payload
from verify.profiles import Profile

log = logging.getLogger(__name__)

TAG = "reader-case"


def run_reader_case(
    history: History, kafka_bootstrap: str, profile: Profile, run_dir: Path
) -> None:
    (run_dir / "reader-case-broker").mkdir(parents=True, exist_ok=True)
    broker = BrokerProcess(
        kafka_bootstrap,
        cluster_name=f"verify-reader-{uuid.uuid4().hex[:8]}",
        settings={
            "broker_deduplication_enabled": False,
            "default_retention_time_in_minutes": -1,
            "default_retention_size_in_mb": -1,
        },
        log_dir=run_dir / "reader-case-broker",
    )
    topic = f"persistent://public/default/verify-reader-{uuid.uuid4().hex[:8]}"
    history.topic(TAG, topic, rounds=profile.reader_case_rounds)
    broker.start()
    try:
        _publish_rounds(history, broker, topic, profile, run_dir)
        client = pulsar_client(broker.service_url, run_dir / "reader-case-client.log", 60)
        try:
            for read in range(profile.reader_case_reads):
                spec = PathSpec(f"reader#{read + 1}", TAG, Mode.EXACTLY_ONCE, True)
                history.path(spec)
                reader = client.create_reader(
                    topic, pulsar.MessageId.earliest, receiver_queue_size=RECEIVER_QUEUE
                )
                try:
                    while reader.has_message_available():
                        history.delivered(spec, id_of(reader.read_next(READ_MS).data()))
                finally:
                    reader.close()
        finally:
            client.close()
    finally:
        broker.stop()


def _publish_rounds(
    history: History, broker: BrokerProcess, topic: str, profile: Profile, run_dir: Path
) -> None:
    client = pulsar_client(broker.service_url, run_dir / "reader-case-client.log", 60)
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=5,
        block_if_queue_full=True,
        send_timeout_millis=0,
    )
    failed: list[str] = []
    lock = threading.Lock()

    def acked(message_id: int) -> object:
        def done(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
            if result == pulsar.Result.Ok:
                history.acked(TAG, message_id)
            else:
                with lock:
                    failed.append(f"{message_id}: {result}")

        return done

    sent = 0
    try:
        for _ in range(profile.reader_case_rounds):
            for message_id in range(sent, sent + profile.reader_case_per_round):
                producer.send_async(payload(message_id, 100), acked(message_id))
            sent += profile.reader_case_per_round
            history.sent(TAG, sent)
            producer.flush()
            broker.kill()
            broker.start()
    finally:
        client.close()
    if failed:
        raise RuntimeError(f"reader case: {len(failed)} sends failed, e.g. {failed[:3]}")
