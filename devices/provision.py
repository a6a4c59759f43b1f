"""Offline runtime provisioning: give a device an ML runtime without the device's own internet.

The host asks the device's python for its platform (machine, glibc, python version), fetches
the pinned wheel set for that platform into a host cache with ``pip download`` (only binary
wheels, dependencies resolved for the device, not for this host), uploads the wheels the device
lacks (sha256-checked), creates ``WORK/venv`` with the device's own python and installs into it
with ``pip install --no-index --find-links WORK/wheels``: the device never contacts an index.
Its python (``WORK/venv/bin/python``) is then the device python for deploys. Which wheels a
runtime needs its folder declares (``Runtime.provision``); ``targets.provision`` passes them to
``install_runtime`` here, which names no runtime.

Device layout under the work dir (default ``~/.edge``)::

    wheels/<name>.whl          the uploaded wheels, by file name, sha256-checked
    venv/                      python -m venv --without-pip (pip runs from its uploaded wheel)
    venv/edge-provision.json   which runtimes (requirements and wheel hashes) are installed

Host cache: ``$EDGE_CACHE_DIR/wheels/<tag>/`` (default ``~/.cache/edge/wheels``), e.g.
``cp311-manylinux_2_36_aarch64``, with one manifest per runtime and pin set, so a repeat
provisioning needs no index on the host either.

Every remote command is a fixed argv (fixed ``python -c`` programs; paths as arguments).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devices.transport import Transport, check_device_path, expand_home
from edge.core.cache import cache_root
from edge.core.errors import DeviceError, UsageError
from edge.core.model import sha256_file

__all__ = ["NUMPY", "PIP", "DevicePlatform", "ProvisionReport", "default_cache",
           "fetch_wheels", "install_declared", "install_runtime", "parse_platform",
           "probe_platform", "runtime_to_provision"]

# The project's pins (pyproject.toml): the device gets the same runtime the host verified.
NUMPY = "numpy>=2.4,<2.5"
PIP = "pip==26.3"  # runs from its wheel on the device, and is installed into the venv
VENV = "venv"
WHEELS = "wheels"
MARKER = "edge-provision.json"
_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64",
         "armv7l": "armv7l", "armv8l": "armv7l", "i686": "i686", "i386": "i686",
         "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}
_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
_WHEEL = re.compile(r"[A-Za-z0-9_.+!-]+\.whl")

# ---------------------------------------------------------------- device-side programs
# Fixed programs run as ``python -c PROGRAM ARG...``: nothing from input becomes code.

_FACTS = """\
import importlib.util, json, os, platform, struct, sys
try:
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
except (ValueError, OSError, AttributeError):
    libc = ""
print(json.dumps({"machine": platform.machine(), "system": platform.system(), "libc": libc,
    "bits": struct.calcsize("P") * 8, "python": platform.python_version(),
    "implementation": sys.implementation.name, "executable": sys.executable,
    "prefix": sys.prefix, "base_prefix": sys.base_prefix,
    "venv": importlib.util.find_spec("venv") is not None}))
"""

_HASHES = """\
import hashlib, json, os, sys
folder, out = sys.argv[1], {}
for name in sys.argv[2:]:
    path = os.path.join(folder, name)
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        out[name] = digest.hexdigest()
    except OSError:
        out[name] = None
