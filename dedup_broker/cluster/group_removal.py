"""Removes a member from the owners group at once: Kafka's LeaveGroup sent on its behalf.

Kafka expels a member that stopped heartbeating only after its session timeout, and that
timeout must be long (a broker must not lose its slots because Kafka answered it late for
a few seconds). A broker that is known to be gone (its port refuses connections, another
process now listens on its address, or it has answered nothing for
``clusterPeerTimeoutMillis``) is therefore removed by the brokers that noticed: the
group rebalances at once and its slots move within a second or two.

librdkafka has no call for this (Kafka's Java admin client has
``removeMembersFromConsumerGroup``, KIP-345/KIP-571), so the two requests it takes are
spoken here directly: FindCoordinator (v2) for the group's coordinator, then LeaveGroup
(v3, members by ``member.id``). The connection follows the broker's Kafka settings:
PLAINTEXT, SSL, and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) over either.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import os
import ssl
import struct
from dataclasses import dataclass, field

from dedup_broker.errors import ServiceNotReadyError

log = logging.getLogger(__name__)

_FIND_COORDINATOR = 10
_LEAVE_GROUP = 13
_SASL_HANDSHAKE = 17
_SASL_AUTHENTICATE = 36
_NONE = 0
_UNKNOWN_MEMBER_ID = 25
_RETRIABLE = frozenset({14, 15, 16})
"""COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR."""
_CLIENT_ID = "dedup-broker-group-removal"


class GroupRemovalError(ServiceNotReadyError):
    """Kafka did not take the removal (it is tried again on the next sighting)."""


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int8(self, value: int) -> _Writer:
        self.parts.append(struct.pack(">b", value))
        return self

    def int16(self, value: int) -> _Writer:
        self.parts.append(struct.pack(">h", value))
        return self

    def int32(self, value: int) -> _Writer:
        self.parts.append(struct.pack(">i", value))
        return self

    def string(self, value: str | None) -> _Writer:
        if value is None:
            return self.int16(-1)
        data = value.encode()
        self.int16(len(data))
        self.parts.append(data)
        return self

    def raw_bytes(self, value: bytes) -> _Writer:
        self.int32(len(value))
        self.parts.append(value)
        return self

    def build(self) -> bytes:
        return b"".join(self.parts)


@dataclass
class _Reader:
    data: bytes
    at: int = 0

    def _take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def string(self) -> str | None:
        length = self.int16()
        if length < 0:
            return None
        value = self.data[self.at : self.at + length].decode()
        self.at += length
        return value

    def raw_bytes(self) -> bytes:
        length = self.int32()
        value = self.data[self.at : self.at + max(length, 0)]
        self.at += max(length, 0)
        return value


@dataclass
class KafkaLink:
    """The settings of the broker's Kafka clients this module understands."""

    bootstrap: list[tuple[str, int]]
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str = ""
    sasl_password: str = ""
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)

    @classmethod
    def of(cls, settings: dict[str, str]) -> KafkaLink:
        """From librdkafka settings (``BrokerConfig.kafka_connection()``)."""
        bootstrap = []
        for server in settings["bootstrap.servers"].split(","):
            host, _, port = server.strip().rpartition(":")
            bootstrap.append((host.strip("[]"), int(port)))
        protocol = settings.get("security.protocol", "PLAINTEXT").upper()
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = ssl.create_default_context(cafile=settings.get("ssl.ca.location"))
            certificate = settings.get("ssl.certificate.location")
            if certificate:
                context.load_cert_chain(
                    certificate,
                    settings.get("ssl.key.location"),
                    settings.get("ssl.key.password"),
                )
        return cls(
            bootstrap,
            protocol,
            settings.get("sasl.mechanism", "PLAIN").upper(),
            settings.get("sasl.username", ""),
            settings.get("sasl.password", ""),
            context,
        )


