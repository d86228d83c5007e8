"""Security: who a client is (authentication, Pulsar's providers and names)."""