print(json.dumps(out))
"""

_MOVE = """\
import hashlib, json, os, sys
args, bad = sys.argv[1:], []
for tmp, final, want in zip(args[0::3], args[1::3], args[2::3]):
    digest = hashlib.sha256()
    with open(tmp, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
        os.fsync(f.fileno())
    if digest.hexdigest() != want:
        os.unlink(tmp)
        bad.append(os.path.basename(final))
    else:
        os.replace(tmp, final)
print(json.dumps({"bad": bad}))
"""

# pip from its uploaded wheel, with no pip configuration and no PIP_* environment of the
# device's: only the command line below decides where pip looks (--no-index).
_PIP = """\
import os, runpy, sys
for key in [k for k in os.environ if k.startswith("PIP_")]:
    del os.environ[key]
os.environ["PIP_CONFIG_FILE"] = os.devnull
sys.path.insert(0, sys.argv[1])
sys.argv = ["pip"] + sys.argv[2:]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
"""

_CHECK = """\
import importlib, importlib.metadata, json, platform, sys
module, dist = sys.argv[1], sys.argv[2]
importlib.import_module("numpy")
importlib.import_module(module)
print(json.dumps({"version": importlib.metadata.version(dist),
    "numpy": importlib.metadata.version("numpy"), "python": platform.python_version(),
    "machine": platform.machine()}))
"""

_READ = """\
import json, sys
try:
    with open(sys.argv[1]) as f:
        print(json.dumps(json.load(f)))
except (OSError, ValueError):
    print("{}")
"""

_WRITE = """\
import os, sys
path, text = sys.argv[1], sys.argv[2]
with open(path + ".tmp", "w") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
os.replace(path + ".tmp", path)
"""


# ---------------------------------------------------------------- the device's platform


@dataclass(frozen=True, kw_only=True, slots=True)
class DevicePlatform:
    """What decides which wheels run on the device."""

    machine: str  # as the device's python sees it (platform.machine())
    arch: str  # the wheel tag architecture: aarch64, x86_64, armv7l, ...
    glibc: str  # e.g. "2.36"
    python: str  # e.g. "3.11.2"

    @property
    def python_tag(self) -> str:
        """CPython ABI tag, e.g. cp311."""
        major, minor = self.python.split(".")[:2]
        return f"cp{major}{minor}"

    @property
    def python_version(self) -> str:
        """MAJOR.MINOR for pip's --python-version."""
        return ".".join(self.python.split(".")[:2])

    @property
    def tag(self) -> str:
        """One name for the platform, e.g. cp311-manylinux_2_36_aarch64 (the cache dir)."""
        return f"{self.python_tag}-manylinux_{self.glibc.replace('.', '_')}_{self.arch}"

    def platforms(self) -> list[str]:
        """Every manylinux platform tag the device's glibc accepts, newest first."""
        major, minor = (int(p) for p in self.glibc.split(".")[:2])
        if major != 2:
            raise DeviceError(f"glibc {self.glibc} is not a glibc 2.x: no manylinux wheels")
        oldest = 5 if self.arch in ("x86_64", "i686") else 17
        tags = []
        for m in range(minor, oldest - 1, -1):
            tags.append(f"manylinux_2_{m}_{self.arch}")
            if m in _LEGACY:
                tags.append(f"{_LEGACY[m]}_{self.arch}")
        return tags

    def to_json(self) -> dict[str, str]:
        """A JSON-ready dict."""
        return {"machine": self.machine, "arch": self.arch, "glibc": self.glibc,
                "python": self.python, "tag": self.tag}


def parse_platform(facts: dict[str, Any], where: str = "device") -> DevicePlatform:
    """The platform from the facts ``_FACTS`` prints; a one-line DeviceError if wheels
    cannot exist for it (not Linux, not glibc, not CPython, an unknown CPU)."""
    machine = str(facts.get("machine", ""))
    if facts.get("system") != "Linux":
        raise DeviceError(f"{where}: provisioning supports Linux devices; this one runs "
                          f"{facts.get('system') or 'an unknown OS'}")
    if facts.get("implementation") != "cpython":
        raise DeviceError(f"{where}: its python is {facts.get('implementation')}, not CPython: "
                          "no binary wheels of the runtimes for it")
    libc = str(facts.get("libc", ""))
    if not libc.startswith("glibc "):
        raise DeviceError(f"{where}: no glibc found (musl or another libc?): the runtimes ship "
                          "manylinux (glibc) wheels only; use a glibc distribution")
    arch = _ARCH.get(machine.lower())
    if arch is None:
        raise DeviceError(f"{where}: CPU architecture {machine!r} is not supported")
    if arch == "aarch64" and facts.get("bits") == 32:
        arch = "armv7l"  # a 32-bit userland on a 64-bit kernel (e.g. Raspberry Pi OS 32-bit)
    if arch == "x86_64" and facts.get("bits") == 32:
        arch = "i686"
    python = str(facts.get("python", ""))
    if not re.fullmatch(r"3\.\d+\.\d+\S*", python):
        raise DeviceError(f"{where}: cannot read its python version ({python!r})")
    return DevicePlatform(machine=machine, arch=arch, glibc=libc.split()[1], python=python)


def probe_platform(transport: Transport, python: str) -> tuple[DevicePlatform, dict[str, Any]]:
    """Ask the device's python for its platform; the parsed platform and the raw facts."""
    facts = _json_run(transport, [python, "-c", _FACTS], f"run '{python}'", timeout=120)
    return parse_platform(facts, transport.label), facts


# ---------------------------------------------------------------- host side: the wheel cache


def default_cache() -> Path:
    """``$EDGE_CACHE_DIR/wheels`` (default ~/.cache/edge/wheels)."""
    return cache_root() / "wheels"


@dataclass(frozen=True, kw_only=True, slots=True)
class _Wheelset:
    folder: Path
    wheels: dict[str, str]  # file name -> sha256
    downloaded: bool


def fetch_wheels(platform: DevicePlatform, requirements: Iterable[str], *,
                 cache: Path | None = None,
                 no_deps: bool = False) -> tuple[Path, dict[str, str], bool]:
    """Wheels for ``requirements`` (and their dependencies) for the device's platform, in
    ``cache/<tag>/``: (folder, {file name: sha256}, whether pip downloaded them now).

    A manifest per requirement set makes a repeat call offline: the cached files are only
    re-hashed. Otherwise ``pip download --only-binary=:all:`` runs on this host, resolving
    for the device (--platform/--python-version/--implementation/--abi); with ``no_deps``
    only the listed wheels (``--no-deps``: the list names every dependency itself).
    """
    got = _fetch(platform, tuple(requirements), cache or default_cache(), no_deps)
    return got.folder, got.wheels, got.downloaded


def _fetch(platform: DevicePlatform, requirements: tuple[str, ...], cache: Path,
           no_deps: bool = False) -> _Wheelset:
    folder = cache / platform.tag
    folder.mkdir(parents=True, exist_ok=True)
    listed = sorted(requirements) + (["--no-deps"] if no_deps else [])
    key = hashlib.sha256("\n".join(listed).encode()).hexdigest()[:16]
    manifest = folder / f"manifest-{key}.json"
    with _host_lock(folder / ".lock"):
        wheels = _cached(folder, manifest, requirements, no_deps)
        if wheels is not None:
            return _Wheelset(folder=folder, wheels=wheels, downloaded=False)
        with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
            _pip_download(platform, requirements, Path(tmp), no_deps)
            wheels = {}
            for path in sorted(Path(tmp).glob("*.whl")):
                wheels[path.name] = sha256_file(path)
                os.replace(path, folder / path.name)
        if not wheels:
            raise DeviceError(f"pip download fetched no wheels for {platform.tag}")
        manifest.write_text(json.dumps({"requirements": sorted(requirements), "tag": platform.tag,
                                        "platforms": platform.platforms(), "no_deps": no_deps,
                                        "wheels": wheels}, indent=1) + "\n")
    return _Wheelset(folder=folder, wheels=wheels, downloaded=True)


def _cached(folder: Path, manifest: Path, requirements: tuple[str, ...],
            no_deps: bool = False) -> dict[str, str] | None:
    """The manifest's wheels if every file is there with its sha256, else None."""
    try:
        doc = json.loads(manifest.read_text())
        wheels = {str(k): str(v) for k, v in doc["wheels"].items()}
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    if sorted(doc.get("requirements", ())) != sorted(requirements) or not wheels or \
            bool(doc.get("no_deps", False)) != no_deps:
        return None
    for name, sha in wheels.items():
        path = folder / name
        if not _WHEEL.fullmatch(name) or not path.is_file() or sha256_file(path) != sha:
            return None
    return wheels


def _pip_download(platform: DevicePlatform, requirements: tuple[str, ...], dest: Path,
                  no_deps: bool = False) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
           "--no-input", "--only-binary=:all:", *(["--no-deps"] if no_deps else []),
           "--dest", str(dest),
           "--python-version", platform.python_version, "--implementation", "cp",
           "--abi", platform.python_tag]
    for tag in platform.platforms():
        cmd += ["--platform", tag]
    try:
        done = subprocess.run([*cmd, *requirements], capture_output=True, text=True,
                              timeout=1800, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DeviceError(f"pip download on this host failed: {exc}") from None
    if done.returncode != 0:
        errors = [ln.strip() for ln in done.stderr.splitlines() if ln.startswith("ERROR:")]
        why = (errors[-1] if errors else (done.stderr.strip().splitlines() or ["?"])[-1])
        raise DeviceError(f"cannot fetch wheels for the device ({platform.tag}, python "
                          f"{platform.python}): pip download: {why.removeprefix('ERROR: ')}")


@contextlib.contextmanager
def _host_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


# ---------------------------------------------------------------- provisioning


@dataclass(frozen=True, kw_only=True, slots=True)
class ProvisionReport:
    """What provisioning did; ``python`` is the device python to deploy with."""

    target: str
    runtime: str
    runtime_version: str
    python: str  # WORK/venv/bin/python on the device
    venv: str
    platform: DevicePlatform
    requirements: tuple[str, ...]
    wheels: tuple[str, ...]  # file names of the whole set (pip included)
    cache: str  # the host folder the wheels came from
    downloaded: bool  # pip download ran on this host (else: all from the host cache)
    files_sent: int
    bytes_sent: int
    files_reused: int  # already on the device with the right sha256: not sent
    venv_created: bool
    installed: bool  # pip install ran on the device (else: the venv already had the set)
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"target": self.target, "runtime": self.runtime,
                "runtime_version": self.runtime_version, "python": self.python,
                "venv": self.venv, "platform": self.platform.to_json(),
                "requirements": list(self.requirements), "wheels": list(self.wheels),
                "cache": self.cache, "downloaded": self.downloaded,
                "files_sent": self.files_sent, "bytes_sent": self.bytes_sent,
                "files_reused": self.files_reused, "venv_created": self.venv_created,
                "installed": self.installed, "seconds": self.seconds}


