"""What an intent may do: every check the worker makes before deleting a ledger's storage.

Order: a valid record; a ledger of this cluster (its id was allocated here); the owning
broker no longer lists it (asked over admin REST while its managed ledger exists); the
ledger's own metadata (its header, else its allocation record for a ledger topic left
empty by a crash) names the intent's managed ledger and component; then the delete. A
ledger whose Kafka copy is gone already counts as deleted. Everything storage holds is
read through the storage layer's :class:`LedgerCatalog`.

A listed ledger's Kafka copy may go only when the stored list says its offload is
complete and the copy's deletion was recorded, and the offloaded copy itself is there
and names the ledger. ``OFFLOAD_LEDGER`` intents delete an offloaded copy: the file is
found from this worker's own configuration (never from the intent) and its own header
must name the intent's managed ledger, ledger id and offload uid.
"""

from __future__ import annotations

import logging
import re
import urllib.parse
from collections.abc import Callable

import aiohttp

from dedup_broker.cluster.owners import OwnerState, TopicOwners
from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import ServiceNotReadyError, StorageError
from dedup_broker.security.broker_client import (
    broker_client_headers,
    broker_client_ssl_context,
    broker_client_web_url,
)
from dedup_broker.storage.api import (
    FILESYSTEM_OFFLOAD_DRIVER,
    OFFLOAD_TEMP_SUFFIX,
    LedgerCatalog,
    LedgerHeaderError,
    LedgerInfo,
    LedgerStatus,
    LedgerType,
    OffloadStore,
    is_valid_managed_ledger_name,
)
from system_topics.decision import Outcome, Verdict
from system_topics.intents import DeletionIntent

log = logging.getLogger(__name__)

_HTTP_TIMEOUT = aiohttp.ClientTimeout(total=5.0)


def parse_injected(spec: str) -> Callable[[int], bool]:
    """``deletionWorkerInjectDeleteFailures``: ``all`` or comma-separated ledger ids."""
    text = spec.strip().lower()
    if not text:
        return lambda ledger_id: False
    if text == "all":
        return lambda ledger_id: True
    ids = {int(part) for part in re.split(r"[,\s]+", text) if part}
    return lambda ledger_id: ledger_id in ids


def _status_query(url: str, intent: DeletionIntent) -> str:
    """The broker's ``GET .../ledger-deletion/ledgers/{id}`` for the intent's copy."""
    params = {"managedLedger": intent.topic_name}
    if intent.ledger_type is LedgerType.OFFLOAD_LEDGER:
        params |= {"type": intent.ledger_type.value, "uid": intent.offload.get("uid", "")}
    query = urllib.parse.urlencode(params)
    return f"{url}/admin/v2/ledger-deletion/ledgers/{intent.ledger_id}?{query}"


