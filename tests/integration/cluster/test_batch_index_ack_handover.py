"""Batch-index acknowledgements move with a topic to its new owner: the owner leaves with
SIGTERM (storing its cursors), the other broker loads the topic and redelivers the batch
with its ack set, so the client gets only the messages left."""

from __future__ import annotations

import uuid
from pathlib import Path

from harness.cluster_processes import ClusterProcesses
from tests.integration.cluster.conftest import owner_of
from tests.integration.session.test_batch_index_ack import BATCH, consume, publish_one_batch


def test_batch_index_acks_survive_a_handover(kafka_bootstrap: str, tmp_path: Path) -> None:
    cluster = ClusterProcesses(kafka_bootstrap, tmp_path, size=2)
    try:
        cluster.start()
        topic = f"persistent://public/default/bi-{uuid.uuid4().hex[:8]}"
        publish_one_batch(cluster.service_url, topic)
        consume(cluster.service_url, topic, range(BATCH), acknowledge=[0, 2, 5])

        leaving = owner_of(cluster, topic)
        code, _ = leaving.terminate(timeout=60)
        assert code == 0
        cluster.wait_settled()
        assert owner_of(cluster, topic) is not leaving

        rest = [1, 3, 4, 6, 7, 8, 9]
        consume(cluster.service_url, topic, rest, acknowledge=rest)
        consume(cluster.service_url, topic, [], acknowledge=[])
    finally:
        cluster.stop()