def install_runtime(
    transport: Transport, *, device_python: str, work_dir: str, runtime: str,
    requirements: tuple[str, ...], module: str, distribution: str,
    host_cache: Path | None = None, no_deps: bool = False,
) -> ProvisionReport:
    """Install ``runtime`` (its pinned ``requirements``; ``module`` imported and
    ``distribution``'s version read to check it) and numpy into ``WORK/venv`` on the device
    from wheels fetched on this host; the device needs python3 with venv, no internet. Which
    runtimes can be installed, and how, their folders declare (``targets.provision``); with
    ``no_deps`` the wheels are fetched and installed without their dependencies (the
    requirements name every one the runtime needs on the device).

    Idempotent: wheels already on the device (by sha256) are not sent again, and pip does not
    run when the venv already holds exactly this set. Errors are one-line DeviceErrors
    (UsageError for an unknown runtime or a bad path).
    """
    started = time.monotonic()
    requirements, dist = (*requirements, NUMPY), distribution
    label = transport.label
    for what, text in (("work_dir", work_dir), ("device python", device_python)):
        check_device_path(what, text)
    home = transport.home()
    work = expand_home(work_dir, home, relative=True)
    python = expand_home(device_python, home)
    platform, _ = probe_platform(transport, python)
    wanted = (*requirements, PIP)
    got = _fetch(platform, wanted, host_cache or default_cache(), no_deps)
    pip_wheel = next((n for n in got.wheels if n.lower().startswith("pip-")), None)
    if pip_wheel is None:
        raise DeviceError(f"no pip wheel among the fetched wheels in {got.folder}")

    wheels_dir = f"{work}/{WHEELS}"
    transport.mkdir(wheels_dir)
    sent, sent_bytes, reused = _upload(transport, python, got, wheels_dir)

    venv = f"{work}/{VENV}"
    venv_python = f"{venv}/bin/python"
    created = _ensure_venv(transport, python, venv, venv_python, platform)
    marker_path = f"{venv}/{MARKER}"
    marker = _json_run(transport, [venv_python, "-c", _READ, marker_path], "read the venv marker")
    entry: dict[str, Any] = {"requirements": sorted(requirements),
                             "wheels": dict(sorted(got.wheels.items()))}
    if no_deps:
        entry["no_deps"] = True
    installed = False
    check = None
    if not created and marker.get("runtimes", {}).get(runtime) == entry:
        check = _try_check(transport, venv_python, module, dist)
    if check is None:
        _pip_install(transport, venv_python, f"{wheels_dir}/{pip_wheel}", wheels_dir, wanted,
                     no_deps)
        installed = True
        check = _try_check(transport, venv_python, module, dist, raise_error=True)
        assert check is not None
        runtimes = dict(marker.get("runtimes", {})) if not created else {}
        runtimes[runtime] = entry
        done = transport.run([venv_python, "-c", _WRITE, marker_path,
                              json.dumps({"runtimes": runtimes})], timeout=120)
        if done.status != 0:
            raise DeviceError(f"{label}: cannot write {marker_path}: {_tail(done)}")
    return ProvisionReport(
        target=label, runtime=runtime, runtime_version=str(check["version"]),
        python=venv_python, venv=venv, platform=platform, requirements=tuple(requirements),
        wheels=tuple(sorted(got.wheels)), cache=str(got.folder), downloaded=got.downloaded,
        files_sent=sent, bytes_sent=sent_bytes, files_reused=reused, venv_created=created,
        installed=installed, seconds=round(time.monotonic() - started, 3))


