"""Pulsar transactions (PIP-31): the coordinator's state, and later the transaction buffer
and the pending acknowledgements (docs/transactions.md)."""
