"""Benchmarks: the broker next to a direct Kafka baseline measured in the same run."""