# ---------------------------------------------------------------- steps on the device


def _upload(transport: Transport, python: str, got: _Wheelset,
            wheels_dir: str) -> tuple[int, int, int]:
    """Send the wheels the device lacks (sha256), verified and renamed into place by the
    device; (files sent, bytes sent, files reused)."""
    names = sorted(got.wheels)
    have = _json_run(transport, [python, "-c", _HASHES, wheels_dir, *names],
                     "hash the device's wheels")
    missing = [n for n in names if have.get(n) != got.wheels[n]]
    moves: list[str] = []
    sent_bytes = 0
    for name in missing:
        tmp = f"{wheels_dir}/.{name}.{secrets.token_hex(4)}.partial"
        transport.put(got.folder / name, tmp)
        sent_bytes += (got.folder / name).stat().st_size
        moves += [tmp, f"{wheels_dir}/{name}", got.wheels[name]]
    if moves:
        reply = _json_run(transport, [python, "-c", _MOVE, *moves], "install the wheels")
        if reply.get("bad"):
            raise DeviceError(f"{transport.label}: checksum mismatch after upload of "
                              f"{', '.join(reply['bad'])}: the transfer was corrupted, retry")
    return len(missing), sent_bytes, len(names) - len(missing)


def _ensure_venv(transport: Transport, python: str, venv: str, venv_python: str,
                 platform: DevicePlatform) -> bool:
    """Reuse WORK/venv when its python matches the device's; else (re)create it. True if
    created now."""
    if transport.exists(venv_python):
        done = transport.run([venv_python, "-c", _FACTS], timeout=120)
        with contextlib.suppress(ValueError, IndexError):
            facts = json.loads(done.stdout.strip().splitlines()[-1])
            if done.status == 0 and facts.get("python") == platform.python and \
                    facts.get("machine") == platform.machine:
                return False
    done = transport.run([python, "-m", "venv", "--clear", "--without-pip", venv], timeout=600)
    if done.status != 0:
        why = _tail(done)
        if "No module named venv" in why or "ensurepip" in why:
            raise DeviceError(f"{transport.label}: '{python} -m venv' failed ({why}): install "
                              "the venv module on the device, e.g. apt-get install python3-venv")
        raise DeviceError(f"{transport.label}: cannot create {venv}: {why}")
    return True


