#!/bin/bash
# Writes server.properties from the environment (as the apache/kafka image does), formats
# the storage on first start, then runs the node in the foreground as the container's
# process, so `docker kill` is a kill -9 of Kafka itself.
set -euo pipefail

home=/opt/kafka
props=$home/config/server.properties
: > "$props"

not_properties=" KAFKA_HEAP_OPTS KAFKA_OPTS KAFKA_JVM_PERFORMANCE_OPTS KAFKA_LOG4J_OPTS \
KAFKA_LOG4J_ROOT_LOGLEVEL KAFKA_GC_LOG_OPTS KAFKA_JMX_OPTS KAFKA_HOME KAFKA_VERSION "
for name in $(compgen -e); do
    [[ $name == KAFKA_* && $not_properties != *" $name "* ]] || continue
    key=${name#KAFKA_}
    key=${key//___/-}
    key=${key//__/%}
    key=${key//_/.}
    key=${key//%/_}
    printf '%s=%s\n' "${key,,}" "${!name}" >> "$props"
done

if [ ! -s "$props" ]; then
    # Nothing configured: one combined node on loopback, as the apache/kafka image does.
    cat > "$props" <<'DEFAULTS'
node.id=1
process.roles=broker,controller
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093
advertised.listeners=PLAINTEXT://127.0.0.1:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.quorum.voters=1@127.0.0.1:9093
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
DEFAULTS
fi
grep -q '^log\.dirs=' "$props" || echo "log.dirs=/var/lib/kafka/data" >> "$props"

classpath="$home/libs/*"
log4j="-Dlog4j2.configurationFile=$home/config/log4j2.properties"
log_dir=$(sed -n 's/^log\.dirs=//p' "$props" | cut -d, -f1)
if [ ! -f "$log_dir/meta.properties" ]; then
    # Any base64url-encoded 16 bytes; nodes of one cluster must share it.
    cluster_id=${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}
    java -Xmx256m "$log4j" -cp "$classpath" kafka.tools.StorageTool \
        format -t "$cluster_id" -c "$props" --ignore-formatted > /dev/null
fi

# shellcheck disable=SC2086  # the options are lists of words
exec java ${KAFKA_HEAP_OPTS:--Xmx512m} \
    ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC -XX:G1HeapRegionSize=16M} \
    -Djava.awt.headless=true "$log4j" ${KAFKA_OPTS:-} \
    -cp "$classpath" kafka.Kafka "$props"
