"""What an intent may do: every check the worker makes before deleting a ledger's storage.

Order: a valid record; a ledger of this cluster (its id was allocated here); the owning
broker no longer lists it (asked over admin REST while its managed ledger exists); the
ledger's own metadata (header record at offset 0, else its allocation record for a
ledger topic left empty by a crash) names the intent's managed ledger and component;
then the delete. A ledger topic that is gone already counts as deleted.

A listed ledger's Kafka copy may go only when the stored list says its offload is
complete and the copy's deletion was recorded, and the offloaded copy itself is there
and names the ledger. ``OFFLOAD_LEDGER`` intents delete an offloaded copy: the file is
found from this worker's own configuration (never from the intent) and its own header
must name the intent's managed ledger, ledger id and offload uid.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError
from dedup_broker.storage import formats
from dedup_broker.storage.offload_fs import DRIVER, TEMP_SUFFIX, offloader_from_config
from dedup_broker.storage.position import LedgerInfo
from system_topics.decision import Outcome, Verdict
from system_topics.intents import (
    LEDGER,
    OFFLOAD_LEDGER,
    DeletionIntent,
    MalformedIntentError,
    decode_intent,
)
from system_topics.kafka_sync import SyncKafka, SyncTable
from system_topics.registry import broker_urls

log = logging.getLogger(__name__)

HEADER_OFFSET = 0


def parse_injected(spec: str) -> Callable[[int], bool]:
    """``deletionWorkerInjectDeleteFailures``: ``all`` or comma-separated ledger ids."""
    text = spec.strip().lower()
    if not text:
        return lambda ledger_id: False
    if text == "all":
        return lambda ledger_id: True
    ids = {int(part) for part in re.split(r"[,\s]+", text) if part}
    return lambda ledger_id: ledger_id in ids


class IntentChecker:
    def __init__(self, config: BrokerConfig, kafka: SyncKafka) -> None:
        self._cluster = config.cluster_name
        self._kafka = kafka
        self._ids_topic = f"{config.cluster_name}.ledger-ids"
        self._managed_ledgers = SyncTable(kafka, f"{config.cluster_name}.managed-ledgers")
        self._policies = SyncTable(kafka, f"{config.cluster_name}.policies")
        self._fails = parse_injected(config.deletion_worker_inject_delete_failures)
        self._offloader = offloader_from_config(config)
        self._http_timeout = 5.0

    def evaluate(self, value: bytes | None) -> Outcome:
        try:
            intent = decode_intent(value)
        except MalformedIntentError as exc:
            return Outcome(Verdict.MALFORMED, str(exc))
        try:
            return self._evaluate(intent)
        except StorageError as exc:
            return Outcome(Verdict.FAILED, str(exc))

    def _evaluate(self, intent: DeletionIntent) -> Outcome:
        name, ledger_id = intent.topic_name, intent.ledger_id
        if intent.ledger_type not in (LEDGER, OFFLOAD_LEDGER):
            return Outcome(Verdict.NOT_OURS, f"unknown ledger type {intent.ledger_type}")
        if not name or formats.CURSOR_KEY_SEPARATOR in name or ledger_id < 0:
            return Outcome(Verdict.NOT_OURS, f"invalid name or id: {name!r} {ledger_id}")
        if intent.ledger_type == OFFLOAD_LEDGER:
            refused = self._offload_refusal(intent)
            if refused is not None:
                return refused
        allocated_for = self._allocation(ledger_id)
        if allocated_for is None:
            return Outcome(Verdict.NOT_OURS, f"ledger {ledger_id} was never allocated here")
        in_use = self._in_use(name, ledger_id, intent)
        if in_use is not None:
            return in_use
        if intent.ledger_type == OFFLOAD_LEDGER:
            return self._delete_offloaded(intent)
        topic = formats.ledger_topic(self._cluster, ledger_id)
        if not self._kafka.topic_exists(topic):
            return Outcome(Verdict.ALREADY_GONE)
        mismatch = self._check_metadata(topic, name, ledger_id, intent, allocated_for)
        if mismatch is not None:
            return mismatch
        if self._fails(ledger_id):
            return Outcome(Verdict.FAILED, "injected delete failure")
        if self._kafka.delete_topic(topic):
            return Outcome(Verdict.DELETED)
        return Outcome(Verdict.ALREADY_GONE)

    def _allocation(self, ledger_id: int) -> str | None:
        records = self._kafka.read(self._ids_topic, ledger_id, ledger_id + 1)
        if not records or records[0].offset() != ledger_id or records[0].value() is None:
            return None
        value = records[0].value()
        assert value is not None
        return formats.decode_ledger_id_allocation(value)

    def _in_use(self, name: str, ledger_id: int, intent: DeletionIntent) -> Outcome | None:
        """IN_USE if the owner lists it, FAILED if that cannot be known now, else None."""
        self._managed_ledgers.refresh()
        if self._managed_ledgers.get(name) is None:
            return None  # the managed ledger is gone (topic deleted)
        self._policies.refresh()
        urls = broker_urls(self._policies.items())
        if urls:
            answers = [self._ask(url, name, ledger_id, intent) for url in urls]
            if "in-use" in answers:
                return Outcome(Verdict.IN_USE, "the broker still lists it")
            if not all(answer == "deletable" for answer in answers):
                return Outcome(Verdict.FAILED, f"brokers answered {answers}")
            # What the brokers stored before answering is visible now.
            self._managed_ledgers.refresh()
        stored = self._managed_ledgers.get(name)
        if stored is None:
            return None
        info = next(
            (
                i
                for i in formats.decode_managed_ledger_info(stored).ledgers
                if i.ledger_id == ledger_id
            ),
            None,
        )
        if info is None:
            return None
        if intent.ledger_type == OFFLOAD_LEDGER:
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
        if intent.offload.get("driver") != DRIVER:
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
        temp = final.with_name(final.name + TEMP_SUFFIX)
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

    def _ask(self, url: str, name: str, ledger_id: int, intent: DeletionIntent) -> str:
        params = {"managedLedger": name}
        if intent.ledger_type == OFFLOAD_LEDGER:
            params |= {"type": OFFLOAD_LEDGER, "uid": intent.offload.get("uid", "")}
        query = urllib.parse.urlencode(params)
        request = f"{url}/admin/v2/ledger-deletion/ledgers/{ledger_id}?{query}"
        try:
            with urllib.request.urlopen(request, timeout=self._http_timeout) as response:
                return str(json.loads(response.read())["status"])
        except (OSError, ValueError, KeyError) as exc:
            log.info("broker %s did not answer about ledger %d: %s", url, ledger_id, exc)
            return "unreachable"

    def _check_metadata(
        self, topic: str, name: str, ledger_id: int, intent: DeletionIntent, allocated_for: str
    ) -> Outcome | None:
        records = self._kafka.read(topic, HEADER_OFFSET, HEADER_OFFSET + 1)
        if not records:
            _, high = self._kafka.watermarks(topic)
            if high == 0 and allocated_for == name:
                return None  # created, header never written: a crash mid-create
            return Outcome(Verdict.MISMATCH, f"{topic} holds no ledger header")
        header = records[0]
        headers = dict(header.headers() or [])
        value = header.value()
        if headers.get(formats.LEDGER_HEADER_KEY) != formats.LEDGER_HEADER_VALUE or not value:
            return Outcome(Verdict.MISMATCH, f"{topic}: offset 0 is not a ledger header")
        try:
            meta = formats.decode_ledger_metadata(value)
        except Exception as exc:
            return Outcome(Verdict.MISMATCH, f"{topic}: unreadable header: {exc}")
        component, cursor = intent.component, intent.cursor_name
        if (meta.ledger_id, meta.managed_ledger_name, meta.component, meta.cursor_name) != (
            ledger_id,
            name,
            component,
            cursor,
        ):
            return Outcome(
                Verdict.MISMATCH,
                f"{topic} belongs to {meta.managed_ledger_name!r} ({meta.component}), "
                f"the intent says {name!r} ({component})",
            )
        return None
