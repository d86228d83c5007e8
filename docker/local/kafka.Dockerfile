# Apache Kafka (KRaft) from the jars the project resolves from Maven Central
# (dedup_broker/devservers/distribution.py), on the Java base built here. Configured like
# the apache/kafka image: every KAFKA_* variable becomes a server property
# (KAFKA_NODE_ID -> node.id; "__" stands for "_" and "___" for "-"), CLUSTER_ID names the
# cluster its storage is formatted for, KAFKA_HEAP_OPTS sizes the heap; so
# docker/compose.yaml works with either image.
ARG BASE
FROM ${BASE}

RUN useradd --system --uid 1000 --home-dir /opt/kafka --no-create-home kafka \
    && mkdir -p /opt/kafka/config /var/lib/kafka/data \
    && chown kafka:kafka /opt/kafka/config /var/lib/kafka/data

COPY libs/ /opt/kafka/libs/
COPY kafka-run.sh /opt/kafka/bin/kafka-run.sh
COPY kafka-log4j2.properties /opt/kafka/config/log4j2.properties

USER kafka
WORKDIR /opt/kafka
EXPOSE 9092 9093
ENTRYPOINT ["/opt/kafka/bin/kafka-run.sh"]
