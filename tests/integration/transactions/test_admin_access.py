"""Who may read and end transactions through ``/admin/v3/transactions``, and what an
ended transaction answers, on a broker secured as the Go client's own test suite runs
Pulsar (token authentication, authorization, an anonymous role that is no superuser).

Pulsar checks no permission on the transaction reads: any authenticated role, the
anonymous one included, reads a transaction's metadata and the coordinators' stats
(the Go client's tests read them without credentials). Aborting a transaction through
the admin API needs a superuser. An ended transaction is unknown to its coordinator: a
second commit or abort, and an admin abort, is ``TransactionNotFound`` (404), while its
metadata still shows how it ended."""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest

from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from harness.pulsar_go import ensure_go_client, go_transactions
from harness.pulsar_tools import (
    AdminOutcome,
    ensure_pulsar_tools,
    run_pulsar_admin_batch,
    write_client_conf,
)
from tests.integration.conftest import serve
from tests.optional_pieces import require

SECRET = secrets.token_bytes(32)
V3 = "/admin/v3/transactions"


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


@pytest.fixture(scope="module")
def secured(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    folder = tmp_path_factory.mktemp("txn-access")
    key = folder / "secret.key"
    key.write_bytes(SECRET)
    yield from serve(
        kafka_bootstrap,
        folder,
        transaction_coordinator_enabled=True,
        authentication_enabled=True,
        authentication_providers="token",
        token_secret_key=f"file://{key}",
        authorization_enabled=True,
        super_user_roles="admin",
        anonymous_user_role="anonymous",
    )


def printed(outcome: AdminOutcome) -> Any:
    return json.loads(outcome.output[outcome.output.index("{") :])


def test_anonymous_reads_transactions_and_only_a_superuser_aborts(
    secured: BrokerProcess, tmp_path: Path
) -> None:
    require("go")
    ensure_go_client()
    ensure_pulsar_tools()
    topic = f"persistent://public/default/txn-access-{uuid.uuid4().hex[:8]}"
    seen = go_transactions(
        secured.service_url, topic, "s", 2, timeout_ms=1000, token=token("admin")
    )
    assert seen.received == seen.committed == ["c-0", "c-1"]
    (cm, cl), (am, al), _ = seen.transaction_ids

    anonymous = write_client_conf(
        tmp_path / "anonymous.conf", secured.service_url, secured.http_url
    )
    reads = run_pulsar_admin_batch(
        anonymous,
        [
            ["transactions", "transaction-metadata", "-m", str(cm), "-l", str(cl)],
            ["transactions", "transaction-metadata", "-m", str(am), "-l", str(al)],
            ["transactions", "coordinator-stats", "-c", "0"],
            ["transactions", "transaction-buffer-stats", "-t", topic],
            ["transactions", "abort-transaction", "-m", str(cm), "-l", str(cl)],
        ],
    )
    assert [o.exit_code for o in reads[:4]] == [0] * 4, reads
    committed, aborted, stats, buffer = (printed(o) for o in reads[:4])
    assert committed["status"] == "COMMITTED" and list(committed["producedPartitions"]) == [topic]
    assert aborted["status"] == "ABORTED"
    assert stats["state"] == "Ready" and buffer["ongoingTxnSize"] == 0
    assert reads[4].exit_code != 0  # aborting needs a superuser
    status, answer = http_request("POST", f"{secured.http_url}{V3}/abortTransaction/{cm}/{cl}")
    assert status == 403, answer
    status, answer = http_request("GET", f"{secured.http_url}{V3}/transactionMetadata/{cm}/{cl}")
    assert status == 200 and json.loads(answer)["status"] == "COMMITTED"

    superuser = tmp_path / "admin.conf"
    superuser.write_text(
        anonymous.read_text()
        + "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
        + f"authParams=token:{token('admin')}\n"
    )
    ended = run_pulsar_admin_batch(
        superuser,
        [
            ["transactions", "abort-transaction", "-m", str(cm), "-l", str(cl)],
            ["transactions", "abort-transaction", "-m", str(am), "-l", str(al)],
        ],
    )
    for outcome in ended:  # ended already: unknown to the coordinator, as in Pulsar
        assert outcome.exit_code != 0 and "not found" in outcome.output.lower(), outcome
