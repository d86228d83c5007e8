"""Topic creations, deletions and descriptions sent to Kafka in batches.

Kafka answers one request per connection at a time, and a CreateTopics or DeleteTopics
request waits for the controller: one topic per request, a deletion worker deleted about
35 ledger topics a second, the same request with a hundred topics in it took about as
long as with one. So what is asked while a request is in flight goes together in the
next one, and a caller waits only for its own topic's answer.

A request carries at most ``MAX_TOPICS_PER_REQUEST`` topics: Kafka's controller refuses
a request that would write too many records at once ("Unable to perform excessively
large batch operation", seen with 2,000 ledger topics, each with its configuration).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from confluent_kafka import KafkaException

from dedup_broker.errors import StorageError

MAX_TOPICS_PER_REQUEST = 500

Item = TypeVar("Item")
SendBatch = Callable[[list[Item]], Mapping[str, "concurrent.futures.Future[None]"]]
"""Sends one request for the items; Kafka's answer per topic."""
Answer = Callable[[str, KafkaException | None], bool]
"""What Kafka's answer for one topic means (None: success); raises StorageError if failed."""


@dataclass(slots=True)
class _Pending(Generic[Item]):
    item: Item
    done: asyncio.Future[bool]

    def settle(self, result: bool) -> None:
        if not self.done.done():
            self.done.set_result(result)

    def fail(self, error: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(error)


class TopicBatches(Generic[Item]):
    """One kind of topic request (``what``: "create topics", "delete topics").

    ``shared``: a topic asked for again before its request was sent gets the same
    answer (a question); otherwise False (an action: done by the first asker).
    """

    def __init__(
        self, what: str, send: SendBatch[Item], answer: Answer, shared: bool = False
    ) -> None:
        self._what = what
        self._shared = shared
        self._send = send
        self._answer = answer
        self._pending: dict[str, _Pending[Item]] = {}
        self._sender: asyncio.Task[None] | None = None

    async def ask(self, topic: str, item: Item) -> bool:
        """Kafka's answer for ``topic``, sent with whatever else is asked meanwhile.

        Asked again before the first was sent, the second asker of an action gets False
        (for a creation: it existed; for a deletion: it was gone), as it would one request
        later; the second asker of a question gets the same answer.
        """
        pending = self._pending.get(topic)
        if pending is not None:
            answer = await asyncio.shield(pending.done)
            return answer if self._shared else False
        loop = asyncio.get_running_loop()
        mine = _Pending(item, loop.create_future())
        self._pending[topic] = mine
        if self._sender is None or self._sender.done():
            self._sender = loop.create_task(self._send_pending())
        return await asyncio.shield(mine.done)

    async def _send_pending(self) -> None:
        while self._pending:
            topics = list(self._pending)[:MAX_TOPICS_PER_REQUEST]
            batch = {topic: self._pending.pop(topic) for topic in topics}
            try:
                futures = self._send([pending.item for pending in batch.values()])
            except Exception as exc:  # a refused request fails each of its topics
                for pending in batch.values():
                    pending.fail(StorageError(f"{self._what}: {exc}"))
                continue
            for topic, pending in batch.items():
                error: KafkaException | None = None
                try:
                    await asyncio.wrap_future(futures[topic])
                except KafkaException as exc:
                    error = exc
                except Exception as exc:  # no answer for it: it failed, the rest go on
                    pending.fail(StorageError(f"{self._what}: {topic}: {exc}"))
                    continue
                try:
                    pending.settle(self._answer(topic, error))
                except StorageError as failed:
                    pending.fail(failed)
