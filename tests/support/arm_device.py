"""An emulated aarch64 device for tests: Debian bookworm arm64 under qemu-user, reached over SSH.

The root filesystem is built once with debootstrap (``--foreign`` first stage on the host, the
second stage run inside it under qemu-aarch64 via binfmt_misc) and cached under
``$EDGE_TEST_ARM_ROOT`` (default /var/cache/edge-test-arm), guarded by a lock file and written
complete-marker last. It holds python3 and openssh-server with an unprivileged ``edgeuser``:
no numpy, no ML runtime, no pip, not even ensurepip (python3-venv).

Each session mounts a throwaway overlay on that rootfs (the cache is never written) and runs the
rootfs's own aarch64 ``sshd`` inside fresh mount, PID and network namespaces
(``unshare --mount --pid --net --fork --kill-child``). The network namespace has only a loopback
interface: the device has no route to anything, so it has no internet. The host reaches it
through a forwarder on 127.0.0.1:PORT whose device-side sockets are opened inside that network
namespace (setns in the connecting thread). Killing the ``unshare`` process ends every process
of the device (PID namespace) and drops every mount (mount namespace); nothing is left behind.

Needs root, ``debootstrap`` and ``qemu-user-static`` (installed with apt-get when missing) and a
Debian mirror for the first build (``$EDGE_TEST_ARM_MIRROR``). Emulation is 5-13x slower than
native: the device proves compatibility, never timing.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.sshd import (
    DEVICE_USER,
    SSHDaemon,
    SSHDError,
    flock,
    keygen,
    sshd_config_text,
    write_authorized_keys,
    write_known_hosts,
)

ARM_ROOT = Path(os.environ.get("EDGE_TEST_ARM_ROOT", "/var/cache/edge-test-arm"))
MIRROR = os.environ.get("EDGE_TEST_ARM_MIRROR", "http://deb.debian.org/debian")
SUITE = "bookworm"
# python3 only: provisioning needs the stdlib venv module (in libpython3.11-stdlib), not
# python3-venv's ensurepip, so the device is as bare as a stock image.
PACKAGES = ("python3", "openssh-server")
HOST_PACKAGES = ("debootstrap", "qemu-user-static")
DEVICE_PYTHON = "/usr/bin/python3"
BUILD_TIMEOUT = float(os.environ.get("EDGE_TEST_ARM_BUILD_TIMEOUT", "2400"))
LOCK_TIMEOUT = float(os.environ.get("EDGE_TEST_ARM_LOCK_TIMEOUT", "2700"))
READY_TIMEOUT = 60.0
DEBOOTSTRAP = "/usr/sbin/debootstrap"
QEMU = "/usr/bin/qemu-aarch64-static"
BINFMT_CONF = Path("/usr/lib/binfmt.d/qemu-aarch64.conf")
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
BINFMT_ENTRY = BINFMT_DIR / "qemu-aarch64"
# Bump when the recipe changes: a new rootfs directory is built next to the old one.
RECIPE = f"{SUITE} arm64 minbase {' '.join(PACKAGES)} user={DEVICE_USER} v2"
VERSION = hashlib.sha256(RECIPE.encode()).hexdigest()[:12]
ROOTFS = ARM_ROOT / f"rootfs-{SUITE}-arm64-{VERSION}"
MARKER = ARM_ROOT / f"rootfs-{SUITE}-arm64-{VERSION}.complete"
SESSIONS = ARM_ROOT / "sessions"
CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(None, use_errno=True)  # for setns(2)
# Fresh mount, PID and network namespaces that die with the ``unshare`` process.
_UNSHARE = ("unshare", "--mount", "--pid", "--net", "--fork", "--kill-child", "--")
DEVICE_SSHD = "/usr/sbin/sshd"  # the rootfs's own (aarch64)
DEVICE_SSHD_CONFIG = "/etc/ssh/edge/sshd_config"

# Runs as PID 1 of the device's namespaces: loopback up, overlay + /proc, then the command
# (the rootfs's own sshd: aarch64, under qemu), chrooted, replaces the shell.
# Arguments: SESSION ROOTFS COMMAND...
_START = r"""set -eu
session=$1 lower=$2 merged=$1/merged
shift 2
ip link set lo up
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$session/upper,workdir=$session/work" \
    "$merged"
