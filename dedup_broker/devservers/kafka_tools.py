"""Kafka's own command-line tools (``kafka-tools``), resolved from Maven Central.

The publish benchmark drives direct Kafka with ``ProducerPerformance``, Kafka's own
load generator, so the baseline is what Kafka's developers measure with. The dev Kafka's
jars (the server) do not hold it, so the tools have a cache directory of their own.
"""

from __future__ import annotations

from pathlib import Path

from dedup_broker.devservers.distribution import KAFKA_VERSION, cache_root, ensure_resolved

PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance"

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dedup-broker.devservers</groupId>
  <artifactId>kafka-tools</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


def ensure_kafka_tools(version: str = KAFKA_VERSION) -> Path:
    """The cache directory holding ``kafka-tools``' jars (and their dependencies) in ``libs/``."""
    return ensure_resolved(
        cache_root() / f"kafka-tools-{version}",
        _POM.format(version=version).encode(),
        f"the Kafka tools {version}",
        "kafka-tools-",
    )
