"""The container images of the container tier, built on this machine from Debian packages,
PyPI and Maven Central: no registry serves images here, so nothing is pulled.

``debootstrap`` makes a Debian 12 root file system from the mirror apt already uses (read
from apt's sources at build time; no address lives in the repository); it is cached as a
tarball and imported as the base image. Python, Java and Redis images are layered on it
with ``apt-get``, the Kafka image copies the jars ``distribution`` resolved from Maven
Central, and the broker image is ``docker/Dockerfile`` with that Python image as its base.

Every image carries a label with the digest of what it was built from (its parent image,
Dockerfile and build context), so a build is skipped while nothing changed and redone when
something did. Build contexts are assembled here file by file, so no CLI, BuildKit or
``.dockerignore`` support of the engine matters.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import logging
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dedup_broker.devservers import distribution
from dedup_broker.devservers.docker_engine import docker_sdk, ensure_tools
from dedup_broker.errors import DevServerError

DEBIAN_SUITE = "bookworm"
INPUTS_LABEL = "org.dedup-broker.inputs"
MIRROR_ENV = "DEDUP_BROKER_DEBIAN_MIRROR"
"""Overrides the mirror read from apt's sources (e.g. on a machine that is not Debian 12)."""

DEBIAN_IMAGE = "dedup-broker-local/debian:12"
PYTHON_IMAGE = "dedup-broker-local/python:3.11"
JAVA_IMAGE = "dedup-broker-local/java:17"
REDIS_IMAGE = "dedup-broker-local/redis:7"
KAFKA_IMAGE = f"dedup-broker-local/kafka:{distribution.KAFKA_VERSION}"
BROKER_IMAGE = "dedup-broker:local"
"""The name docker/compose.yaml gives the broker image it builds."""

ROOT = Path(__file__).resolve().parents[2]
DEBOOTSTRAP_TIMEOUT_SECONDS = 900.0
BUILD_TIMEOUT_SECONDS = 1200

_log = logging.getLogger(__name__)
Progress = Callable[[str], None]


@dataclass(frozen=True)
class ImageSpec:
    """One image built from a Dockerfile on a parent built here (``BASE`` build argument)."""

    tag: str
    dockerfile: str
    """Relative to the repository root."""
    parent: str
    context: Callable[[], dict[str, Path]]
    """Archive name -> file, besides the Dockerfile."""


def _local_files(*names: str) -> Callable[[], dict[str, Path]]:
    return lambda: {name: ROOT / "docker" / "local" / name for name in names}


def _python_context() -> dict[str, Path]:
    return {"host-ca-certificates.crt": host_ca_bundle()}


def host_ca_bundle() -> Path:
    """The CA bundle this machine's pip and Python trust (a TLS-intercepting proxy's CA
    is only in there): ``PIP_CERT``, ``REQUESTS_CA_BUNDLE``, ``SSL_CERT_FILE``, else
    Debian's bundle."""
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        value = os.environ.get(name, "").strip()
        if value and Path(value).is_file():
            return Path(value)
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        raise DevServerError(f"no CA bundle for pip in the Python image: {bundle} is missing")
    return bundle


def _kafka_context() -> dict[str, Path]:
    libs = distribution.ensure_kafka() / "libs"
    files = {f"libs/{jar.name}": jar for jar in sorted(libs.glob("*.jar"))}
    return files | _local_files("kafka-run.sh", "kafka-log4j2.properties")()


