"""The cluster: bundle ownership through a Kafka consumer group, the broker directory,
lookups and handover (docs/cluster.md)."""
