"""Partition counts in the bodies Pulsar takes: a number, the number as a JSON string, and
``PartitionedTopicMetadata`` with either."""

from __future__ import annotations

import json
import uuid

from harness.admin_http import http_request
from harness.broker_process import BrokerProcess


def test_partition_counts_as_json_strings_create_and_grow_topics(broker: BrokerProcess) -> None:
    base = f"{broker.http_url}/admin/v2/persistent/public/default"
    name = f"{base}/p-{uuid.uuid4().hex[:8]}"
    assert http_request("PUT", name + "/partitions", b'"3"')[0] == 204
    assert json.loads(http_request("GET", name + "/partitions")[1])["partitions"] == 3
    assert http_request("POST", name + "/partitions", b'"5"')[0] == 204
    assert json.loads(http_request("GET", name + "/partitions")[1])["partitions"] == 5

    other = f"{base}/p-{uuid.uuid4().hex[:8]}"
    metadata = json.dumps({"partitions": "2", "properties": None}).encode()
    assert http_request("PUT", other + "/partitions", metadata)[0] == 204
    assert json.loads(http_request("GET", other + "/partitions")[1])["partitions"] == 2
    status, body = http_request("POST", other + "/partitions", b'"many"')
    assert status == 400
    assert "expected a number of partitions" in json.loads(body)["reason"]
    assert http_request("PUT", f"{base}/p-{uuid.uuid4().hex[:8]}/partitions", b"true")[0] == 400