def _broker_context() -> dict[str, Path]:
    """What ``docker/Dockerfile.dockerignore`` lets into the context, as the CLI sends it
    (matched by the Docker SDK's own ``.dockerignore`` rules)."""
    build = importlib.import_module("docker.utils.build")
    ignore = ROOT / "docker" / "Dockerfile.dockerignore"
    patterns = [
        line.strip()
        for line in ignore.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    included = build.exclude_paths(str(ROOT), patterns)
    return {name: ROOT / name for name in sorted(included) if (ROOT / name).is_file()}


IMAGES = (
    ImageSpec(PYTHON_IMAGE, "docker/local/python.Dockerfile", DEBIAN_IMAGE, _python_context),
    ImageSpec(JAVA_IMAGE, "docker/local/java.Dockerfile", DEBIAN_IMAGE, _local_files()),
    ImageSpec(REDIS_IMAGE, "docker/local/redis.Dockerfile", DEBIAN_IMAGE, _local_files()),
    ImageSpec(KAFKA_IMAGE, "docker/local/kafka.Dockerfile", JAVA_IMAGE, _kafka_context),
    ImageSpec(BROKER_IMAGE, "docker/Dockerfile", PYTHON_IMAGE, _broker_context),
)
ALL_TAGS = (DEBIAN_IMAGE, *(spec.tag for spec in IMAGES))


def images_dir() -> Path:
    """The debootstrap tarball and the build logs: ``<cache>/images``."""
    return distribution.cache_root() / "images"


def missing_images(client: Any) -> list[str]:
    """The tags of the tier's images the engine does not have."""
    present = {tag for image in client.images.list() for tag in image.tags}
    return [tag for tag in ALL_TAGS if tag not in present]


def build_images(client: Any, *, refresh: bool = False, progress: Progress = print) -> None:
    """Builds every image that is missing or stale; ``refresh`` redoes the debootstrap
    tarball and builds without the layer cache (newer Debian and PyPI packages)."""
    started = time.monotonic()
    if refresh:
        _rootfs_tarball(images_dir()).unlink(missing_ok=True)
    _import_base(client, progress)
    for spec in IMAGES:
        _build(client, spec, refresh, progress)
    progress(f"images ready in {time.monotonic() - started:.0f} s")


# --- the Debian base -----------------------------------------------------------------
def _rootfs_tarball(directory: Path) -> Path:
    return directory / f"debian-{DEBIAN_SUITE}-minbase.tar"


def _import_base(client: Any, progress: Progress) -> None:
    tarball = ensure_rootfs(progress)
    digest = Path(f"{tarball}.sha256").read_text().strip()
    if _label(client, DEBIAN_IMAGE) == digest:
        progress(f"{DEBIAN_IMAGE}: up to date")
        return
    repository, tag = DEBIAN_IMAGE.rsplit(":", 1)
    client.api.import_image_from_file(
        str(tarball),
        repository=repository,
        tag=tag,
        changes=["ENV LANG=C.UTF-8", 'CMD ["bash"]', f"LABEL {INPUTS_LABEL}={digest}"],
    )
    progress(f"{DEBIAN_IMAGE}: imported from {tarball}")


def ensure_rootfs(progress: Progress = print) -> Path:
    """The cached Debian 12 (minbase) root file system tarball; made with debootstrap
    (as root) when missing. Its digest is written next to it, last."""
    directory = images_dir()
    tarball = _rootfs_tarball(directory)
    digest_path = Path(f"{tarball}.sha256")
    if tarball.is_file() and digest_path.is_file():
        return tarball
    if os.geteuid() != 0:
        raise DevServerError("the Debian base image is made with debootstrap, which needs root")
    ensure_tools("debootstrap")
    debootstrap = shutil.which("debootstrap") or shutil.which("debootstrap", path="/usr/sbin")
    if debootstrap is None:
        raise DevServerError("debootstrap is not installed (Debian: apt-get install debootstrap)")
    sources = apt_sources(DEBIAN_SUITE)
    mirror = os.environ.get(MIRROR_ENV, "").strip() or _main_mirror(sources)
    directory.mkdir(parents=True, exist_ok=True)
    progress(f"debootstrap {DEBIAN_SUITE} (minbase) into the cache, about a minute")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=directory, prefix="rootfs-") as work:
        rootfs = Path(work) / "rootfs"
        _run(
            [debootstrap, "--variant=minbase", DEBIAN_SUITE, str(rootfs), mirror],
            directory / "debootstrap.log",
            DEBOOTSTRAP_TIMEOUT_SECONDS,
        )
        _configure_rootfs(rootfs, sources or [(mirror, DEBIAN_SUITE)])
        partial = Path(work) / "rootfs.tar"
        _run(
            ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), "."],
            directory / "debootstrap.log",
            DEBOOTSTRAP_TIMEOUT_SECONDS,
        )
        digest_path.unlink(missing_ok=True)
        shutil.move(partial, tarball)
    digest_path.write_text(_file_digest(tarball) + "\n")
    progress(f"debootstrap done in {time.monotonic() - started:.0f} s: {tarball}")
    return tarball


def _configure_rootfs(rootfs: Path, sources: list[tuple[str, str]]) -> None:
    """What container bases do: apt sources of every suite, no service starts in package
    scripts, no recommends, no package files kept."""
    lines = "".join(f"deb {uri} {suite} main\n" for uri, suite in sources)
    (rootfs / "etc/apt/sources.list").write_text(lines)
    policy = rootfs / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\n# No services start inside image builds.\nexit 101\n")
    policy.chmod(0o755)
    (rootfs / "etc/apt/apt.conf.d/90container").write_text(
        'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n'
        'Acquire::Languages "none";\n'
        'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb || true"; };\n'
    )
    for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for path in (rootfs / leftover).glob("*"):
            if path.is_file():
                path.unlink()


def apt_sources(suite: str, apt: Path = Path("/etc/apt")) -> list[tuple[str, str]]:
    """``(uri, suite)`` of apt's enabled ``deb`` sources of ``suite`` and its siblings
    (``-updates``, ``-security``) carrying ``main``, from sources.list and sources.list.d."""
    found: list[tuple[str, str]] = []
    files = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            entries = _deb822_entries(text)
        elif path.name == "sources.list" or path.suffix == ".list":
            entries = _one_line_entries(text)
        else:
            continue
        for uri, suites in entries:
            for name in suites:
                if (name == suite or name.startswith(f"{suite}-")) and (uri, name) not in found:
                    found.append((uri, name))
    return found


