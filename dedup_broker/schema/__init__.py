"""The schema registry: Pulsar's schemas per topic, versions and compatibility checks."""
