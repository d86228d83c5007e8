"""Helpers to run a real broker process (tests, demo, benchmarks)."""
