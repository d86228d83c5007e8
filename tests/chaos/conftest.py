"""Chaos tests reuse the broker fixtures of the integration suite."""

from tests.integration.conftest import broker, client, make_broker, topic  # noqa: F401
