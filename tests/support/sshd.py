"""A real OpenSSH sshd on 127.0.0.1 that stands in for a device (a Raspberry Pi, say) in tests.

It runs as root (as CI does): it creates the dedicated account ``edgeuser``, gives it a fresh
home under /tmp for each session, writes throwaway keys and an sshd_config into a temp dir and
starts ``/usr/sbin/sshd -D -e`` on a free port. The device's Python is a venv built from Debian's
/usr/bin/python3 with the ML runtimes installed, kept in /opt across sessions because /root (and
so the host venv's interpreter) is not readable by ``edgeuser``.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import os
import pwd
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

SSHD_BIN = Path("/usr/sbin/sshd")
SSH_KEYGEN = "ssh-keygen"
DEVICE_USER = "edgeuser"
SYSTEM_PYTHON = Path("/usr/bin/python3")
DEVICE_VENV = Path(os.environ.get("EDGE_TEST_DEVICE_VENV", "/opt/edge-test-device-venv"))
DEVICE_PACKAGES = ("numpy==2.4.*", "onnxruntime==1.31.1", "ai-edge-litert==2.3.0")
DEVICE_IMPORTS = "import numpy, onnxruntime, ai_edge_litert"
READY_TIMEOUT = 15.0
SESSION_PREFIX = "edge-device-"
LOCK_FILE = Path(tempfile.gettempdir()) / "edge-test-device.lock"
LOCK_TIMEOUT = float(os.environ.get("EDGE_TEST_DEVICE_LOCK_TIMEOUT", "1200"))
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
INSTALL_HINT = "apt-get update && apt-get install -y --no-install-recommends openssh-server"


class SSHDError(RuntimeError):
    """The test sshd (or something it needs) could not be set up."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SSHDevice:
    """Where and how to reach the test device."""

    host: str
    port: int
    user: str
    identity: Path  # client private key that is authorized
    known_hosts: Path  # "[127.0.0.1]:PORT ssh-ed25519 ..." for the real host key
    wrong_identity: Path  # client private key that is NOT authorized
    changed_known_hosts: Path  # same [127.0.0.1]:PORT with a different host key
    python: str  # the device's python (venv with numpy, onnxruntime, ai_edge_litert)
    home: Path  # edgeuser's home for this session

    @property
    def target(self) -> str:
        """The device as "user@host:port"."""
        return f"{self.user}@{self.host}:{self.port}"


# ---------------------------------------------------------------- preconditions


def require_root_and_sshd() -> None:
    """Fail with a clear message unless we are root and OpenSSH's sshd is installed."""
    if os.geteuid() != 0:
        raise SSHDError("the sshd test harness must run as root (it creates a user)")
    if not SSHD_BIN.exists() or shutil.which(SSH_KEYGEN) is None:
        raise SSHDError(
            f"{SSHD_BIN} or ssh-keygen is missing: install openssh-server ({INSTALL_HINT})")
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege separation dir


