"""The official ``pulsar-perf`` (4.0.6, from Maven Central) publishes through the broker.

A short run only: throughput runs belong to the benchmarks. What a user checks first is
that the tool's messages land, every one of them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pulsar

from harness.broker_process import BrokerProcess
from harness.pulsar_tools import run_pulsar_perf, write_client_conf

MESSAGES = 200
SIZE = 64


def test_pulsar_perf_produce_lands_every_message(
    broker: BrokerProcess, topic: str, tmp_path: Path
) -> None:
    conf = write_client_conf(tmp_path / "client.conf", broker.service_url, broker.http_url)
    result = run_pulsar_perf(
        conf, "produce", topic, "-m", str(MESSAGES), "-r", "1000", "-s", str(SIZE), "-ef"
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # pulsar-perf stops some messages past -m (sends in flight), and its closing report
    # may miss the last acknowledgements: what it reports is a lower bound.
    reported = re.search(r"Aggregated throughput stats --- (\d+) records sent", result.stderr)
    assert reported is not None, result.stderr[-3000:]
    sent = int(reported.group(1))

    client = pulsar.Client(broker.service_url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        sizes = []
        while reader.has_message_available():
            sizes.append(len(reader.read_next(10_000).data()))
    finally:
        client.close()
    assert len(sizes) >= max(sent, MESSAGES)
    assert sizes == [SIZE] * len(sizes)
