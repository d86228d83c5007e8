"""Partition ends asked for in one turn of the loop, sent to Kafka as one ListOffsets.

Loading thousands of topics at once (a broker restarting, a handover of many slots) asks
Kafka where one ledger topic per managed ledger ends, and every metadata table refresh
asks where its table ends. One admin call per question costs Kafka a request each and the
broker an admin call with its futures each; the questions of one turn go out together
instead, and each asker still gets its own partition's answer, or its own error.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from confluent_kafka import IsolationLevel, TopicPartition

# These names are public API; the package's stubs merely do not re-export them.
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

_Waiters = list["asyncio.Future[int]"]


class PartitionEnds:
    """Batches end-offset queries (``OffsetSpec.latest``) per isolation level."""

    __slots__ = ("_client", "_pending", "_timeout_s")

    def __init__(self, client: AdminClient, timeout_s: float) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._pending: dict[IsolationLevel, dict[tuple[str, int], _Waiters]] = {}

    def end(self, topic: str, partition: int, isolation: IsolationLevel) -> asyncio.Future[int]:
        """The partition's end as ``isolation`` sees it; fails with Kafka's error for it
        (a ``KafkaException``)."""
        loop = asyncio.get_running_loop()
        batch = self._pending.get(isolation)
        if batch is None:
            batch = self._pending[isolation] = {}
            loop.call_soon(self._send, isolation)
        answer: asyncio.Future[int] = loop.create_future()
        batch.setdefault((topic, partition), []).append(answer)
        return answer

    def _send(self, isolation: IsolationLevel) -> None:
        batch = self._pending.pop(isolation)
        loop = asyncio.get_running_loop()
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(topic, p): latest for topic, p in batch}
        try:
            futures = self._client.list_offsets(
                request, isolation_level=isolation, request_timeout=self._timeout_s
            )
        except Exception as exc:  # the request could not be made at all
            for waiters in batch.values():
                _fail(waiters, exc)
            return
        for tp, future in futures.items():
            waiters = batch[(tp.topic, tp.partition)]

            def answered(done: concurrent.futures.Future[Any], waiters: _Waiters = waiters) -> None:
                loop.call_soon_threadsafe(_settle, waiters, done)

            future.add_done_callback(answered)


def _settle(waiters: _Waiters, done: concurrent.futures.Future[Any]) -> None:
    error = done.exception()
    if error is not None:
        _fail(waiters, error)
        return
    offset = int(done.result().offset)
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(offset)


def _fail(waiters: _Waiters, error: BaseException) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_exception(error)