def _run(cmd: list[str], *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run a command, raising SSHDError with its output if it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SSHDError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc


# ---------------------------------------------------------------- processes


def _processes() -> list[tuple[int, int, int]]:
    """(pid, ppid, uid) of every live process, read from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            uid = entry.stat().st_uid
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.append((int(entry.name), ppid, uid))
    return out


def _descendants(root: int) -> set[int]:
    """PIDs of every process below ``root`` in the process tree."""
    procs = _processes()
    found: set[int] = set()
    frontier = {root}
    while frontier := {pid for pid, ppid, _ in procs if ppid in frontier} - found:
        found |= frontier
    return found


def _user_pids(uid: int) -> set[int]:
    """PIDs of processes owned by ``uid``."""
    return {pid for pid, _, owner in _processes() if owner == uid}


def _state(pid: int) -> str:
    """The process state letter of ``pid`` ("Z" for a zombie), or "" if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    return _state(pid) not in ("", "Z")


def _kill_pids(pids: set[int], timeout: float = 5.0) -> None:
    """SIGKILL each PID and wait until none is running any more (zombies count as gone)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.02)


def _wait_orphans_reaped(timeout: float = 3.0) -> None:
    """Wait for init to reap zombie sshd processes (sshd kills its [net] child unreaped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(
        ppid == 1 and _state(pid) == "Z" and _comm(pid) == "sshd" for pid, ppid, _ in _processes()
    ):
        time.sleep(0.05)


def _comm(pid: int) -> str:
    """The command name of ``pid``, or "" if it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded up front: preexec_fn must not dlopen


def _prctl(option: int, value: int) -> None:
    """Call Linux prctl(2) with one argument."""
    _LIBC.prctl(option, value, 0, 0, 0)


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """Make this process a child subreaper meanwhile: orphans of killed sessions come to us (for
    :func:`reap`), not to init."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield
    finally:
        _prctl(PR_SET_CHILD_SUBREAPER, 0)


def reap(pids: set[int], timeout: float = 2.0) -> None:
    """Wait for ``pids`` to leave /proc, reaping sshd zombies orphaned to us (a subreaper)."""
    me, deadline = os.getpid(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        orphans = {p for p, ppid, _ in _processes() if ppid == me and _comm(p) == "sshd"}
        for pid in orphans | pids:
            with contextlib.suppress(ChildProcessError):  # not ours: its own parent reaps it
                os.waitpid(pid, os.WNOHANG)
        if not orphans and not any(Path(f"/proc/{p}").exists() for p in pids):
            return
        time.sleep(0.02)


# ---------------------------------------------------------------- user and files


def ensure_user() -> int:
    """Create ``edgeuser`` (shell /bin/sh, usable with UsePAM no) if needed; return its uid."""
    try:
        pwd.getpwnam(DEVICE_USER)
    except KeyError:
        _run(["useradd", "--no-create-home", "--shell", "/bin/sh", DEVICE_USER])
    _run(["usermod", "-p", "*", DEVICE_USER])  # "!" (locked) is refused with UsePAM no
    return pwd.getpwnam(DEVICE_USER).pw_uid


def make_session_dir() -> Path:
    """A fresh 0755 dir under /tmp for this session's ``home`` and ``sshd`` dirs."""
    session = Path(tempfile.mkdtemp(prefix=SESSION_PREFIX))
    session.chmod(0o755)  # edgeuser must traverse it to its home and to authorized_keys
    (session / "sshd").mkdir(mode=0o755)
    return session


def make_home(session: Path) -> Path:
    """Create ``session/home`` owned by edgeuser and make it edgeuser's home."""
    user = pwd.getpwnam(DEVICE_USER)
    _kill_pids(_user_pids(user.pw_uid))  # usermod -d refuses while the user has processes
    home = session / "home"
    home.mkdir(mode=0o755)
    os.chown(home, user.pw_uid, user.pw_gid)
    _run(["usermod", "-d", str(home), DEVICE_USER])
    return home


def empty_home(device: SSHDevice) -> None:
    """Kill edgeuser's processes and empty its home: a device with no release, no state."""
    _kill_pids(_user_pids(pwd.getpwnam(device.user).pw_uid))
    for entry in device.home.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def keygen(path: Path) -> str:
    """Write a passphrase-less ed25519 key pair; return "ssh-ed25519 AAAA..." of its public half."""
    _run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)])
    kind, blob = path.with_suffix(".pub").read_text().split()[:2]
    return f"{kind} {blob}"


