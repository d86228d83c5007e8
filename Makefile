# dedup-broker: common tasks. Everything runs inside .venv, created on demand.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv bytecode test test-unit test-integration verify soak lint format typecheck layers check proto bench bench-main-job demo run \
        kafka-up kafka-down redis-up redis-down clean preflight preflight-test preflight-demo bare-check

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark]'
	touch $(STAMP)

venv: $(STAMP)

## The project's modules compiled to bytecode ahead (quick when nothing changed): where
## PYTHONDONTWRITEBYTECODE is set, every process the tests start (hundreds of brokers,
## Spark jobs, tools) would otherwise compile them again, ~0.5 s of CPU each.
SOURCES := bench connectors dedup_broker examples harness system_topics tests verify
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j 0 $(SOURCES) > /dev/null

## Every external piece (Java, Maven, Kafka's jars, Redis, PostgreSQL, optional tools):
## found, provisioned, or missing with its install line. The system's Python runs it, so it
## answers in seconds, before the virtual environment exists; test and demo run it first.
PREFLIGHT := $(PYTHON) -m dedup_broker.devservers.preflight
preflight:
	@$(PREFLIGHT)

preflight-test:
	@$(PREFLIGHT) --for test

preflight-demo:
	@$(PREFLIGHT) --for demo

## The release check (docs/dev-servers.md): make preflight and make demo from a fresh clone
## in a bare Debian root filesystem, as a non-root user. Needs root and debootstrap; slow.
bare-check:
	bash .ci/bare-check

## The test suite: unit tests, then integration and chaos tests on real Kafka and Redis.
## Test files run on TEST_WORKERS processes; TEST_WORKERS=0 runs them one after another.
test: preflight-test bytecode
	$(PY) -m pytest -q --durations=25 -n $${TEST_WORKERS:-3} --dist loadfile tests

test-unit: bytecode
	$(PY) -m pytest -q tests/unit

## The long-run checker (docs/reliability.md): a three-broker cluster under faults, every
## reading path checked against the acknowledged history. VERIFY_PROFILE=long for hours.
verify: bytecode
	$(PY) -m verify --profile $${VERIFY_PROFILE:-short}

## The checker's long profile (2 hours) and a run with Kafka nodes' disks filling up
## (root: tmpfs disks), many more kill -9 cycles of the cluster chaos
## test, the zombie test, the Kafka node loss and the Redis failovers repeated,
## transactions through 30 broker kills, and the tests marked soak (the Data Source on a
## Spark cluster, a streaming query's restart in local mode).
soak: bytecode
	$(PY) -m verify --profile long
	$(PY) -m verify --profile long --minutes 20 --faults kafka-disk-full,kafka-node-kill-9,kill-9
	CLUSTER_CHAOS_CYCLES=$${CLUSTER_CHAOS_CYCLES:-200} $(PY) -m pytest -q -s tests/chaos/test_cluster_chaos.py
	for i in 1 2 3 4 5; do $(PY) -m pytest -q tests/integration/cluster/test_zombie.py || exit 1; done
	for i in 1 2 3 4 5 6 7 8 9 10; do $(PY) -m pytest -q tests/chaos/test_kafka_node_loss.py || exit 1; done
	for i in 1 2 3 4 5 6 7 8 9 10; do $(PY) -m pytest -q tests/chaos/test_redis_failover.py || exit 1; done
	SOAK=1 $(PY) -m pytest -q -m soak tests
	TXN_CHAOS_INPUTS=$${TXN_CHAOS_INPUTS:-50000} TXN_CHAOS_KILLS=$${TXN_CHAOS_KILLS:-30} $(PY) -m pytest -q -s -o timeout=7200 tests/chaos/test_transactions_chaos.py

test-integration: bytecode
	$(PY) -m pytest -q tests/integration tests/chaos

## Container images built on this machine (docs/deployment.md): Debian 12 by debootstrap,
## Python/Java/Redis layers, Kafka from its Maven jars, the broker from docker/Dockerfile.
## As root it installs docker.io/debootstrap and starts dockerd when none answers (and stops
## it again); only missing or stale images are built.
.PHONY: images test-containers
images: $(STAMP)
	$(PY) -m dedup_broker.devservers.container_tier images

## The container tier (tests/containers): the images, then Kafka (1 and 3 nodes), Redis and
## broker containers and the compose stack, with kills; fails where Docker cannot run.
test-containers: bytecode
	$(PY) -m dedup_broker.devservers.container_tier test

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

typecheck: $(STAMP)

	$(VENV)/bin/mypy dedup_broker system_topics connectors examples harness verify

## The import graph follows the layers (protocol < storage < domain < session/HTTP < app).
layers: $(STAMP)
	$(PY) -m pytest -q tests/unit/test_layers.py

## What CI gates before the tests: lint, formatting, types, layers.
check: lint typecheck layers

## Regenerate the protobuf modules from the project's own .proto files.
proto: $(STAMP)
	$(PY) -m pip install -q 'grpcio-tools>=1.74'
	$(PY) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. \
	    dedup_broker/protocol/pulsar_api.proto dedup_broker/storage/storage.proto \
	    system_topics/ledger_deletion.proto

## The main job: Kafka, Redis and the broker, then the demo pipeline (examples/demo).
## DEMO_SPARK_MASTER=spark://host:port runs its query on a standalone cluster.
demo run: preflight-demo bytecode
	$(PY) -m examples.demo

## Publish throughput, latency and server CPU: direct Kafka, the broker, Pulsar standalone
## (Java load generators), then the Python-client, recovery, cluster, failover and Spark
## figures, and memory per topic. Each step records its figures (build/bench-results);
## the last line draws them as the PNG files docs/benchmarks.md shows (docs/images).
bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) -m bench.publish
	$(PY) -m bench.dispatch
	$(PY) -m bench
	$(PY) -m bench.dedup_state
	$(PY) -m bench.cluster
	$(PY) -m bench.failover
	$(PY) -m bench.producer_memory
	$(PY) -m bench.window_memory
	$(PY) -m bench.memory
	$(PY) -m bench.deletion_worker
	$(PY) -m bench.many_topics
	$(PY) -m bench.scrape
	$(PY) -m bench.node_loss
	$(PY) -m bench.plots

# The main job's figures alone: the publish path (throughput, server CPU, p50/p99,
# key-window) and the Spark connectors, each next to its anchor from the same run.
bench-main-job: $(STAMP)
	$(PY) -m bench.publish
	$(PY) -m bench

## KAFKA_NODES=3: a replicated 3-node cluster (docs/deployment.md) on 9092, 9094, 9096.
kafka-up: $(STAMP)
	$(PY) -m dedup_broker.app.cli dev kafka-up --nodes $${KAFKA_NODES:-1}

kafka-down: $(STAMP)
	$(PY) -m dedup_broker.app.cli dev kafka-down

redis-up: $(STAMP)
	$(PY) -m dedup_broker.app.cli dev redis-up

redis-down: $(STAMP)
	$(PY) -m dedup_broker.app.cli dev redis-down

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
