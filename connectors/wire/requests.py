"""The commands this client sends, as it sends them: the codec's builders
(``dedup_broker.protocol.client_commands``) with this client's version and choices."""

from __future__ import annotations

import uuid

from dedup_broker import __version__
from dedup_broker.protocol import client_commands as commands
from dedup_broker.protocol import pulsar_api_pb2 as pb

CLIENT_VERSION = f"dedup-broker-connectors {__version__}"


def connect(method: str, data: bytes, proxy_to: str | None = None) -> pb.BaseCommand:
    """CONNECT, saying the client answers AUTH_CHALLENGE (with the same credentials)."""
    return commands.connect(
        client_version=CLIENT_VERSION,
        auth_method=method,
        auth_data=data,
        proxy_to_broker_url=proxy_to,
        supports_auth_refresh=True,
    )


def auth_response(method: str, data: bytes) -> pb.BaseCommand:
    return commands.auth_response(method, data, client_version=CLIENT_VERSION)


def reader_subscription() -> str:
    """A reader's own subscription name, as Pulsar's readers make one up."""
    return f"reader-{uuid.uuid4().hex[:10]}"


def subscribe_reader(
    topic: str,
    consumer_id: int,
    request_id: int,
    subscription: str,
    start: commands.EntryPosition,
) -> pb.BaseCommand:
    """SUBSCRIBE of a reader: exclusive, non-durable, from the entry ``start``
    inclusively; ledger and entry -1 is the earliest message."""
    return commands.subscribe(
        topic,
        subscription,
        consumer_id,
        request_id,
        initial_position=pb.CommandSubscribe.Earliest,
        durable=False,
        start=start,
    )