def free_port() -> int:
    """A currently unused TCP port on 127.0.0.1 picked by the kernel."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_known_hosts(path: Path, port: int, host_key: str) -> Path:
    """Write a known_hosts file with one line for [127.0.0.1]:port."""
    path.write_text(f"[127.0.0.1]:{port} {host_key}\n")
    path.chmod(0o644)
    return path


def write_authorized_keys(path: Path, public_key: str, comment: str = "edge-test-client") -> Path:
    """Authorize one client key ("ssh-ed25519 AAAA..."): 0644, as sshd reads it as edgeuser."""
    path.write_text(f"{public_key} {comment}\n")
    path.chmod(0o644)
    return path


def sshd_config_text(*, address: str, port: int, host_key: Path | str, pid_file: Path | str,
                     authorized_keys: Path | str, extra: Sequence[str] = ()) -> str:
    """An sshd_config for a key-only sshd serving only edgeuser (``extra``: more directives)."""
    return "".join(f"{line}\n" for line in (
        f"ListenAddress {address}", f"Port {port}", f"HostKey {host_key}", f"PidFile {pid_file}",
        f"AuthorizedKeysFile {authorized_keys}",
        "PubkeyAuthentication yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "UsePAM no", "PermitRootLogin no",
        f"AllowUsers {DEVICE_USER}", "StrictModes no", "PrintMotd no", "X11Forwarding no",
        *extra, "Subsystem sftp internal-sftp",
    ))


def write_sshd_config(workdir: Path, port: int) -> Path:
    """Write sshd_config for a loopback-only, key-only sshd serving edgeuser."""
    config = workdir / "sshd_config"
    config.write_text(sshd_config_text(
        address="127.0.0.1", port=port, host_key=workdir / "host_ed25519",
        pid_file=workdir / "sshd.pid", authorized_keys=workdir / "authorized_keys"))
    return config


def remove_stale_sessions() -> None:
    """Delete session dirs left by killed test sessions (call with the device lock held)."""
    for session in Path(tempfile.gettempdir()).glob(f"{SESSION_PREFIX}*"):
        shutil.rmtree(session, ignore_errors=True)


def _lock_holder(path: Path) -> str:
    """The PID written into the lock file ``path`` by the process holding it, or "?"."""
    with contextlib.suppress(OSError):
        return path.read_text().strip() or "?"
    return "?"


@contextlib.contextmanager
def flock(path: Path, timeout: float, *, poll: float = 0.5, reentrant: bool = False,
          timeout_error: Callable[[str], Exception] | None = None) -> Iterator[None]:
    """Hold an exclusive flock(2) on ``path`` (created, with its parents, if missing), our PID
    written into it; released on exit, as on our death.

    Retries every ``poll`` seconds; after ``timeout`` raises ``timeout_error(holder)`` (holder: the
    PID in the file, or "?"), by default an SSHDError naming it. ``reentrant``: if the PID in the
    file is ours (this process holds the lock through another open file), go on without it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if reentrant and _lock_holder(path) == str(os.getpid()):
                    break  # already ours: do not write into the file, do not release it
                if time.monotonic() > deadline:
                    holder = _lock_holder(path)
                    raise (timeout_error(holder) if timeout_error is not None else SSHDError(
                        f"waited {timeout:.0f}s for pid {holder} to release {path}")) from None
                time.sleep(poll)
            else:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                break
        yield
    finally:
        os.close(fd)  # releases the lock (if we took it), as does our death


def device_lock(timeout: float = LOCK_TIMEOUT, *, reentrant: bool = False
                ) -> contextlib.AbstractContextManager[None]:
    """Hold an exclusive lock: one test session at a time owns edgeuser, its home and the venv.
    ``reentrant``: go on if this very process already holds it (the ``ssh_device`` fixture)."""
    return flock(LOCK_FILE, timeout, reentrant=reentrant, timeout_error=lambda holder: SSHDError(
        f"waited {timeout:.0f}s for another test session (pid {holder}) "
        f"to release {LOCK_FILE}: one session at a time owns {DEVICE_USER}"))


# ---------------------------------------------------------------- device python


def _device_python_ok(venv: Path) -> bool:
    """Whether the venv's python exists and imports the device runtimes."""
    python = venv / "bin" / "python"
    if not python.exists():
        return False
    check = subprocess.run([str(python), "-c", DEVICE_IMPORTS], capture_output=True, timeout=300)
    return check.returncode == 0


def ensure_device_venv(venv: Path = DEVICE_VENV) -> str:
    """Reuse or (re)build the world-readable device venv; return its python."""
    if not _device_python_ok(venv):
        if not SYSTEM_PYTHON.exists():
            raise SSHDError(f"{SYSTEM_PYTHON} is missing: apt-get install -y python3 python3-venv")
        shutil.rmtree(venv, ignore_errors=True)
        _run([str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(venv)])
        pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
        _run([*pip, "install", "--quiet", *DEVICE_PACKAGES], timeout=1800)
        _run(["chmod", "-R", "a+rX", str(venv)])
        if not _device_python_ok(venv):
            raise SSHDError(f"{venv}/bin/python still cannot {DEVICE_IMPORTS!r}")
    return str(venv / "bin" / "python")


# ---------------------------------------------------------------- the daemon


