"""Storage on Kafka: managed ledgers, cursors and metadata tables (no protocol knowledge).

Everything outside this package imports ``dedup_broker.storage.api``. See
``docs/storage.md`` for the model, the record formats and the guarantees.
"""
