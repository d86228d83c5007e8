"""Builders of the transaction coordinator's answers (PIP-31).

Each request has its own response type, which carries the error too: clients match the
answer to a request of the coordinator by its request id within that type, so a plain
ERROR would never reach them."""

from __future__ import annotations

from dedup_broker.protocol import pulsar_api_pb2 as pb

_U64_MASK = 0xFFFF_FFFF_FFFF_FFFF
Type = pb.BaseCommand.Type

_RESPONSES: dict[int, tuple[pb.BaseCommand.Type, str]] = {
    Type.TC_CLIENT_CONNECT_REQUEST: (Type.TC_CLIENT_CONNECT_RESPONSE, "tcClientConnectResponse"),
    Type.NEW_TXN: (Type.NEW_TXN_RESPONSE, "newTxnResponse"),
    Type.ADD_PARTITION_TO_TXN: (Type.ADD_PARTITION_TO_TXN_RESPONSE, "addPartitionToTxnResponse"),
    Type.ADD_SUBSCRIPTION_TO_TXN: (
        Type.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
        "addSubscriptionToTxnResponse",
    ),
    Type.END_TXN: (Type.END_TXN_RESPONSE, "endTxnResponse"),
    Type.END_TXN_ON_PARTITION: (Type.END_TXN_ON_PARTITION_RESPONSE, "endTxnOnPartitionResponse"),
    Type.END_TXN_ON_SUBSCRIPTION: (
        Type.END_TXN_ON_SUBSCRIPTION_RESPONSE,
        "endTxnOnSubscriptionResponse",
    ),
}
TRANSACTION_REQUESTS = frozenset(_RESPONSES)


def txn_response(
    request_type: int,
    request_id: int,
    txn: tuple[int, int] | None = None,
    error: pb.ServerError | None = None,
    message: str | None = None,
) -> pb.BaseCommand:
    """The answer to a transaction request of ``request_type``: success (``txn``: the
    transaction's (most, least) bits, where the response has them) or ``error``."""
    response_type, field = _RESPONSES[request_type]
    cmd = pb.BaseCommand(type=response_type)
    out = getattr(cmd, field)
    out.request_id = request_id & _U64_MASK
    if txn is not None and request_type != Type.TC_CLIENT_CONNECT_REQUEST:
        out.txnid_most_bits = txn[0] & _U64_MASK
        out.txnid_least_bits = txn[1] & _U64_MASK
    if error is not None:
        out.error = error
        out.message = message or ""
    return cmd