class SSHDaemon:
    """A running ``sshd -D -e`` whose stderr is drained by a thread so it never blocks.

    ``prefix`` is an argv that ends by exec'ing the rest (``ip netns exec NS``, a script that
    joins cgroups or mounts and chroots, ...); ``sshd`` is the daemon's path as seen there. The
    launched process gets ``death_signal`` when we die, so a killed session leaves no sshd behind.
    """

    def __init__(self, config: Path | str, *, prefix: Sequence[str] = (),
                 sshd: Path | str = SSHD_BIN, death_signal: int = signal.SIGTERM,
                 log_lines: int = 500) -> None:
        """Start sshd with ``config``; call wait_ready() or listening() next."""
        self.log: deque[str] = deque(maxlen=log_lines)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.proc = subprocess.Popen(
            [*prefix, str(sshd), "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, preexec_fn=functools.partial(_prctl, PR_SET_PDEATHSIG, death_signal),
        )
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        """Copy sshd's stderr into the log (and the queue) until it closes."""
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip())
            self._lines.put(line)
        self._lines.put(None)

    def listening(self, address: str, port: int, timeout: float) -> bool:
        """Block until sshd says it listens on ``address`` ``port``: False if it exits or
        ``timeout`` seconds pass first (``log`` then holds its stderr)."""
        want = f"Server listening on {address} port {port}"
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            if want in line:
                return True
        return False

    def wait_ready(self, port: int, timeout: float = READY_TIMEOUT) -> None:
        """Block until sshd says it listens on 127.0.0.1 ``port``; stop it and raise with its
        stderr otherwise."""
        if not self.listening("127.0.0.1", port, timeout):
            self.stop()
            raise SSHDError(
                f"sshd did not start listening on port {port}:\n" + "\n".join(self.log))

    def kill(self, timeout: float = 5.0) -> None:
        """SIGKILL the launched process (sshd or its prefix) and wait up to ``timeout`` for it."""
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)

    def stop(self, uid: int | None = None) -> None:
        """Kill sshd, its session children and ``uid``'s processes by PID, leaving no zombies."""
        with subreaper():
            pids = _descendants(self.proc.pid) | (_user_pids(uid) if uid is not None else set())
            _kill_pids(pids)
            self._stop_main()
            reap(pids)
            _wait_orphans_reaped()

    def _stop_main(self) -> None:
        """Terminate the listening sshd, then kill it if it lingers."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_sshd(workdir: Path, attempts: int = 3) -> tuple[SSHDaemon, int]:
    """Start sshd on a free port, retrying if another process grabbed the port first."""
    error: SSHDError | None = None
    for _ in range(attempts):
        port = free_port()
        daemon = SSHDaemon(write_sshd_config(workdir, port))
        try:
            daemon.wait_ready(port)
            return daemon, port
        except SSHDError as exc:
            error = exc
    assert error is not None
    raise error


# ---------------------------------------------------------------- the whole device


def _write_keys(workdir: Path) -> dict[str, str]:
    """Generate host, client, wrong-client and other-host keys; authorize the client key."""
    keys = {name: keygen(workdir / name) for name in
            ("host_ed25519", "id_ed25519", "wrong_id_ed25519", "other_host_ed25519")}
    write_authorized_keys(workdir / "authorized_keys", keys["id_ed25519"])
    return keys


@contextlib.contextmanager
def running_device(venv: Path = DEVICE_VENV) -> Iterator[SSHDevice]:
    """Set up edgeuser, keys, the device venv and sshd; tear everything down on exit."""
    require_root_and_sshd()
    # reentrant: the run's shared fleet (tests/support/fleet_devices.py) may hold it already
    with device_lock(reentrant=True):
        python = ensure_device_venv(venv)
        uid = ensure_user()
        remove_stale_sessions()
        with _sshd_session(uid, python) as device:
            yield device


@contextlib.contextmanager
def _sshd_session(uid: int, python: str) -> Iterator[SSHDevice]:
    """A fresh home, keys and a running sshd for edgeuser (``uid``); removed on exit."""
    session = make_session_dir()
    workdir = session / "sshd"
    daemon: SSHDaemon | None = None
    try:
        home = make_home(session)
        keys = _write_keys(workdir)
        daemon, port = start_sshd(workdir)
        yield SSHDevice(
            host="127.0.0.1", port=port, user=DEVICE_USER, identity=workdir / "id_ed25519",
            known_hosts=write_known_hosts(workdir / "known_hosts", port, keys["host_ed25519"]),
            wrong_identity=workdir / "wrong_id_ed25519",
            changed_known_hosts=write_known_hosts(
                workdir / "changed_known_hosts", port, keys["other_host_ed25519"]),
            python=python, home=home,
        )
    finally:
        if daemon is not None:
            daemon.stop(uid)
        _kill_pids(_user_pids(uid))
        shutil.rmtree(session, ignore_errors=True)
