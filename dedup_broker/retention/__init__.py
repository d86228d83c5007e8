"""Retention of consumed ledgers: Pulsar's policies and the periodic trim check."""