mount -t proc proc "$merged/proc"
mount -t tmpfs -o mode=1777,size=64m tmpfs "$merged/dev/shm"
mount -t tmpfs -o mode=1777 tmpfs "$merged/tmp"
exec chroot "$merged" "$@"
"""


class ArmDeviceError(SSHDError):
    """The emulated aarch64 device (or something it needs) could not be set up."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ArmDevice:
    """Where and how to reach the emulated aarch64 device."""

    host: str
    port: int  # the host-side forwarder on 127.0.0.1
    user: str
    identity: Path
    known_hosts: Path
    python: str  # the device's own /usr/bin/python3 (Debian's, aarch64)
    upper: Path  # on the host: every file the device wrote this session (overlay upper dir)
    rootfs: Path  # the cached, read-only lower layer
    pid: int  # the ``unshare`` process holding the device's namespaces

    @property
    def target(self) -> str:
        """The device as "user@host:port"."""
        return f"{self.user}@{self.host}:{self.port}"

    def device_path(self, path: str) -> Path:
        """Where a file the device wrote this session is on the host (e.g. /home/edgeuser/x)."""
        return self.upper / path.lstrip("/")


# ---------------------------------------------------------------- helpers


def _run(cmd: list[str], *, timeout: float = 120.0, what: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    """Run a command; ArmDeviceError with the tail of its output if it fails."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ArmDeviceError(f"{what or cmd[0]} failed: {exc}") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise ArmDeviceError(f"{what or ' '.join(cmd)} failed ({proc.returncode}):\n{tail}")
    return proc


def _flock(path: Path, timeout: float = LOCK_TIMEOUT) -> contextlib.AbstractContextManager[None]:
    """An exclusive lock on ``path`` (released when we exit or die)."""
    return flock(path, timeout, poll=1.0, timeout_error=lambda holder: ArmDeviceError(
        f"waited {timeout:.0f}s for pid {holder} to release {path}"))


# ---------------------------------------------------------------- host tools and binfmt


def ensure_host_tools() -> None:
    """Be root and have debootstrap and qemu-user-static (apt-get install them if missing)."""
    if os.geteuid() != 0:
        raise ArmDeviceError("the aarch64 device needs root (mounts, namespaces, binfmt_misc)")
    for tool in ("unshare", "chroot", "ip", "mount", "ssh-keygen"):
        if shutil.which(tool) is None:
            raise ArmDeviceError(f"'{tool}' is missing on the host")
    if Path(DEBOOTSTRAP).exists() and Path(QEMU).exists() and BINFMT_CONF.exists():
        return
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *HOST_PACKAGES]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(install, capture_output=True, text=True, env=env, check=False,
                          timeout=900)
    if done.returncode != 0:  # stale package lists: update once, then retry
        update = subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True,
                                env=env, check=False, timeout=900)
        done = subprocess.run(install, capture_output=True, text=True, env=env, check=False,
                              timeout=900)
        if done.returncode != 0:
            tail = (update.stderr + done.stderr).strip().splitlines()[-3:]
            raise ArmDeviceError(f"cannot apt-get install {' '.join(HOST_PACKAGES)}: "
                                 f"{' | '.join(tail) or 'apt-get failed'}")
    if not (Path(DEBOOTSTRAP).exists() and Path(QEMU).exists() and BINFMT_CONF.exists()):
        raise ArmDeviceError(f"{DEBOOTSTRAP}, {QEMU} or {BINFMT_CONF} still missing after "
                             f"installing {' '.join(HOST_PACKAGES)}")


def ensure_binfmt() -> None:
    """Register qemu-aarch64 with binfmt_misc (fix-binary flag: works inside a chroot)."""
    if not (BINFMT_DIR / "register").exists():
        _run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT_DIR)],
             what="mounting binfmt_misc (a container needs --privileged)")
    if BINFMT_ENTRY.exists():
        entry = BINFMT_ENTRY.read_text()
        flags = next((ln.split(":", 1)[1] for ln in entry.splitlines()
                      if ln.startswith("flags:")), "")
        if entry.startswith("enabled") and "F" in flags:
            return
        BINFMT_ENTRY.write_text("-1")  # disabled or without F (needs its path in the chroot)
    line = BINFMT_CONF.read_text().strip()
    try:
        (BINFMT_DIR / "register").write_text(line)
    except OSError as exc:
        raise ArmDeviceError(f"cannot register {BINFMT_CONF} with binfmt_misc: {exc}") from None


# ---------------------------------------------------------------- the rootfs (built once)


def ensure_rootfs() -> Path:
    """The cached arm64 rootfs, built under a lock unless its complete-marker exists."""
    if MARKER.exists() and ROOTFS.is_dir():
        return ROOTFS
    with _flock(ARM_ROOT / ".build.lock"):
        if MARKER.exists() and ROOTFS.is_dir():
            return ROOTFS
        phases = build_rootfs(ROOTFS)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        MARKER.write_text(f"{RECIPE}\nbuilt {stamp}: " +
                          ", ".join(f"{k} {v:.0f}s" for k, v in phases.items()) + "\n")
    _remove_old_rootfs()
    return ROOTFS


def build_rootfs(final: Path) -> dict[str, float]:
    """debootstrap into ``final.partial``, run the second stage under qemu, add edgeuser,
    check the result, then rename it to ``final``; seconds per phase."""
    phases: dict[str, float] = {}
    started = time.monotonic()
    tmp = final.with_name(final.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(final, ignore_errors=True)
    tmp.mkdir(parents=True)
    _run([DEBOOTSTRAP, "--arch=arm64", "--foreign", "--variant=minbase",
          f"--include={','.join(PACKAGES)}", SUITE, str(tmp), MIRROR],
         timeout=BUILD_TIMEOUT, what=f"debootstrap (first stage, from {MIRROR})")
    phases["download"] = time.monotonic() - started
    policy = tmp / "usr/sbin/policy-rc.d"  # never start services while packages install
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    # A throwaway test rootfs: no fsync per file, no docs/man pages/translations.
    dpkg_cfg = tmp / "etc/dpkg/dpkg.cfg.d"
    dpkg_cfg.mkdir(parents=True, exist_ok=True)
    (dpkg_cfg / "edge-test").write_text(
        "force-unsafe-io\npath-exclude=/usr/share/doc/*\npath-exclude=/usr/share/man/*\n"
        "path-exclude=/usr/share/locale/*\npath-exclude=/usr/share/info/*\n")
    # The second stage runs aarch64 binaries under qemu. Its own namespaces: no network (no
    # daemon it might start can bind a host port), its mounts and processes die with it.
    second = time.monotonic()
    _isolated(tmp, ["/debootstrap/debootstrap", "--second-stage"], timeout=BUILD_TIMEOUT,
              what="debootstrap --second-stage (under qemu-aarch64)")
    phases["second-stage"] = time.monotonic() - second
    _isolated(tmp, ["/usr/sbin/useradd", "--create-home", "--shell", "/bin/sh", DEVICE_USER],
              what="useradd in the rootfs")
    _isolated(tmp, ["/usr/sbin/usermod", "-p", "*", DEVICE_USER], what="usermod in the rootfs")
    for key in (tmp / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # each session gets throwaway host keys
    shutil.rmtree(tmp / "var/cache/apt/archives", ignore_errors=True)
    (tmp / "var/cache/apt/archives/partial").mkdir(parents=True)
    (tmp / "run/sshd").mkdir(parents=True, exist_ok=True)
    (tmp / "etc/ssh/edge").mkdir(parents=True, exist_ok=True)
    check = _isolated(tmp, [DEVICE_PYTHON, "-c", _ROOTFS_CHECK], what="checking the rootfs")
    if check.stdout.split() != ["aarch64", "[]"]:
        raise ArmDeviceError(f"unexpected rootfs: {check.stdout.strip()!r} "
                             "(want aarch64 and no runtime)")
    tmp.rename(final)
    phases["total"] = time.monotonic() - started
    return phases


def _remove_old_rootfs() -> None:
    """Rootfs dirs of older recipes, once no live session can be using one as its lower dir."""
    with _flock(ARM_ROOT / ".sessions.lock", timeout=60):
        _remove_stale_sessions()
        if SESSIONS.is_dir() and any(SESSIONS.iterdir()):
            return
        for entry in ARM_ROOT.glob(f"rootfs-{SUITE}-arm64-*"):
            if not entry.name.startswith(ROOTFS.name):
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)


_ROOTFS_CHECK = (
    "import importlib.util as u, json, platform; print(platform.machine()); "
    "print(json.dumps([m for m in ('numpy', 'onnxruntime', 'ai_edge_litert', 'pip', "
    "'ensurepip') "
    "if u.find_spec(m)]).replace(' ', ''))"
)


def _isolated(root: Path, argv: list[str], *, timeout: float = 300.0,
              what: str) -> subprocess.CompletedProcess[str]:
    """Run argv chrooted into ``root`` in new mount, PID and network namespaces."""
    return _run([*_UNSHARE, "chroot", str(root), *argv], timeout=timeout, what=what)


# ---------------------------------------------------------------- a session


def _remove_stale_sessions() -> None:
    """Session dirs of test processes that are gone (their namespaces died with them)."""
    if not SESSIONS.is_dir():
        return
    for entry in SESSIONS.iterdir():
        pid = entry.name.split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(entry, ignore_errors=True)


def _prepare_session(session: Path) -> tuple[Path, str]:
    """Overlay dirs, throwaway keys and sshd_config (in the upper dir); the host key line."""
    for sub in ("upper", "work", "merged", "keys"):
        (session / sub).mkdir(parents=True)
    keys = session / "keys"
    host_key = keygen(keys / "host_ed25519")
    client_key = keygen(keys / "id_ed25519")
    conf = session / "upper/etc/ssh/edge"
    conf.mkdir(parents=True)
    shutil.copyfile(keys / "host_ed25519", conf / "host_ed25519")
    (conf / "host_ed25519").chmod(0o600)
    write_authorized_keys(conf / "authorized_keys", client_key)
    (conf / "sshd_config").write_text(sshd_config_text(
        address="127.0.0.1", port=22, host_key="/etc/ssh/edge/host_ed25519", pid_file="none",
        authorized_keys="/etc/ssh/edge/authorized_keys",
        extra=("UseDNS no", "LoginGraceTime 120")))
    return keys, host_key


def _start_device(session: Path, rootfs: Path) -> SSHDaemon:
    """The rootfs's sshd in the device's namespaces, listening on 127.0.0.1:22 in there."""
    daemon = SSHDaemon(
        DEVICE_SSHD_CONFIG, sshd=DEVICE_SSHD, death_signal=signal.SIGKILL, log_lines=300,
        prefix=[*_UNSHARE, "/bin/sh", "-c", _START, "edge-arm-device", str(session), str(rootfs)])
    if not daemon.listening("127.0.0.1", 22, READY_TIMEOUT):
        _stop_device(daemon)
        raise ArmDeviceError("the aarch64 sshd did not start:\n" + "\n".join(daemon.log))
    return daemon


def _stop_device(daemon: SSHDaemon) -> None:
    """SIGKILL unshare: --kill-child kills PID 1 of the device, and with it every process
    in its PID namespace; then wait until no process is left in its network namespace."""
    try:
        netns = os.readlink(f"/proc/{daemon.proc.pid}/ns/net")  # e.g. net:[4026532841]
    except OSError:
        netns = None
    daemon.kill(timeout=10)
    deadline = time.monotonic() + 10
    while netns and time.monotonic() < deadline and _pids_in(netns):
        time.sleep(0.05)


def _pids_in(netns: str) -> set[int]:
    """PIDs of processes in the network namespace ``netns`` (net:[inode])."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns/net") == netns:
                    found.add(int(entry.name))
    return found


