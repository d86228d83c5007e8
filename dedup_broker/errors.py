"""Error classes shared by every layer.

Each error says whether retrying the same operation may succeed: callers (and the
protocol layer, which maps errors to Pulsar ``ServerError`` codes) decide from that
alone whether a client should retry or give up.
"""

from __future__ import annotations


class BrokerError(Exception):
    """Base of every error the broker raises on purpose."""

    retriable: bool = False


class RetriableError(BrokerError):
    """The operation may succeed if tried again later (outage, fencing, recovery)."""

    retriable = True


class PermanentError(BrokerError):
    """Trying the same operation again will fail the same way."""

    retriable = False


class ConfigError(PermanentError):
    """A configuration value is missing, malformed or out of range."""


class ProtocolError(PermanentError):
    """A peer sent bytes that do not form a valid Pulsar frame or command."""


class ChecksumError(ProtocolError):
    """A payload's CRC32C does not match the checksum it carries."""


class FrameTooLargeError(ProtocolError):
    """A frame is larger than the negotiated maximum message size."""


class UnsupportedCompressionError(ProtocolError):
    """A payload uses a codec this broker cannot decode (unknown, or its library missing)."""


class InvalidTopicNameError(PermanentError):
    """A topic name cannot be parsed or names something that cannot exist."""


class TopicNotFoundError(PermanentError):
    """The topic does not exist and may not be created automatically."""


class StorageError(RetriableError):
    """Kafka did not complete a read or a write; the outcome may be unknown."""


class KafkaNotReadyError(StorageError):
    """Kafka answered but cannot do it yet: its broker is still fenced or its controller
    busy (it is starting, or has just been resumed)."""


class UnknownTopicError(StorageError):
    """Kafka does not know the topic: deleted, or created a moment ago and not yet known
    to its partition's leader."""


class LedgerFencedError(RetriableError):
    """The managed ledger is establishing what Kafka really stored; retry shortly."""


class ManagedLedgerClosedError(PermanentError):
    """The managed ledger was closed or deleted and accepts no more operations."""


class ManagedLedgerFencedError(RetriableError):
    """Another broker took over the managed ledger; reconnect to find its owner."""


class EntryNotFoundError(PermanentError):
    """No entry exists at the requested position."""


class CursorNotFoundError(PermanentError):
    """No cursor (subscription) of that name exists on the managed ledger."""


class ServiceNotReadyError(RetriableError):
    """A component is still starting or recovering (e.g. deduplication state)."""


class OwnershipLostError(ServiceNotReadyError):
    """Another broker took over the bundle this write or topic belongs to: the client
    looks the topic up again and continues on the new owner."""


class DevServerError(PermanentError):
    """A development Kafka or Redis could not be provided, started, stopped or controlled."""


class PositionStoreError(RetriableError):
    """The database holding results and message positions failed in a way that may pass
    (connection lost, lock or serialization conflict); nothing of the batch was committed."""


class TopicReadError(RetriableError):
    """The topic could not be opened or read (broker unreachable, lookup failed)."""


class MessageRetriesExhaustedError(RetriableError):
    """The application's function kept failing with a retriable error; nothing of the batch
    was committed, so running the consumer again retries the same messages."""


class MessageProcessingError(PermanentError):
    """The application's function failed for a message with an error retrying cannot fix;
    nothing of the batch was committed and the message is not skipped."""


class OffloadNotConfiguredError(PermanentError):
    """Tiered storage is asked for, but no offload driver is configured."""


class OffloadInProgressError(RetriableError):
    """An offload of this managed ledger is running already."""