class IntentChecker:
    def __init__(
        self,
        config: BrokerConfig,
        catalog: LedgerCatalog,
        owners: TopicOwners,
        offloader: OffloadStore | None,
    ) -> None:
        """``offloader``: this worker's own tiered storage (never the intent's word)."""
        self._cluster = config.cluster_name
        self._catalog = catalog
        self._owners = owners
        self._offloader = offloader
        self._fails = parse_injected(config.deletion_worker_inject_delete_failures)
        self._headers = broker_client_headers(config)
        self._ssl = broker_client_ssl_context(config)
        self._config = config
        self._session: aiohttp.ClientSession | None = None
        """One session for every question to the brokers: its connections are kept."""

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def evaluate(self, intent: DeletionIntent) -> Outcome:
        try:
            return await self._evaluate(intent)
        except StorageError as exc:
            return Outcome(Verdict.FAILED, str(exc))

    async def _evaluate(self, intent: DeletionIntent) -> Outcome:
        name, ledger_id = intent.topic_name, intent.ledger_id
        if not is_valid_managed_ledger_name(name) or ledger_id < 0:
            return Outcome(Verdict.NOT_OURS, f"invalid name or id: {name!r} {ledger_id}")
        offload = intent.ledger_type is LedgerType.OFFLOAD_LEDGER
        if offload:
            refused = self._offload_refusal(intent)
            if refused is not None:
                return refused
        allocated_for = await self._catalog.allocated_for(ledger_id)
        if allocated_for is None:
            return Outcome(Verdict.NOT_OURS, f"ledger {ledger_id} was never allocated here")
        in_use = await self._in_use(intent)
        if in_use is not None:
            return in_use
        if offload:
            return self._delete_offloaded(intent)
        if not await self._catalog.ledger_exists(ledger_id):
            return Outcome(Verdict.ALREADY_GONE)
        mismatch = await self._check_metadata(intent, allocated_for)
        if mismatch is not None:
            return mismatch
        if self._fails(ledger_id):
            return Outcome(Verdict.FAILED, "injected delete failure")
        if await self._catalog.delete_ledger(ledger_id):
            return Outcome(Verdict.DELETED)
        return Outcome(Verdict.ALREADY_GONE)

    async def _in_use(self, intent: DeletionIntent) -> Outcome | None:
        """IN_USE if the owner lists it, FAILED if that cannot be known now, else None."""
        name = intent.topic_name
        if await self._catalog.stored_ledgers(name) is None:
            return None  # the managed ledger is gone (topic deleted)
        topic = TopicName.from_managed_ledger_name(name)
        if topic is None:
            return Outcome(Verdict.NOT_OURS, f"{name!r} is not a topic's managed ledger")
        try:
            owner = await self._owners.owner_of(topic)
        except ServiceNotReadyError as exc:
            return Outcome(Verdict.FAILED, str(exc))
        if owner.state is OwnerState.MOVING:
            return Outcome(Verdict.FAILED, f"{topic} is moving between brokers; asked again later")
        if owner.broker is not None:
            # The owner is the one broker that may hold the topic open and change its list.
            broker = owner.broker
            url = broker_client_web_url(self._config, broker.web_url, broker.web_url_tls)
            answer = await self._ask(url, intent)
            if answer is LedgerStatus.IN_USE:
                return Outcome(Verdict.IN_USE, "the owning broker still lists it")
            if answer is not LedgerStatus.DELETABLE:
                said = answer.value if answer else "no answer"
                return Outcome(Verdict.FAILED, f"the owning broker answered {said}")
        stored = await self._catalog.stored_ledgers(name)
        verdict = self._stored_verdict(name, intent, stored or [])
        if verdict is not None and verdict.verdict is Verdict.IN_USE and owner.broker is not None:
            # The owner stored its change before answering, but Kafka makes a committed
            # transaction visible to readers only once its markers are written: the list
            # read here may not show it yet. Ask again rather than drop the intent.
            return Outcome(
                Verdict.FAILED,
                f"the owning broker let it go; the stored list lags ({verdict.detail})",
            )
        return verdict

    async def _ask(self, url: str, intent: DeletionIntent) -> LedgerStatus | None:
        """What the broker at ``url`` says about the intent's copy; None without an answer."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=_HTTP_TIMEOUT, headers=self._headers)
        try:
            async with self._session.get(_status_query(url, intent), ssl=self._ssl) as reply:
                if reply.status >= 300:
                    raise ValueError(f"HTTP {reply.status} {reply.reason}")
                return LedgerStatus((await reply.json(content_type=None))["status"])
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
            log.info("broker %s did not answer about ledger %d: %s", url, intent.ledger_id, exc)
            return None

    def _stored_verdict(
        self, name: str, intent: DeletionIntent, stored: list[LedgerInfo]
    ) -> Outcome | None:
        """IN_USE if the stored list still needs this copy, else None."""
        info = next((i for i in stored if i.ledger_id == intent.ledger_id), None)
        if info is None:
            return None
        if intent.ledger_type is LedgerType.OFFLOAD_LEDGER:
            if info.offload is not None and info.offload.uid == intent.offload.get("uid"):
                return Outcome(Verdict.IN_USE, "the offloaded copy is listed")
            return None
        return self._kafka_copy_may_go(name, info)

    def _kafka_copy_may_go(self, name: str, info: LedgerInfo) -> Outcome | None:
        """A listed ledger loses its Kafka copy only once a verified offloaded copy exists
        and the deletion is recorded; otherwise it is in use."""
        offload = info.offload
        if offload is None or not offload.complete or not offload.kafka_deleted:
            return Outcome(Verdict.IN_USE, "listed, and its offload is not complete")
        if self._offloader is None:
            return Outcome(Verdict.IN_USE, "listed and offloaded, but no offloader here")
        try:
            header = self._offloader.read_header(self._offloader.path(info.ledger_id, offload.uid))
        except (OSError, StorageError) as exc:
            return Outcome(Verdict.IN_USE, f"listed; its offloaded copy is not readable: {exc}")
        if (header.ledger_id, header.managed_ledger_name, header.uid) != (
            info.ledger_id,
            name,
            offload.uid,
        ) or header.entries != info.entries:
            return Outcome(Verdict.IN_USE, "listed; its offloaded copy does not match")
        return None

    # --- offloaded copies -------------------------------------------------------------
    def _offload_refusal(self, intent: DeletionIntent) -> Outcome | None:
        if self._offloader is None:
            return Outcome(Verdict.NOT_OURS, "no tiered storage is configured here")
        if intent.offload.get("driver") != FILESYSTEM_OFFLOAD_DRIVER:
            return Outcome(Verdict.NOT_OURS, f"offload driver {intent.offload.get('driver')!r}")
        uid = intent.offload.get("uid", "")
        if not re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", uid):
            return Outcome(Verdict.NOT_OURS, f"no valid offload uid: {uid!r}")
        return None

    def _delete_offloaded(self, intent: DeletionIntent) -> Outcome:
        offloader = self._offloader
        assert offloader is not None
        uid = intent.offload["uid"]
        final = offloader.path(intent.ledger_id, uid)
        temp = final.with_name(final.name + OFFLOAD_TEMP_SUFFIX)
        present = [path for path in (final, temp) if path.exists()]
        if not present:
            return Outcome(Verdict.ALREADY_GONE)
        try:
            header = offloader.read_header(present[0])
        except FileNotFoundError:
            return Outcome(Verdict.ALREADY_GONE)
        except StorageError as exc:
            # A temp file cut short by a crash before its header reached the disk.
            if present[0] == temp and temp.stat().st_size < 64:
                header = None
            else:
                return Outcome(Verdict.MISMATCH, str(exc))
        if header is not None and (
            header.ledger_id,
            header.managed_ledger_name,
            header.uid,
            header.component,
            header.cluster_name,
        ) != (intent.ledger_id, intent.topic_name, uid, intent.component, self._cluster):
            return Outcome(
                Verdict.MISMATCH,
                f"{present[0].name} belongs to {header.managed_ledger_name!r} "
                f"(ledger {header.ledger_id}), the intent says {intent.topic_name!r}",
            )
        if self._fails(intent.ledger_id):
            return Outcome(Verdict.FAILED, "injected delete failure")
        try:
            deleted = offloader.delete(intent.ledger_id, uid)
        except OSError as exc:
            return Outcome(Verdict.FAILED, f"deleting {final}: {exc}")
        return Outcome(Verdict.DELETED if deleted else Verdict.ALREADY_GONE)

    async def _check_metadata(self, intent: DeletionIntent, allocated_for: str) -> Outcome | None:
        """MISMATCH unless the ledger's header names the intent's owner and component."""
        name, ledger_id = intent.topic_name, intent.ledger_id
        try:
            meta = await self._catalog.ledger_header(ledger_id)
        except LedgerHeaderError as exc:
            return Outcome(Verdict.MISMATCH, str(exc))
        if meta is None:
            if allocated_for == name:
                return None  # created, header never written: a crash mid-create
            return Outcome(Verdict.MISMATCH, f"ledger {ledger_id} holds no ledger header")
        component, cursor = intent.component, intent.cursor_name
        if (meta.ledger_id, meta.managed_ledger_name, meta.component, meta.cursor_name) != (
            ledger_id,
            name,
            component,
            cursor,
        ):
            return Outcome(
                Verdict.MISMATCH,
                f"ledger {ledger_id} belongs to {meta.managed_ledger_name!r} "
                f"({meta.component}), the intent says {name!r} ({component})",
            )
        return None
