"""The broker pings idle clients and drops those that stop answering."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from dedup_broker.protocol import pulsar_api_pb2 as pb
from harness.raw_client import RawConnection
from tests.integration.conftest import make_broker


def test_silent_connection_is_pinged_then_dropped_while_answering_one_stays(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    broker = make_broker(kafka_bootstrap, tmp_path, keep_alive_interval_seconds=1)
    broker.start()
    silent = RawConnection("127.0.0.1", broker.port)
    alive = RawConnection("127.0.0.1", broker.port)
    errors: list[BaseException] = []

    def keep_talking() -> None:
        try:
            for _ in range(20):  # about 4 s; expect() answers the broker's PINGs too
                alive.send(pb.BaseCommand(type=pb.BaseCommand.PING, ping=pb.CommandPing()))
                alive.expect(pb.BaseCommand.PONG, timeout=5)
                time.sleep(0.2)
        except BaseException as exc:
            errors.append(exc)

    try:
        silent.connect()
        alive.connect()
        talker = threading.Thread(target=keep_talking)
        talker.start()
        ping = silent.receive(timeout=5)
        assert ping.command.type == pb.BaseCommand.PING
        assert silent.is_closed_by_peer(timeout=5)
        talker.join(timeout=30)
        assert not errors, errors
    finally:
        silent.close()
        alive.close()
        broker.stop()
