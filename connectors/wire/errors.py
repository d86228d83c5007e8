"""What can go wrong on the wire, and whether trying again can help."""

from __future__ import annotations

from dedup_broker.protocol import pulsar_api_pb2 as pb

RETRIABLE_CODES = frozenset(
    {
        pb.ServiceNotReady,
        pb.TooManyRequests,
        pb.MetadataError,
        pb.PersistenceError,
        pb.ProducerBusy,
        pb.ConsumerBusy,
    }
)
"""Codes a client answers by trying again (after a fresh lookup), as the official ones do.

``ProducerBusy`` too: a producer that reconnects quickly may meet its own previous
connection, which the broker has not yet seen close."""


class WireError(Exception):
    """A request the broker refused, a lost connection, or a timeout."""

    def __init__(self, message: str, code: int | None = None, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retriable = retriable

    @classmethod
    def of_server(cls, code: int, message: str) -> WireError:
        """The broker's ERROR (or a failed response) as an exception."""
        name = pb.ServerError.Name(code) if code in pb.ServerError.values() else str(code)
        return cls(f"{name}: {message}", code, retriable=code in RETRIABLE_CODES)


class ConnectionClosedError(WireError):
    """The connection went away (the broker stopped, the network failed): reconnect."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=True)
