"""Topic compaction (Pulsar's ``compact``, ``read_compacted``) on a Kafka-compacted companion."""