def _deb822_entries(text: str) -> Iterator[tuple[str, list[str]]]:
    for paragraph in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        if "deb" not in fields.get("types", "").split():
            continue
        if "main" not in fields.get("components", "").split():
            continue
        for uri in fields.get("uris", "").split():
            yield uri.rstrip("/"), fields.get("suites", "").split()


def _one_line_entries(text: str) -> Iterator[tuple[str, list[str]]]:
    for raw in text.splitlines():
        line = re.sub(r"\[[^\]]*\]", " ", raw.split("#", 1)[0]).split()
        if len(line) >= 4 and line[0] == "deb" and "main" in line[3:]:
            yield line[1].rstrip("/"), [line[2]]


def _main_mirror(sources: list[tuple[str, str]]) -> str:
    for uri, suite in sources:
        if suite == DEBIAN_SUITE:
            return uri
    raise DevServerError(
        f"apt's sources name no {DEBIAN_SUITE} mirror with 'main' to debootstrap from; "
        f"set {MIRROR_ENV}"
    )


# --- layered images --------------------------------------------------------------------
def _build(client: Any, spec: ImageSpec, refresh: bool, progress: Progress) -> None:
    files = {"Dockerfile": ROOT / spec.dockerfile, **spec.context()}
    parent_id = str(client.images.get(spec.parent).id)
    digest = _inputs_digest(parent_id, files)
    if not refresh and _label(client, spec.tag) == digest:
        progress(f"{spec.tag}: up to date")
        return
    progress(f"{spec.tag}: building from {spec.dockerfile}")
    previous = _image_id(client, spec.tag)
    started = time.monotonic()
    log_path = images_dir() / f"{spec.tag.replace('/', '_').replace(':', '_')}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as context, log_path.open("w") as log:
        _write_context(context, files)
        context.seek(0)
        stream = client.api.build(
            fileobj=context,
            custom_context=True,
            tag=spec.tag,
            dockerfile="Dockerfile",
            buildargs={"BASE": spec.parent},
            labels={INPUTS_LABEL: digest},
            network_mode="host",
            rm=True,
            forcerm=True,
            pull=False,
            nocache=refresh,
            decode=True,
            timeout=BUILD_TIMEOUT_SECONDS,
        )
        error = _follow(stream, log)
    if error is not None:
        tail = log_path.read_text(errors="replace").splitlines()[-30:]
        raise DevServerError(f"building {spec.tag} failed: {error}\n" + "\n".join(tail))
    progress(f"{spec.tag}: built in {time.monotonic() - started:.0f} s")
    _remove_replaced(client, spec.tag, previous)


def _follow(stream: Any, log: Any) -> str | None:
    """Writes the build's output to ``log``; the error it ended with, if any."""
    for chunk in stream:
        if "stream" in chunk:
            log.write(str(chunk["stream"]))
        if "error" in chunk:
            log.write(f"ERROR: {chunk['error']}\n")
            return str(chunk["error"]).strip()
    return None


def _write_context(fileobj: Any, files: dict[str, Path]) -> None:
    """A tar with fixed owners and times, so that the layer cache sees content only."""
    with tarfile.open(fileobj=fileobj, mode="w") as tar:
        for name, path in sorted(files.items()):
            info = tarfile.TarInfo(name)
            data = path.read_bytes()
            info.size = len(data)
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))


def _inputs_digest(parent_id: str, files: dict[str, Path]) -> str:
    digest = hashlib.sha256(parent_id.encode())
    for name, path in sorted(files.items()):
        executable = os.access(path, os.X_OK)
        digest.update(f"\0{name}\0{int(executable)}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _image_id(client: Any, tag: str) -> str | None:
    try:
        return str(client.images.get(tag).id)
    except docker_sdk().errors.ImageNotFound:
        return None


def _remove_replaced(client: Any, tag: str, previous: str | None) -> None:
    """Removes the image ``tag`` named before this build (each broker rebuild would leave
    one behind); one still used by a container or an image built on it stays."""
    if previous is None or previous == _image_id(client, tag):
        return
    try:
        client.images.remove(previous, noprune=False)
    except docker_sdk().errors.APIError as exc:
        _log.debug("keeping the replaced image %s: %s", previous, exc)


def _label(client: Any, tag: str) -> str | None:
    errors = docker_sdk().errors
    try:
        image = client.images.get(tag)
    except errors.ImageNotFound:
        return None
    labels = image.labels or {}
    value = labels.get(INPUTS_LABEL)
    return None if value is None else str(value)


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run(argv: list[str], log_path: Path, timeout: float) -> None:
    with log_path.open("ab") as log:
        try:
            result = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise DevServerError(f"{argv[0]} took over {timeout:.0f} s ({log_path})") from None
    if result.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-20:]
        raise DevServerError(
            f"{' '.join(argv[:3])} failed ({result.returncode}):\n" + "\n".join(tail)
        )