class _Connection:
    """One Kafka connection: requests answered in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._correlation = 0

    @classmethod
    async def open(cls, link: KafkaLink, host: str, port: int, timeout: float) -> _Connection:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                host, port, ssl=link.ssl_context, server_hostname=host if link.ssl_context else None
            ),
            timeout,
        )
        connection = cls(reader, writer)
        try:
            if link.security_protocol.startswith("SASL"):
                await asyncio.wait_for(connection._authenticate(link), timeout)
        except BaseException:
            connection.close()
            raise
        return connection

    async def request(self, api_key: int, version: int, body: bytes) -> _Reader:
        self._correlation += 1
        header = (
            _Writer()
            .int16(api_key)
            .int16(version)
            .int32(self._correlation)
            .string(_CLIENT_ID)
            .build()
        )
        message = header + body
        self._writer.write(struct.pack(">i", len(message)) + message)
        await self._writer.drain()
        (size,) = struct.unpack(">i", await self._reader.readexactly(4))
        answer = _Reader(await self._reader.readexactly(size))
        if answer.int32() != self._correlation:
            raise GroupRemovalError("Kafka answered another request")
        return answer

    async def _authenticate(self, link: KafkaLink) -> None:
        mechanism = link.sasl_mechanism
        answer = await self.request(_SASL_HANDSHAKE, 1, _Writer().string(mechanism).build())
        if answer.int16() != _NONE:
            raise GroupRemovalError(f"Kafka does not offer SASL {mechanism}")
        if mechanism == "PLAIN":
            user, password = link.sasl_username, link.sasl_password
            await self._sasl_step(f"\0{user}\0{password}".encode())
            return
        if mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise GroupRemovalError(f"SASL {mechanism} is not supported here")
        await _Scram(link, mechanism.removeprefix("SCRAM-").replace("-", "").lower()).run(self)

    async def _sasl_step(self, token: bytes) -> bytes:
        answer = await self.request(_SASL_AUTHENTICATE, 1, _Writer().raw_bytes(token).build())
        error, message = answer.int16(), answer.string()
        if error != _NONE:
            raise GroupRemovalError(f"SASL authentication failed: {message or error}")
        return answer.raw_bytes()

    def close(self) -> None:
        self._writer.close()


class _Scram:
    """RFC 5802's client side, as Kafka's SCRAM-SHA-256/512 expect it."""

    def __init__(self, link: KafkaLink, digest: str) -> None:
        self._link = link
        self._digest = digest

    def _hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self._digest).digest()

    async def run(self, connection: _Connection) -> None:
        user = self._link.sasl_username.replace("=", "=3D").replace(",", "=2C")
        nonce = base64.b64encode(os.urandom(18)).decode()
        first_bare = f"n={user},r={nonce}"
        server_first = (await connection._sasl_step(f"n,,{first_bare}".encode())).decode()
        fields = dict(item.split("=", 1) for item in server_first.split(","))
        if not fields["r"].startswith(nonce):
            raise GroupRemovalError("SCRAM: the server's nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac(
            self._digest,
            self._link.sasl_password.encode(),
            base64.b64decode(fields["s"]),
            int(fields["i"]),
        )
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._digest, client_key).digest()
        without_proof = f"c=biws,r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        final = f"{without_proof},p={base64.b64encode(proof).decode()}"
        server_final = (await connection._sasl_step(final.encode())).decode()
        server_key = self._hmac(salted, b"Server Key")
        expected = base64.b64encode(self._hmac(server_key, auth_message)).decode()
        if server_final != f"v={expected}":
            raise GroupRemovalError("SCRAM: the server's signature does not match")


class GroupRemoval:
    """Removes members from one consumer group by their ``member.id``."""

    def __init__(self, link: KafkaLink, group: str, timeout_seconds: float) -> None:
        self._link = link
        self._group = group
        self._timeout = timeout_seconds
        self._lock = asyncio.Lock()

    async def remove(self, member_ids: list[str]) -> None:
        """Members already gone count as removed; ``GroupRemovalError`` if Kafka refused."""
        async with self._lock:
            await asyncio.wait_for(self._remove(member_ids), self._timeout)

    async def _remove(self, member_ids: list[str]) -> None:
        for attempt in range(3):
            host, port = await self._coordinator()
            connection = await _Connection.open(self._link, host, port, self._timeout)
            try:
                body = _Writer().string(self._group).int32(len(member_ids))
                for member_id in member_ids:
                    body.string(member_id).string(None)
                answer = await connection.request(_LEAVE_GROUP, 3, body.build())
            finally:
                connection.close()
            answer.int32()  # throttle time
            error = answer.int16()
            if error in _RETRIABLE and attempt < 2:
                await asyncio.sleep(0.2)
                continue
            if error not in (_NONE, _UNKNOWN_MEMBER_ID):
                raise GroupRemovalError(f"Kafka refused to remove {member_ids}: error {error}")
            for _ in range(answer.int32()):
                member, _instance, member_error = answer.string(), answer.string(), answer.int16()
                if member_error not in (_NONE, _UNKNOWN_MEMBER_ID):
                    raise GroupRemovalError(f"Kafka refused to remove {member}: {member_error}")
            return

    async def _coordinator(self) -> tuple[str, int]:
        failures: list[str] = []
        for host, port in self._link.bootstrap:
            try:
                connection = await _Connection.open(self._link, host, port, self._timeout)
            except (OSError, TimeoutError, GroupRemovalError) as exc:
                failures.append(f"{host}:{port}: {exc}")
                continue
            try:
                body = _Writer().string(self._group).int8(0).build()
                answer = await connection.request(_FIND_COORDINATOR, 2, body)
            finally:
                connection.close()
            answer.int32()  # throttle time
            error, message = answer.int16(), answer.string()
            if error != _NONE:
                failures.append(f"{host}:{port}: error {error} {message or ''}")
                continue
            answer.int32()  # node id
            coordinator_host = answer.string() or host
            return coordinator_host, answer.int32()
        raise GroupRemovalError(f"no coordinator for {self._group}: {'; '.join(failures)}")
