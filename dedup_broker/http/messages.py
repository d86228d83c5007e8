"""Messages through the admin API, in Pulsar's REST shape:

- ``GET .../{topic}/ledger/{ledgerId}/entry/{entryId}``: one entry (``pulsar-admin topics
  get-message-by-id``): its payload, uncompressed, and its metadata as Pulsar's
  ``X-Pulsar-*`` headers, which the admin clients turn back into messages (a batch's
  messages split by the client from ``X-Pulsar-num-batch-message``);
- ``GET .../{topic}/examinemessage?initialPosition=earliest|latest&messagePosition=N``: the
  N-th entry from either end;
- ``GET .../{topic}/subscription/{subscription}/position/{n}``: the n-th message the
  subscription has not acknowledged (``pulsar-admin topics peek-messages``); a
  subscription that does not exist is created at the earliest message, as Pulsar does;
- ``GET .../{topic}/messageid/{timestamp}``: the id of the first message published at or
  after ``timestamp`` (ms);
- ``POST .../{topic}/terminate``: no more messages; answers the last message id.
"""

from __future__ import annotations

import json
import re
from http import HTTPStatus

from aiohttp import web

from dedup_broker.domain import subscription_admin
from dedup_broker.domain.registry import TopicRegistry
from dedup_broker.domain.termination import TopicTerminatedError
from dedup_broker.domain_base.dates import pulsar_date
from dedup_broker.errors import EntryNotFoundError
from dedup_broker.http.bodies import json_response
from dedup_broker.http.errors import ErrorStatuses, HttpError
from dedup_broker.http.paths import TOPIC, query_value, topic_of
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import decompress
from dedup_broker.protocol.framing import parse_message
from dedup_broker.storage.api import Entry, Position

MESSAGES_ERROR_STATUSES: ErrorStatuses = {
    EntryNotFoundError: HTTPStatus.NOT_FOUND,
    TopicTerminatedError: HTTPStatus.PRECONDITION_FAILED,
}

_COMPRESSION_NAMES = {
    pb.NONE: "NONE",
    pb.LZ4: "LZ4",
    pb.ZLIB: "ZLIB",
    pb.ZSTD: "ZSTD",
    pb.SNAPPY: "SNAPPY",
}


def message_routes(topics: TopicRegistry) -> list[web.RouteDef]:
    api = _MessagesApi(topics)
    return [
        web.get(TOPIC + "/ledger/{ledgerId}/entry/{entryId}", api.message_by_id),
        web.get(TOPIC + "/examinemessage", api.examine),
        web.get(TOPIC + "/subscription/{subscription}/position/{position}", api.peek),
        web.get(TOPIC + "/messageid/{timestamp}", api.message_id_at),
        web.post(TOPIC + "/terminate", api.terminate),
    ]


class _MessagesApi:
    def __init__(self, topics: TopicRegistry) -> None:
        self.topics = topics

    async def message_by_id(self, request: web.Request) -> web.Response:
        topic = await self.topics.loaded(topic_of(request))
        try:
            position = Position(
                int(request.match_info["ledgerId"]), int(request.match_info["entryId"])
            )
        except ValueError:
            raise HttpError(HTTPStatus.BAD_REQUEST, "ledgerId and entryId are numbers") from None
        ledger = topic.managed_ledger
        if position < ledger.first_position() or position > ledger.last_confirmed:
            raise EntryNotFoundError(f"Message id {position} not found")
        return entry_response(await ledger.read_entry(position))

    async def examine(self, request: web.Request) -> web.Response:
        """Pulsar counts entries from the first one (``earliest``) or back from the last
        (``latest``, the default); ``messagePosition`` 1 is that end itself."""
        topic = await self.topics.loaded(topic_of(request))
        initial = query_value(request, "initialPosition", "latest").lower()
        try:
            steps = int(query_value(request, "messagePosition", "1"))
        except ValueError:
            raise HttpError(HTTPStatus.BAD_REQUEST, "messagePosition is a number") from None
        if initial not in ("earliest", "latest") or steps < 1:
            raise HttpError(
                HTTPStatus.PRECONDITION_FAILED,
                "initialPosition is earliest or latest, messagePosition at least 1",
            )
        ledger = topic.managed_ledger
        if ledger.number_of_entries() < steps:
            raise EntryNotFoundError(
                f"Could not examine messages due to the total message count is less than "
                f"messagePosition {steps}"
            )
        position = ledger.first_position() if initial == "earliest" else ledger.last_confirmed
        for _ in range(steps - 1):
            position = (
                ledger.next_position(position)
                if initial == "earliest"
                else ledger.previous_position(position)
            )
        return entry_response(await ledger.read_entry(position))

    async def peek(self, request: web.Request) -> web.Response:
        """Counted from the subscription's mark-delete position, skipping what it
        acknowledged individually (1: its first unacknowledged message)."""
        topic = await self.topics.loaded(topic_of(request))
        steps = _whole(request.match_info["position"], "the message position")
        name = request.match_info["subscription"]
        if name not in topic.subscriptions:
            await subscription_admin.ensure_subscription(topic, name)
        cursor = topic.subscriptions[name].cursor
        ledger = topic.managed_ledger
        position = cursor.mark_delete_position
        while steps > 0:
            position = ledger.next_position(position)
            if position > ledger.last_confirmed:
                raise EntryNotFoundError("Message not found")
            if not cursor.is_acknowledged(position):
                steps -= 1
        return entry_response(await ledger.read_entry(position))

    async def message_id_at(self, request: web.Request) -> web.Response:
        name = topic_of(request)
        topic = await self.topics.loaded(name)
        timestamp = _whole(request.match_info["timestamp"], "the timestamp")
        ledger = topic.managed_ledger
        position = await ledger.find_position_by_time(timestamp)
        if position > ledger.last_confirmed or position < ledger.first_position():
            raise EntryNotFoundError(f"no message published at or after {timestamp} in {name}")
        return json_response(
            {
                "ledgerId": position.ledger_id,
                "entryId": position.entry_id,
                "partitionIndex": name.partition_index,
            }
        )

    async def terminate(self, request: web.Request) -> web.Response:
        name = topic_of(request)
        topic = await self.topics.loaded(name)
        last = await topic.terminate()
        return json_response(
            {
                "ledgerId": last.ledger_id,
                "entryId": last.entry_id,
                "partitionIndex": name.partition_index,
            }
        )


