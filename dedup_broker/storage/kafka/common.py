"""What the storage layer's Kafka clients share: the record size limit, the translation of
librdkafka's errors into storage errors, and giving freed C heap back to the system."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError, UnknownTopicError

MAX_RECORD_OVERHEAD = 1024 * 1024
"""Room above ``maxMessageSize`` for record and batch framing."""


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    return getattr(libc, "malloc_trim", None)


_MALLOC_TRIM = _malloc_trim()


def release_freed_memory() -> None:
    """Give what the C heap freed back to the system (glibc's ``malloc_trim``; elsewhere
    nothing). A destroyed librdkafka client frees thousands of small blocks, which glibc
    otherwise keeps: renewing producers lowered the broker's RSS only with this."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def max_record_bytes(config: BrokerConfig) -> int:
    return config.max_message_size + MAX_RECORD_OVERHEAD


_UNKNOWN_TOPIC_CODES = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)


def storage_error(what: str, error: KafkaError | BaseException) -> StorageError:
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        error = error.args[0]
    if isinstance(error, KafkaError):
        unknown = error.code() in _UNKNOWN_TOPIC_CODES
        kind = UnknownTopicError if unknown else StorageError
        return kind(f"{what}: {error.str()} ({error.name()})")
    return StorageError(f"{what}: {error}")
