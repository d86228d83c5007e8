"""Two-phase ledger deletion (Pulsar PIP-186): intents, the mark phase, the deletion worker."""