def _whole(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{what} is a number, got {text!r}") from None


_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
"""What an HTTP header name may hold: a property named otherwise (``details=man``) travels
only in ``X-Pulsar-Property``, as clients would refuse the whole answer."""


def entry_response(entry: Entry) -> web.Response:
    """Pulsar's answer for one entry: the payload (uncompressed) and the metadata's
    ``X-Pulsar-*`` headers; the properties as one JSON object in ``X-Pulsar-Property``
    (what current clients read) and one header each (older clients)."""
    message = parse_message(entry.data)
    metadata = message.metadata
    headers = {"X-Pulsar-Message-ID": f"{entry.position.ledger_id}:{entry.position.entry_id}"}
    if metadata.properties:
        properties = {pair.key: pair.value for pair in metadata.properties}
        headers["X-Pulsar-Property"] = json.dumps(properties, ensure_ascii=False)
    for pair in metadata.properties:
        if _HEADER_NAME.fullmatch(pair.key):  # older clients read these
            headers[f"X-Pulsar-PROPERTY-{pair.key}"] = pair.value
    if metadata.HasField("publish_time"):
        headers["X-Pulsar-publish-time"] = pulsar_date(metadata.publish_time)
    if metadata.HasField("event_time") and metadata.event_time:
        headers["X-Pulsar-event-time"] = pulsar_date(metadata.event_time)
    if metadata.HasField("deliver_at_time"):
        headers["X-Pulsar-deliver-at-time"] = pulsar_date(metadata.deliver_at_time)
    if metadata.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(metadata.num_messages_in_batch)
        headers["X-Pulsar-batch-size"] = str(len(message.payload))
    if metadata.null_value:
        headers["X-Pulsar-null-value"] = "true"
    headers["X-Pulsar-Is-Encrypted"] = str(len(metadata.encryption_keys) > 0).lower()
    headers["X-Pulsar-producer-name"] = metadata.producer_name
    headers["X-Pulsar-sequence-id"] = str(metadata.sequence_id)
    if metadata.HasField("replicated_from"):
        headers["X-Pulsar-replicated-from"] = metadata.replicated_from
    if metadata.HasField("partition_key"):
        headers["X-Pulsar-partition-key"] = metadata.partition_key
        if metadata.partition_key_b64_encoded:
            headers["X-Pulsar-partition-key-b64-encoded"] = "true"
    if metadata.HasField("compression"):
        headers["X-Pulsar-compression"] = _COMPRESSION_NAMES.get(metadata.compression, "NONE")
    if metadata.HasField("uncompressed_size"):
        headers["X-Pulsar-uncompressed-size"] = str(metadata.uncompressed_size)
    payload = message.payload
    if metadata.compression != pb.NONE and not metadata.encryption_keys:
        payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
    return web.Response(body=payload, headers=headers, content_type="application/octet-stream")
