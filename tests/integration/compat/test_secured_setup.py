"""A secured standalone as Pulsar users set one up (TLS, token + basic + TLS
authentication, authorization, ``anonymousUserRole``), configured with ``pulsar-admin``
the way the official Python client's test setup does it, then used by the official
clients: htpasswd MD5 users, lookups for roles that produce or consume, namespaces
created with Pulsar's ``Policies`` body, clusters registered with their URLs."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pulsar
import pytest

from harness.pulsar_tools import ensure_pulsar_tools, run_pulsar_admin_batch
from tests.integration.compat.secured_standalone import (
    BASIC_USERS,
    SecuredBroker,
    start_secured_broker,
)


@pytest.fixture(scope="module")
def secured(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecuredBroker]:
    broker = start_secured_broker(kafka_bootstrap, tmp_path_factory.mktemp("secured"))
    try:
        yield broker
    finally:
        broker.process.stop()


def grant(namespace: str, role: str) -> list[str]:
    return [
        "namespaces",
        "grant-permission",
        namespace,
        "--actions",
        "produce,consume",
        "--role",
        role,
    ]


def cluster_url_options(secured: SecuredBroker) -> list[str]:
    """The broker's own URLs, as the setup script registers the standalone's cluster."""
    return [
        "--url",
        f"{secured.process.http_url}/",
        "--url-secure",
        f"{secured.https_url}/",
        "--broker-url",
        f"{secured.process.service_url}/",
        "--broker-url-secure",
        f"{secured.tls_url}/",
    ]


@pytest.fixture(scope="module")
def configured(secured: SecuredBroker, tmp_path_factory: pytest.TempPathFactory) -> SecuredBroker:
    """The official client's setup script, run with pulsar-admin as a superuser."""
    cluster = secured.process.cluster_name
    conf = tmp_path_factory.mktemp("admin") / "client.conf"
    conf.write_text(
        f"brokerServiceUrl={secured.process.service_url}\n"
        f"webServiceUrl={secured.process.http_url}\n"
        "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
        f"authParams=token:{secured.token('admin')}\n"
    )
    ensure_pulsar_tools()
    outcomes = run_pulsar_admin_batch(
        conf,
        [
            ["clusters", "list"],
            ["clusters", "create", cluster, *cluster_url_options(secured)],
            ["tenants", "create", "public", "-r", "anonymous", "-c", cluster],
            ["namespaces", "create", "public/default", "-c", cluster],
            grant("public/default", "anonymous"),
            ["tenants", "create", "private", "-r", "", "-c", cluster],
            ["namespaces", "create", "private/auth", "--clusters", cluster],
            grant("private/auth", "token-principal"),
        ],
    )
    for outcome in outcomes:
        assert outcome.exit_code == 0, (outcome.args, outcome.output)
    assert cluster in outcomes[0].output.split()
    return secured


def test_basic_users_from_an_htpasswd_md5_file(configured: SecuredBroker) -> None:
    """Users of an ``htpasswd -m`` file (Pulsar's documented format) authenticate over
    TLS; a wrong password is refused."""
    topic = f"persistent://private/auth/basic-{uuid.uuid4().hex[:6]}"
    assert (
        configured.admin(
            "admin",
            "POST",
            "/admin/v2/namespaces/private/auth/permissions/carol",
            ["produce", "consume"],
        )[0]
        == 204
    )
    client = pulsar.Client(
        configured.tls_url,
        tls_trust_certs_file_path=str(configured.certs.ca),
        authentication=pulsar.AuthenticationBasic("carol", BASIC_USERS["carol"]),
        operation_timeout_seconds=10,
    )
    wrong = pulsar.Client(
        configured.tls_url,
        tls_trust_certs_file_path=str(configured.certs.ca),
        authentication=pulsar.AuthenticationBasic("carol", "not-her-password"),
        operation_timeout_seconds=5,
    )
    try:
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"from carol")
        assert consumer.receive(timeout_millis=10_000).data() == b"from carol"
        with pytest.raises((pulsar.AuthenticationError, pulsar.ConnectError, pulsar.Timeout)):
            wrong.create_producer(topic)
    finally:
        client.close()
        wrong.close()


