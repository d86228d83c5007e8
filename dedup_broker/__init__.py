"""A broker that speaks the Pulsar binary protocol and stores its data in Kafka."""

__version__ = "0.1.0"
