"""The wire client: an event loop in a thread of its own, connections shared per broker,
partitioned metadata, and lookups that follow redirects through a cluster."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from connectors.wire.connection import BrokerConnection
from connectors.wire.errors import ConnectionClosedError, WireError
from connectors.wire.settings import BrokerAddress, WireSettings
from dedup_broker.protocol import client_commands as commands
from dedup_broker.protocol import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_REDIRECTS = 20
FIRST_BACKOFF_SECONDS = 0.1
MAX_BACKOFF_SECONDS = 2.0
"""Retries come quickly: a restarted broker serves again within seconds, and a Spark task
has only its send timeout to ride a restart out."""
CLOSE_TIMEOUT_SECONDS = 5.0

_ConnectionKey = tuple[str, str | None]


class WireClient:
    """Connections to one cluster (``service_url``), driven by a thread of their own.

    Use it from any thread: :meth:`run` runs a coroutine on the client's loop and waits
    for its result; producers and readers hand their work over the same way.
    """

    def __init__(self, service_url: str, settings: WireSettings | None = None) -> None:
        self.service_url = service_url
        self.service_addresses = BrokerAddress.parse_all(service_url)
        self.service_address = self.service_addresses[0]
        """The service URL's host in use; the next one when it cannot be reached."""
        self.settings = settings or WireSettings()
        self.loop = asyncio.new_event_loop()
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._connections: dict[_ConnectionKey, asyncio.Future[BrokerConnection]] = {}
        self._thread = threading.Thread(target=self._serve, name="wire-client", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    # --- from any thread ----------------------------------------------------------------
    def run(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``work`` on the client's loop; its result, or its exception."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)

    def call_soon(self, callback: Callable[..., None], *args: Any) -> None:
        self.loop.call_soon_threadsafe(callback, *args)

    def next_id(self) -> int:
        """Request, producer and consumer ids: unique within the client."""
        with self._lock:
            return next(self._ids)

    def partitions(self, topic: str) -> list[str]:
        """The topics to publish to or read: ``topic-partition-N`` of a partitioned topic,
        else the topic itself."""
        count = self.run(self.retrying(lambda: self._partition_count(topic)))
        if count <= 0:
            return [topic]
        return [f"{topic}-partition-{i}" for i in range(count)]

    def close(self) -> None:
        """Close every connection and stop the loop's thread."""
        if self.loop.is_closed():
            return
        try:
            self.run(self._close_connections(), timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self.loop.close()

    # --- on the loop --------------------------------------------------------------------
    async def connection(
        self, address: BrokerAddress, proxy_to: str | None = None
    ) -> BrokerConnection:
        """An open connection to ``address``, shared by everyone who asks for it."""
        key = (str(address), proxy_to)
        pending = self._connections.get(key)
        if pending is not None:
            if not pending.done():
                return await asyncio.shield(pending)
            if pending.exception() is None and not pending.result().closed:
                return pending.result()
        future: asyncio.Future[BrokerConnection] = self.loop.create_future()
        self._connections[key] = future
        try:
            connection = await BrokerConnection.open(address, self.settings, proxy_to)
        except BaseException as exc:
            if self._connections.get(key) is future:
                del self._connections[key]
            future.set_exception(exc)
            future.exception()  # whoever shared it raised it already
            raise
        connection.when_closed(lambda _: self._forget(key, future))
        future.set_result(connection)
        return connection

    def _forget(self, key: _ConnectionKey, future: asyncio.Future[BrokerConnection]) -> None:
        if self._connections.get(key) is future:
            del self._connections[key]

    async def service_connection(self) -> BrokerConnection:
        """A connection to one of the service URL's hosts: the one in use, else the next
        one that answers (as the official clients go round a list of hosts)."""
        hosts = len(self.service_addresses)
        first = self.service_addresses.index(self.service_address)
        for step in range(hosts):
            address = self.service_addresses[(first + step) % hosts]
            try:
                connection = await self.connection(address)
            except ConnectionClosedError:
                if step == hosts - 1:
                    raise
                continue
            self.service_address = address
            return connection
        raise AssertionError("a service URL names at least one host")

    async def lookup(self, topic: str) -> BrokerConnection:
        """A connection to the broker that serves ``topic``, following redirects."""
        connection = await self.service_connection()
        address, authoritative = connection.address, False
        for _ in range(MAX_REDIRECTS):
            connection = await self.connection(address)
            request_id = self.next_id()
            answer = await connection.request(
                commands.lookup(topic, request_id, authoritative), request_id
            )
            lookup = answer.lookupTopicResponse
            url = lookup.brokerServiceUrl
            if self.service_address.tls and lookup.brokerServiceUrlTls:
                url = lookup.brokerServiceUrlTls
            target = BrokerAddress.parse(url) if url else address
            if lookup.response == pb.CommandLookupTopicResponse.Redirect:
                address, authoritative = target, lookup.authoritative
                continue
            if lookup.proxy_through_service_url:
                if target == self.service_address:
                    return await self.connection(self.service_address)
                return await self.connection(self.service_address, proxy_to=url)
            return await self.connection(target)
        raise WireError(f"the lookup of {topic} was redirected more than {MAX_REDIRECTS} times")

    async def _partition_count(self, topic: str) -> int:
        connection = await self.service_connection()
        request_id = self.next_id()
        answer = await connection.request(
            commands.partitioned_metadata(topic, request_id), request_id
        )
        return int(answer.partitionMetadataResponse.partitions)

    async def retrying(
        self, attempt: Callable[[], Awaitable[T]], timeout: float | None = None
    ) -> T:
        """``attempt`` until it succeeds, fails for good, or the time is up (default: the
        operation timeout; ``math.inf``: until cancelled), backing off in between."""
        deadline = self.loop.time() + (timeout or self.settings.operation_timeout)
        backoff = FIRST_BACKOFF_SECONDS
        while True:
            try:
                return await attempt()
            except WireError as exc:
                if not exc.retriable or self.loop.time() + backoff > deadline:
                    raise
                log.info("trying again in %.1fs: %s", backoff, exc)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    async def request_quietly(
        self, connection: BrokerConnection, build: Callable[[int], pb.BaseCommand]
    ) -> None:
        """A closing request (CLOSE_PRODUCER, CLOSE_CONSUMER): its failure changes nothing."""
        request_id = self.next_id()
        try:
            await asyncio.wait_for(
                connection.request(build(request_id), request_id), CLOSE_TIMEOUT_SECONDS
            )
        except (WireError, TimeoutError) as exc:
            log.debug("%s: %s", pb.BaseCommand.Type.Name(build(request_id).type), exc)

    async def _close_connections(self) -> None:
        for future in list(self._connections.values()):
            if future.done() and future.exception() is None:
                future.result().close()
        self._connections.clear()