def test_roles_that_produce_or_consume_look_up_over_http(configured: SecuredBroker) -> None:
    """An HTTP service URL: the client reads the partitioned metadata and looks the topic
    up over HTTP with a token holding ``produce,consume``; a role without them gets 403."""
    topic = f"persistent://private/auth/http-{uuid.uuid4().hex[:6]}"
    path = topic.removeprefix("persistent://")
    status, _ = configured.admin("admin", "PUT", f"/admin/v2/persistent/{path}/partitions", 2)
    assert status == 204
    for route in (
        f"/lookup/v2/topic/persistent/{path}",
        f"/admin/v2/persistent/{path}/partitions",
        "/admin/v2/namespaces/private/auth/topics",
    ):
        assert configured.admin("token-principal", "GET", route)[0] == 200, route
        assert configured.admin("stranger", "GET", route)[0] == 403, route
    client = pulsar.Client(
        configured.process.http_url,
        authentication=pulsar.AuthenticationToken(configured.token("token-principal")),
        operation_timeout_seconds=10,
    )
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        for i in range(4):
            producer.send(f"m{i}".encode(), partition_key=str(i))
        received = sorted(consumer.receive(timeout_millis=10_000).data() for _ in range(4))
        assert received == [b"m0", b"m1", b"m2", b"m3"]
    finally:
        client.close()


def test_a_namespace_created_with_policies_grants_them(configured: SecuredBroker) -> None:
    """``PUT /admin/v2/namespaces/t/ns`` with a ``Policies`` body (the Go admin client's
    ``CreateNsWithPolices``): its ``auth_policies`` apply at once."""
    namespace = f"public/p-{uuid.uuid4().hex[:6]}"
    policies = {
        "auth_policies": {
            "namespace_auth": {"dora": ["produce", "consume"]},
            "destination_auth": {},
            "subscription_auth_roles": {},
        },
        "replication_clusters": [configured.process.cluster_name],
        "bundles": {"numBundles": 4},
    }
    assert configured.admin("admin", "PUT", f"/admin/v2/namespaces/{namespace}", policies)[0] == 204
    status, permissions = configured.admin(
        "admin", "GET", f"/admin/v2/namespaces/{namespace}/permissions"
    )
    assert (status, permissions) == (200, {"dora": ["produce", "consume"]})
    client = configured.client("dora", tls=True)
    try:
        topic = f"persistent://{namespace}/t"
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"granted by policies")
        assert consumer.receive(timeout_millis=10_000).data() == b"granted by policies"
    finally:
        client.close()
    unknown = {"replication_clusters": ["nowhere"]}
    status, body = configured.admin("admin", "PUT", f"/admin/v2/namespaces/{namespace}-x", unknown)
    assert status == 400 and "nowhere" in body["reason"]


def test_clusters_are_registered_with_their_urls(configured: SecuredBroker) -> None:
    """The setup registered the broker's own cluster (``clusters create``, its first
    PUT): its URLs are the ones given, and a second PUT is Pulsar's 409. Another cluster
    is registered the same way."""
    own = configured.process.cluster_name
    status, registered = configured.admin("admin", "GET", f"/admin/v2/clusters/{own}")
    assert status == 200
    assert registered["serviceUrl"] == f"{configured.process.http_url}/"
    assert registered["brokerServiceUrlTls"] == f"{configured.tls_url}/"
    data = {
        "serviceUrl": "http://other:8080",
        "serviceUrlTls": "https://other:8443",
        "brokerServiceUrl": "pulsar://other:6650",
        "brokerServiceUrlTls": "pulsar+ssl://other:6651",
    }
    status, body = configured.admin("admin", "PUT", f"/admin/v2/clusters/{own}", data)
    assert (status, body) == (409, {"reason": f"Cluster already exists: {own}"})
    other = f"other-{uuid.uuid4().hex[:6]}"
    assert configured.admin("admin", "PUT", f"/admin/v2/clusters/{other}", data)[0] == 204
    assert configured.admin("admin", "GET", f"/admin/v2/clusters/{other}") == (200, data)
    status, listed = configured.admin("admin", "GET", "/admin/v2/clusters")
    assert status == 200 and {own, other} <= set(listed)
    assert configured.admin("alice", "PUT", f"/admin/v2/clusters/{other}-2", data)[0] == 403


