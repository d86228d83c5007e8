"""The one place that decides what a failure or a publish outcome means on the wire.

Official clients retry only some codes (``ServiceNotReady``, ``TooManyRequests``,
``MetadataError``...), so every retriable failure maps to one of those. A SEND is
answered differently: the clients drop a message only on ``ChecksumError`` and answer
any other SEND_ERROR by reconnecting and resending what is unacknowledged.
"""

from __future__ import annotations

from dedup_broker import errors
from dedup_broker.backlog.quota import (
    ProducerHeldByQuotaError,
    ProducerRefusedByQuotaError,
)
from dedup_broker.domain.consumer import ConsumerBusyError
from dedup_broker.domain.key_shared_selectors import ConsumerAssignError
from dedup_broker.domain.producer_access import ProducerBusyError, ProducerFencedError
from dedup_broker.domain.subscription_errors import (
    ConsumerStillConnectedError,
    SubscriptionNotFoundError,
)
from dedup_broker.domain.termination import TopicTerminatedError
from dedup_broker.domain_base.outcomes import PublishOutcome, PublishStatus
from dedup_broker.pip6.topic_dedup import BatchNotSplittableError
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.txn_commands import TRANSACTION_REQUESTS, txn_response
from dedup_broker.schema.compatibility import IncompatibleSchemaError
from dedup_broker.security.authentication import AuthenticationError
from dedup_broker.security.authorization import AuthorizationError
from dedup_broker.security.encryption import EncryptionRequiredError
from dedup_broker.transactions.buffer import TransactionEndedError, TransactionsDisabledError
from dedup_broker.transactions.errors import (
    CoordinatorNotReadyError,
    InvalidTxnStatusError,
    TransactionNotFoundError,
)
from dedup_broker.transactions.pending_acks import TransactionConflictError


class UnknownIdError(errors.PermanentError):
    """A command names a producer or consumer id this connection does not have."""


class CreationInProgressError(errors.RetriableError):
    """The same producer or consumer is still being created; the client retries."""


_CODES: tuple[tuple[type[BaseException], pb.ServerError], ...] = (
    # A PRODUCER or SUBSCRIBE that met the topic as it was unloaded: the client retries
    # and finds it loaded again (NotAllowedError would be final for some clients).
    (errors.ManagedLedgerClosedError, pb.ServiceNotReady),
    (CoordinatorNotReadyError, pb.TransactionCoordinatorNotFound),
    (TransactionNotFoundError, pb.TransactionNotFound),
    (InvalidTxnStatusError, pb.InvalidTxnStatus),
    (TransactionConflictError, pb.TransactionConflict),
    (TransactionsDisabledError, pb.NotAllowedError),
    (errors.ChecksumError, pb.ChecksumError),
    (TopicTerminatedError, pb.TopicTerminatedError),
    (EncryptionRequiredError, pb.MetadataError),
    (ProducerHeldByQuotaError, pb.ProducerBlockedQuotaExceededError),
    (ProducerRefusedByQuotaError, pb.ProducerBlockedQuotaExceededException),
    (AuthenticationError, pb.AuthenticationError),
    (AuthorizationError, pb.AuthorizationError),
    # An invalid name cannot become valid: the C++-based clients retry InvalidTopicName
    # (and the Java client's lookups too) until their operation timeout, NotAllowedError
    # fails the call at once (Pulsar's clients reject most such names before asking).
    (errors.InvalidTopicNameError, pb.NotAllowedError),
    (errors.TopicNotFoundError, pb.TopicNotFound),
    (IncompatibleSchemaError, pb.IncompatibleSchema),
    (ProducerBusyError, pb.ProducerBusy),
    (ProducerFencedError, pb.ProducerFenced),
    (ConsumerBusyError, pb.ConsumerBusy),
    (ConsumerAssignError, pb.ConsumerAssignError),
    (ConsumerStillConnectedError, pb.ConsumerBusy),
    (SubscriptionNotFoundError, pb.SubscriptionNotFound),
    (UnknownIdError, pb.NotAllowedError),
    (errors.CursorNotFoundError, pb.SubscriptionNotFound),
    (errors.StorageError, pb.PersistenceError),
    (errors.ProtocolError, pb.UnknownError),
)


def server_error_of(exc: BaseException) -> pb.ServerError:
    """The ``ServerError`` code a failed command is answered with."""
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    if isinstance(exc, errors.BrokerError):
        return pb.ServiceNotReady if exc.retriable else pb.NotAllowedError
    return pb.UnknownError


def send_error_code(exc: BaseException | None) -> pb.ServerError:
    """The code of a SEND_ERROR: only a checksum mismatch makes the client drop it."""
    if isinstance(exc, errors.ChecksumError):
        return pb.ChecksumError
    if isinstance(exc, errors.ProtocolError):
        return pb.UnknownError
    if isinstance(exc, TopicTerminatedError):
        return pb.TopicTerminatedError
    if isinstance(exc, (TransactionEndedError, TransactionsDisabledError, BatchNotSplittableError)):
        return pb.NotAllowedError  # the client fails the message instead of resending it
    return pb.PersistenceError


def publish_reply(
    producer_id: int, send: pb.CommandSend, outcome: PublishOutcome
) -> pb.BaseCommand:
    """SEND_RECEIPT for a stored message (id -1:-1 for a duplicate), else SEND_ERROR."""
    highest = send.highest_sequence_id if send.HasField("highest_sequence_id") else None
    if outcome.status is PublishStatus.STORED and outcome.position is not None:
        position = outcome.position
        return commands.send_receipt(
            producer_id, send.sequence_id, position.ledger_id, position.entry_id, highest
        )
    if outcome.status is PublishStatus.DUPLICATE:
        at = outcome.position
        ledger_id, entry_id = (at.ledger_id, at.entry_id) if at is not None else (-1, -1)
        return commands.send_receipt(producer_id, send.sequence_id, ledger_id, entry_id, highest)
    return commands.send_error(
        producer_id, send.sequence_id, send_error_code(outcome.error), str(outcome.error)
    )


def error_reply(command: pb.BaseCommand, exc: BaseException) -> pb.BaseCommand:
    """The answer to a command that failed with ``exc``, in the shape its request expects."""
    code = server_error_of(exc)
    if command.type == pb.BaseCommand.SEND:
        send = command.send
        return commands.send_error(
            send.producer_id, send.sequence_id, send_error_code(exc), str(exc)
        )
    if command.type == pb.BaseCommand.PARTITIONED_METADATA:
        return commands.partitioned_metadata_response(
            command.partitionMetadata.request_id, error=code, message=str(exc)
        )
    if command.type == pb.BaseCommand.LOOKUP:
        return commands.lookup_response(
            command.lookupTopic.request_id, "", error=code, message=str(exc)
        )
    if command.type in TRANSACTION_REQUESTS:
        request_id = commands.request_id_of(command) or 0
        return txn_response(command.type, request_id, error=code, message=str(exc))
    return commands.error(commands.request_id_of(command) or 0, code, str(exc))
