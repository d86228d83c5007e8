"""Describes the owners consumer group from a child process.

librdkafka aborts its whole process (a failed assertion, not an exception) when the
connection under a coordinator request such as DescribeConsumerGroups drops mid-call
(confluentinc/librdkafka#4605): a Kafka outage would take the broker down with it. The
call therefore runs in a small child process that speaks JSON lines over its pipes; when
the child dies, the one description in flight fails as retriable and the next one starts
a new child. The child exits when its stdin closes (the broker stopped or was killed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from dataclasses import dataclass

from dedup_broker.errors import ServiceNotReadyError

log = logging.getLogger(__name__)

_START_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class GroupMember:
    client_id: str
    member_id: str
    partitions: tuple[tuple[str, int], ...]
    """The member's assignment: (topic, partition) pairs."""


@dataclass(frozen=True)
class GroupDescription:
    state: str
    members: tuple[GroupMember, ...]


class GroupReader:
    def __init__(self, connection: dict[str, str], group: str, timeout_seconds: float) -> None:
        self._settings = {"connection": connection, "group": group, "timeout": timeout_seconds}
        self._timeout = timeout_seconds
        self._child: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    @property
    def pid(self) -> int | None:
        """The child's pid (None before the first description or after it died)."""
        return self._child.pid if self._child is not None else None

    async def describe(self) -> GroupDescription:
        """The group's state and members; ServiceNotReadyError when Kafka does not answer
        or the child died (the next call starts another)."""
        async with self._lock:
            child = await self._running_child()
            assert child.stdin is not None and child.stdout is not None
            try:
                child.stdin.write(b"describe\n")
                await child.stdin.drain()
                line = await asyncio.wait_for(child.stdout.readline(), self._timeout + 10)
            except (OSError, TimeoutError) as exc:
                await self._discard(child)
                raise ServiceNotReadyError(f"cannot read the cluster's membership: {exc}") from exc
            if not line:
                await self._discard(child)
                raise ServiceNotReadyError(
                    "cannot read the cluster's membership: the group reader exited "
                    f"({child.returncode}); a new one starts with the next lookup"
                )
            answer = json.loads(line)
            if not answer["ok"]:
                # A client that timed out once may never recover its coordinator connection
                # (seen after a Kafka restart): the next description starts a fresh child.
                await self._discard(child)
                raise ServiceNotReadyError(
                    f"cannot read the cluster's membership: {answer['error']}"
                )
            members = tuple(
                GroupMember(m["clientId"], m["memberId"], tuple((t, p) for t, p in m["partitions"]))
                for m in answer["members"]
            )
            return GroupDescription(answer["state"], members)

    async def _running_child(self) -> asyncio.subprocess.Process:
        if self._child is not None and self._child.returncode is None:
            return self._child
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            __name__,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(json.dumps(self._settings).encode() + b"\n")
        await child.stdin.drain()
        ready = await asyncio.wait_for(child.stdout.readline(), _START_TIMEOUT_SECONDS)
        if ready.strip() != b"ready":
            await self._discard(child)
            raise ServiceNotReadyError("the cluster's group reader did not start")
        self._child = child
        return child

    async def _discard(self, child: asyncio.subprocess.Process) -> None:
        if child.returncode is None:
            child.kill()
        await child.wait()
        if self._child is child:
            self._child = None

    async def close(self) -> None:
        child = self._child
        if child is None:
            return
        if child.stdin is not None:
            child.stdin.close()
        try:
            await asyncio.wait_for(child.wait(), 5)
        except TimeoutError:
            child.kill()
            await child.wait()
        self._child = None


def _serve() -> None:
    """The child: one description per ``describe`` line, as one JSON line."""
    from confluent_kafka.admin import AdminClient

    settings = json.loads(sys.stdin.readline())
    admin = AdminClient({**settings["connection"], "log_level": 0})  # the broker logs outages
    group, timeout = settings["group"], float(settings["timeout"])
    print("ready", flush=True)
    for _ in sys.stdin:
        try:
            futures = admin.describe_consumer_groups([group], request_timeout=timeout)
            description = futures[group].result()
            members = [
                {
                    "clientId": member.client_id or "",
                    "memberId": member.member_id or "",
                    "partitions": [
                        [tp.topic, tp.partition]
                        for tp in (member.assignment.topic_partitions if member.assignment else [])
                    ],
                }
                for member in description.members
            ]
            state = str(getattr(description.state, "name", description.state))
            answer: dict[str, object] = {"ok": True, "state": state, "members": members}
        except Exception as exc:  # any failure is the lookup's retriable failure
            answer = {"ok": False, "error": str(exc)}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    _serve()