def test_anonymous_clients_use_the_granted_namespace(configured: SecuredBroker) -> None:
    """``anonymousUserRole``: a client without credentials is ``anonymous``, allowed where
    that role was granted, refused elsewhere with Pulsar's AuthorizationError."""
    client = configured.client(tls=True)
    try:
        topic = f"persistent://public/default/anon-{uuid.uuid4().hex[:6]}"
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"anonymous")
        assert consumer.receive(timeout_millis=10_000).data() == b"anonymous"
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer("persistent://private/auth/not-for-anonymous")
    finally:
        client.close()


def test_the_broker_client_presents_a_certificate(configured: SecuredBroker) -> None:
    """``brokerClientAuthenticationPlugin=...AuthenticationTls`` is accepted: the runtime
    configuration shows it (the broker started with it)."""
    status, runtime = configured.admin("admin", "GET", "/admin/v2/brokers/configuration/runtime")
    assert status == 200
    assert runtime["brokerClientAuthenticationPlugin"].endswith("AuthenticationTls")
    assert runtime["brokerClientCertificateFilePath"] == str(configured.certs.client_cert)


def test_an_unknown_listener_name_fails_the_lookup(configured: SecuredBroker) -> None:
    """The official client's ``listener_name='test'`` case: a broker without that
    listener refuses the lookup (Pulsar: "the broker does not have test listener")."""
    client = pulsar.Client(
        configured.tls_url,
        tls_trust_certs_file_path=str(configured.certs.ca),
        listener_name="test",
        operation_timeout_seconds=5,
    )
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("persistent://public/default/listener-test")
    finally:
        client.close()


def test_a_producer_in_a_missing_namespace_is_topic_not_found(configured: SecuredBroker) -> None:
    """The asyncio client expects Pulsar's code for a topic of a tenant that does not
    exist: ``TopicNotFound``, not an authorization failure."""
    from pulsar.asyncio import Client, PulsarException

    async def create() -> pulsar.Result:
        client = Client(configured.process.service_url, operation_timeout_seconds=5)
        try:
            await client.create_producer("tenant/ns/asyncio-test-send-failure")
        except PulsarException as failure:
            return failure.error()
        finally:
            await client.close()
        return pulsar.Result.Ok

    assert asyncio.run(create()) == pulsar.Result.TopicNotFound


def test_anonymous_admin_reads_and_subscription_permissions(configured: SecuredBroker) -> None:
    """The Go admin client's suite calls without credentials: the list of clusters needs
    no permission, as in Pulsar (a cluster's data needs a superuser). A subscription given
    roles (``permissions/subscription``) admits only them, to roles that are no tenant
    admins; revoking the last one opens it again."""
    assert configured.admin(None, "GET", "/admin/v2/clusters")[0] == 200
    own = configured.process.cluster_name
    assert configured.admin(None, "GET", f"/admin/v2/clusters/{own}")[0] == 403
    permissions = "/admin/v2/namespaces/private/auth/permissions"
    granted = configured.admin("admin", "POST", f"{permissions}/subscription/guarded", ["other"])
    assert granted[0] == 204
    assert configured.admin("admin", "GET", f"{permissions}/subscription") == (
        200,
        {"guarded": ["other"]},
    )
    topic = f"persistent://private/auth/guarded-{uuid.uuid4().hex[:6]}"
    client = configured.client("token-principal")
    try:
        client.subscribe(topic, "open").close()
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(topic, "guarded")
        assert configured.admin("admin", "DELETE", f"{permissions}/guarded/other")[0] == 204
        assert configured.admin("admin", "GET", f"{permissions}/subscription") == (
            200,
            {"guarded": []},
        )
        client.subscribe(topic, "guarded").close()
    finally:
        client.close()
