"""The owners group is described from a child process: its death (librdkafka aborts the
process it runs in when a coordinator request's connection drops) costs at most one
retriable failure, never the broker."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import pytest
from confluent_kafka import Consumer

from dedup_broker.cluster.group_reader import GroupReader
from dedup_broker.devservers.provision import KafkaService
from dedup_broker.errors import ServiceNotReadyError


def test_members_are_described_and_a_dead_reader_is_replaced(kafka_bootstrap: str) -> None:
    group = f"owners-{uuid.uuid4().hex[:8]}"
    member = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group, "client.id": "member-a"}
    )
    member.subscribe(["__consumer_offsets"])
    for _ in range(50):  # until the member has joined
        member.poll(0.2)
        if member.assignment():
            break

    async def scenario() -> None:
        reader = GroupReader({"bootstrap.servers": kafka_bootstrap}, group, 10.0)
        try:
            description = await reader.describe()
            assert [m.client_id for m in description.members] == ["member-a"]
            assert description.state.upper() == "STABLE"
            first = reader.pid
            assert first is not None
            os.kill(first, signal.SIGKILL)  # as librdkafka's abort would
            await asyncio.sleep(0.2)
            again = await reader.describe()  # a new child answers
            assert [m.client_id for m in again.members] == ["member-a"]
            assert reader.pid not in (None, first)
        finally:
            await reader.close()

    try:
        asyncio.run(scenario())
    finally:
        member.close()


def test_a_reader_dying_mid_request_fails_that_request_only() -> None:
    async def scenario() -> None:
        # Nothing listens there: the description waits out its timeout, and the child
        # is killed meanwhile.
        reader = GroupReader({"bootstrap.servers": "127.0.0.1:9"}, "owners", 20.0)
        try:
            pending = asyncio.ensure_future(reader.describe())
            while reader.pid is None:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            os.kill(reader.pid, signal.SIGKILL)
            with pytest.raises(ServiceNotReadyError, match="group reader exited"):
                await pending
        finally:
            await reader.close()

    asyncio.run(scenario())


async def _answers_within(reader: GroupReader, seconds: float) -> list[str]:
    """Describe until an answer (returns []) or ``seconds`` passed (returns the errors)."""
    errors = []
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        try:
            await reader.describe()
            return []
        except ServiceNotReadyError as exc:
            errors.append(str(exc))
            await asyncio.sleep(1.0)
    return errors or ["no answer"]


def test_descriptions_work_again_after_kafka_restarts(native_kafka: KafkaService) -> None:
    """A description that failed while Kafka was down is not the end: once Kafka is back,
    a later description answers (a client that timed out is replaced)."""
    bootstrap = native_kafka.bootstrap_servers
    group = f"owners-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        reader = GroupReader({"bootstrap.servers": bootstrap}, group, 3.0)
        try:
            assert await _answers_within(reader, 60) == []
            native_kafka.stop()
            with pytest.raises(ServiceNotReadyError):
                await reader.describe()
            native_kafka.start()
            assert await _answers_within(reader, 60) == []
        finally:
            await reader.close()

    asyncio.run(scenario())
