"""What a transaction request can fail with; the session maps each to Pulsar's code."""

from __future__ import annotations

from dedup_broker.errors import PermanentError, RetriableError


class TransactionNotFoundError(PermanentError):
    """No transaction of that id is known to its coordinator: never opened, or ended and
    forgotten (Pulsar's ``TransactionNotFound``)."""


class InvalidTxnStatusError(PermanentError):
    """The transaction is not in a status that allows the request, e.g. adding a
    partition to a transaction being committed (Pulsar's ``InvalidTxnStatus``)."""


class CoordinatorNotReadyError(RetriableError):
    """The coordinator is not served here, or is still recovering its state: look it up
    again and retry (Pulsar's ``TransactionCoordinatorNotFound``)."""
