"""Provisioning downloads against a registry served on 127.0.0.1: checked against the
published checksum before anything is renamed into the cache, nothing half-written left
by a failure or an interruption, one download for concurrent runs, and archives that
point outside themselves refused."""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dedup_broker.devservers import fetch

ROOT = Path(__file__).resolve().parents[3]
MACHINE = platform.machine()
WHEEL = f"demo-1.0-py3-none-manylinux_2_17_{MACHINE}.whl"


class Registry:
    """A tiny PyPI JSON API and Maven repository: path -> bytes, with request counts."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.hits: Counter[str] = Counter()
        self.truncated: set[str] = set()
        self.delay = 0.0
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                registry.hits[self.path] += 1
                body = registry.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.path.endswith((".whl", ".tar.gz")):
                    time.sleep(registry.delay)
                if self.path in registry.truncated:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def publish_wheel(
        self, members: dict[str, tuple[bytes, int]], digest: str | None = None
    ) -> None:
        """``demo 1.0`` as one wheel (name -> content, mode), listed with a relative URL."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as wheel:
            for name, (content, mode) in members.items():
                info = zipfile.ZipInfo(name)
                info.external_attr = (0o100000 | mode) << 16
                wheel.writestr(info, content)
        body = buffer.getvalue()
        self.files[f"/files/{WHEEL}"] = body
        entry = {
            "filename": WHEEL,
            "url": f"../../files/{WHEEL}",
            "packagetype": "bdist_wheel",
            "yanked": False,
            "size": len(body),
            "digests": {"sha256": digest or hashlib.sha256(body).hexdigest()},
        }
        document = {"releases": {"1.0": [entry], "0.9": []}}
        self.files["/pypi/demo/json"] = json.dumps(document).encode()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    served = Registry()
    monkeypatch.setenv(fetch.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(fetch.PYPI_ENV, served.url + "/pypi")
    monkeypatch.setenv(fetch.MAVEN_ENV, served.url + "/maven2")
    try:
        yield served
    finally:
        served.close()


def demo_wheel() -> Path:
    return fetch.ensure_unpacked("demo-1.0", lambda: fetch.pypi_wheel("demo", "1.0"))


def cache_entries(cache: Path) -> list[str]:
    return sorted(path.name for path in cache.iterdir() if not path.name.endswith(".lock"))


def test_a_wheel_is_checked_unpacked_with_its_modes_and_fetched_once(registry: Registry) -> None:
    registry.publish_wheel({"demo/bin/tool": (b"#!/bin/sh\necho hi\n", 0o755)})
    home = demo_wheel()
    tool = home / "demo" / "bin" / "tool"
    assert tool.read_bytes().startswith(b"#!/bin/sh")
    assert os.access(tool, os.X_OK)
    assert demo_wheel() == home
    assert registry.hits[f"/files/{WHEEL}"] == 1
    assert cache_entries(fetch.cache_root()) == ["demo-1.0"]


def test_a_checksum_mismatch_keeps_nothing_and_the_next_run_works(registry: Registry) -> None:
    registry.publish_wheel({"demo/a": (b"a", 0o644)}, digest="0" * 64)
    with pytest.raises(fetch.FetchError, match="does not match the sha256"):
        demo_wheel()
    assert cache_entries(fetch.cache_root()) == []
    registry.publish_wheel({"demo/a": (b"a", 0o644)})
    assert (demo_wheel() / "demo" / "a").read_bytes() == b"a"


def test_an_interrupted_download_keeps_nothing_and_the_next_run_works(
    registry: Registry,
) -> None:
    registry.publish_wheel({"demo/a": (os.urandom(200_000), 0o644)})
    registry.truncated.add(f"/files/{WHEEL}")
    with pytest.raises(fetch.FetchError, match="failed"):
        demo_wheel()
    assert cache_entries(fetch.cache_root()) == []
    registry.truncated.clear()
    assert (demo_wheel() / "demo" / "a").stat().st_size == 200_000


def test_the_leftovers_of_a_killed_run_are_removed_by_the_next(registry: Registry) -> None:
    registry.publish_wheel({"demo/a": (b"a", 0o644)})
    leftover = fetch.cache_root() / ".demo-1.0.partial-4242"
    (leftover / "tree").mkdir(parents=True)
    (leftover / f"{WHEEL}.part").write_bytes(b"half")
    demo_wheel()
    assert cache_entries(fetch.cache_root()) == ["demo-1.0"]


def test_concurrent_runs_download_once_and_all_see_it_complete(
    registry: Registry, tmp_path: Path
) -> None:
    registry.publish_wheel({f"demo/f{i}": (os.urandom(20_000), 0o644) for i in range(50)})
    registry.delay = 0.5
    code = (
        "from dedup_broker.devservers import fetch\n"
        "home = fetch.ensure_unpacked('demo-1.0', lambda: fetch.pypi_wheel('demo', '1.0'))\n"
        "print(len(list((home / 'demo').iterdir())))\n"
    )
    runs = [
        subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outputs = [run.communicate(timeout=60)[0].strip() for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0, 0]
    assert outputs == ["50"] * 4
    assert registry.hits[f"/files/{WHEEL}"] == 1


def test_maven_central_files_use_sha512_else_sha1(registry: Registry) -> None:
    jar = b"PK fake jar"
    base = "/maven2/org/example/tool/1.2"
    registry.files[f"{base}/tool-1.2.jar"] = jar
    registry.files[f"{base}/tool-1.2.jar.sha1"] = hashlib.sha1(jar).hexdigest().encode() + b"\n"
    item = fetch.maven_file("org.example", "tool", "1.2", "jar")
    assert (item.algorithm, item.digest) == ("sha1", hashlib.sha1(jar).hexdigest())
    sha512 = hashlib.sha512(jar).hexdigest()
    registry.files[f"{base}/tool-1.2.jar.sha512"] = f"{sha512}  tool-1.2.jar".encode()
    item = fetch.maven_file("org.example", "tool", "1.2", "jar")
    assert (item.algorithm, item.digest) == ("sha512", sha512)
    home = fetch.ensure_unpacked("tool-1.2", lambda: item)
    assert (home / "tool-1.2.jar").read_bytes() == jar


def test_a_tarball_reaching_outside_itself_is_refused(registry: Registry) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tarred:
        info = tarfile.TarInfo("tool-1.0/../../evil")
        info.size = 4
        tarred.addfile(info, io.BytesIO(b"evil"))
    body = buffer.getvalue()
    base = "/maven2/org/example/tool/1.0"
    registry.files[f"{base}/tool-1.0-bin.tar.gz"] = body
    registry.files[f"{base}/tool-1.0-bin.tar.gz.sha1"] = hashlib.sha1(body).hexdigest().encode()
    with pytest.raises(fetch.FetchError, match="outside itself"):
        fetch.ensure_unpacked(
            "tool-1.0", lambda: fetch.maven_file("org.example", "tool", "1.0", "tar.gz", "bin")
        )
    assert cache_entries(fetch.cache_root()) == []
    assert not (fetch.cache_root().parent / "evil").exists()


def test_a_missing_version_or_platform_is_a_message(registry: Registry) -> None:
    registry.publish_wheel({"demo/a": (b"a", 0o644)})
    with pytest.raises(fetch.FetchError, match=r"no wheel of demo 0\.9"):
        fetch.pypi_wheel("demo", "0.9")
    with pytest.raises(fetch.FetchError, match=r"answered 404|nothing at"):
        fetch.pypi_wheel("absent", "1.0")


@pytest.mark.parametrize(
    ("filename", "runs"),
    [
        (f"x-1-cp311-cp311-manylinux_2_17_{MACHINE}.manylinux2014_{MACHINE}.whl", True),
        (f"x-1-py3-none-manylinux_2_27_{MACHINE}.manylinux_2_28_{MACHINE}.whl", True),
        (f"x-1-py3-none-manylinux_2_999_{MACHINE}.whl", False),
        ("x-1-py3-none-manylinux_2_17_someotherarch.whl", False),
        (f"x-1-py3-none-musllinux_1_2_{MACHINE}.whl", False),
        ("x-1-py3-none-win_amd64.whl", False),
    ],
)
def test_only_wheels_for_this_machine_and_glibc_are_chosen(filename: str, runs: bool) -> None:
    assert fetch.glibc_version() is not None
    assert fetch.wheel_runs_here(filename) is runs


def test_an_unreachable_registry_is_a_reason_not_an_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = closed.server_address[1]
    closed.server_close()
    monkeypatch.setenv(fetch.MAVEN_ENV, f"http://127.0.0.1:{port}/maven2")
    reason = fetch.reachable("Maven Central", timeout=2)
    assert reason is not None and reason.startswith("Maven Central unreachable")