class _Forwarder:
    """127.0.0.1:PORT on the host -> 127.0.0.1:22 inside the device's network namespace."""

    def __init__(self, netns_path: str) -> None:
        self._ns = os.open(netns_path, os.O_RDONLY)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        # setns changes this thread's network namespace only; the socket keeps it for life.
        if _LIBC.setns(self._ns, CLONE_NEWNET) != 0:
            client.close()
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", 22), timeout=30)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            if self._closed:
                client.close()
                upstream.close()
                return
            self._open |= {client, upstream}
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        """Stop listening and cut every forwarded connection."""
        with self._lock:
            self._closed = True
            sockets, self._open = self._open, set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        with contextlib.suppress(OSError):
            os.close(self._ns)


def prepare() -> Path:
    """Host tools, binfmt and the cached rootfs; return the rootfs (slow only the first time)."""
    ensure_host_tools()
    ensure_binfmt()
    return ensure_rootfs()


@contextlib.contextmanager
def running_arm_device() -> Iterator[ArmDevice]:
    """Build (once) and boot the aarch64 device; everything it ran and wrote is gone on exit."""
    rootfs = prepare()
    with _flock(ARM_ROOT / ".sessions.lock", timeout=60):
        _remove_stale_sessions()
        session = SESSIONS / f"{os.getpid()}-{secrets.token_hex(4)}"
        session.mkdir(parents=True)
    device: SSHDaemon | None = None
    forwarder: _Forwarder | None = None
    try:
        keys, host_key = _prepare_session(session)
        device = _start_device(session, rootfs)
        forwarder = _Forwarder(f"/proc/{device.proc.pid}/ns/net")
        known = write_known_hosts(keys / "known_hosts", forwarder.port, host_key)
        yield ArmDevice(host="127.0.0.1", port=forwarder.port, user=DEVICE_USER,
                        identity=keys / "id_ed25519", known_hosts=known, python=DEVICE_PYTHON,
                        upper=session / "upper", rootfs=rootfs, pid=device.proc.pid)
    finally:
        if forwarder is not None:
            forwarder.close()
        if device is not None:
            _stop_device(device)
        if not os.environ.get("EDGE_TEST_ARM_KEEP"):
            shutil.rmtree(session, ignore_errors=True)


if __name__ == "__main__":  # build the rootfs ahead of time: python -m tests.support.arm_device
    started = time.monotonic()
    print(prepare(), f"ready in {time.monotonic() - started:.0f}s")