def _pip_install(transport: Transport, venv_python: str, pip_wheel: str, wheels_dir: str,
                 requirements: tuple[str, ...], no_deps: bool = False) -> None:
    """pip (from its uploaded wheel) installs into the venv from WORK/wheels only."""
    argv = [venv_python, "-c", _PIP, pip_wheel, "install", "--no-index", "--find-links",
            wheels_dir, "--only-binary=:all:", "--no-cache-dir", "--no-compile",
            *(["--no-deps"] if no_deps else []),
            "--disable-pip-version-check", "--no-input", "--quiet", *requirements]
    done = transport.run(argv, timeout=3600)
    if done.status != 0:
        errors = [ln.strip() for ln in (done.stderr + done.stdout).splitlines()
                  if ln.startswith("ERROR:")]
        why = errors[-1].removeprefix("ERROR: ") if errors else _tail(done)
        raise DeviceError(f"{transport.label}: pip install --no-index in the venv failed: "
                          f"{why}")


def _try_check(transport: Transport, venv_python: str, module: str, dist: str, *,
               raise_error: bool = False) -> dict[str, Any] | None:
    """Import numpy and the runtime in the venv; its versions, or None (or a DeviceError)."""
    done = transport.run([venv_python, "-c", _CHECK, module, dist], timeout=600)
    reply = _last_json(done)
    if reply is not None:
        return reply
    if raise_error:
        raise DeviceError(f"{transport.label}: {module} was installed but does not import "
                          f"on the device: {_tail(done)}")
    return None


