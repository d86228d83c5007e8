"""The one place that decides which Pulsar ``ServerError`` code an exception becomes.

Official clients retry only some codes (``ServiceNotReady``, ``TooManyRequests``,
``MetadataError``...), so every retriable failure must map to one of those.
"""

from __future__ import annotations

from dedup_broker import errors
from dedup_broker.protocol import pulsar_api_pb2 as pb


def server_error_of(exc: BaseException) -> pb.ServerError:
    # Imported here: these classes live in modules that import this one indirectly.
    from dedup_broker.domain.subscription import ConsumerBusyError
    from dedup_broker.domain.topic import (
        ConsumerStillConnectedError,
        ProducerBusyError,
        SubscriptionNotFoundError,
    )
    from dedup_broker.session.connection import UnknownIdError

    table: tuple[tuple[type[BaseException], pb.ServerError], ...] = (
        (errors.ChecksumError, pb.ChecksumError),
        (errors.InvalidTopicNameError, pb.InvalidTopicName),
        (errors.TopicNotFoundError, pb.TopicNotFound),
        (ProducerBusyError, pb.ProducerBusy),
        (ConsumerBusyError, pb.ConsumerBusy),
        (ConsumerStillConnectedError, pb.ConsumerBusy),
        (SubscriptionNotFoundError, pb.SubscriptionNotFound),
        (UnknownIdError, pb.NotAllowedError),
        (errors.CursorNotFoundError, pb.SubscriptionNotFound),
        (errors.StorageError, pb.PersistenceError),
        (errors.ProtocolError, pb.UnknownError),
    )
    for kind, code in table:
        if isinstance(exc, kind):
            return code
    if isinstance(exc, errors.BrokerError):
        return pb.ServiceNotReady if exc.retriable else pb.NotAllowedError
    return pb.UnknownError
