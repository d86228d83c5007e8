"""The storage tests' fixtures: a cluster name of their own per test on the real Kafka."""

from tests.integration.storage.conftest import admin, make_config

__all__ = ["admin", "make_config"]