# ---------------------------------------------------------------- small helpers


def _last_json(done: Any) -> dict[str, Any] | None:
    """The JSON object a successful device command printed last, else None."""
    try:
        reply = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return reply if done.status == 0 and isinstance(reply, dict) else None


def _json_run(transport: Transport, argv: list[str], what: str, *,
              timeout: float = 600.0) -> dict[str, Any]:
    done = transport.run(argv, timeout=timeout)
    reply = _last_json(done)
    if reply is not None:
        return reply
    hint = ""
    if done.status == 127 or "No such file" in done.stderr or "not found" in done.stderr:
        hint = " (is python3 installed there? set access.python or pass --device-python)"
    raise DeviceError(f"{transport.label}: cannot {what} (exit {done.status}): "
                      f"{_tail(done)}{hint}")


def _tail(done: Any) -> str:
    lines = [ln.strip() for ln in (done.stderr or done.stdout or "").splitlines() if ln.strip()]
    return (lines[-1] if lines else f"exit {done.status}")[:300]


def install_declared(transport: Transport, spec: Any, *, device_python: str, work_dir: str,
                     runtime: str, host_cache: Path | None = None) -> ProvisionReport:
    """``install_runtime`` with what a runtime declares (``spec``: its ``Runtime.provision``,
    with ``requirements``, ``module``, ``distribution`` and ``no_deps``)."""
    return install_runtime(transport, device_python=device_python, work_dir=work_dir,
                           runtime=runtime, requirements=spec.requirements, module=spec.module,
                           distribution=spec.distribution, host_cache=host_cache,
                           no_deps=spec.no_deps)


def runtime_to_provision(bundle: Any, specs: Iterable[str], runtimes: Iterable[str] = ()) -> str:
    """The runtime to provision for a bundle among ``specs`` (the runtimes provisioning can
    install): its chosen artifact's runtime when it can, else that of the first faithful
    candidate it can; ``runtimes`` (what the device has already) wins when a faithful candidate
    can use one of them."""
    have, specs = set(runtimes), list(specs)
    faithful = [c for c in bundle.candidates
                if c.status in ("chosen", "passed") and c.artifact is not None]
    chosen = bundle.chosen_result()
    ordered = ([chosen] if chosen is not None and chosen.artifact is not None else []) + \
        [c for c in faithful if c is not chosen]
    needs = [c.artifact.runtime for c in ordered]
    for runtime in [n for n in needs if n in have] + needs:
        if runtime in specs:
            return runtime
    raise UsageError(f"no faithful candidate of the bundle uses a runtime that can be "
                     f"provisioned ({', '.join(specs)}); candidates need "
                     f"{', '.join(sorted(set(needs))) or 'nothing'}")
