"""A fleet of emulated devices for tests and benchmarks: N network namespaces, each reachable
from this (root) namespace over its own veth pair, each running its own OpenSSH sshd with its
own host key, its own home directory and its own CPU and memory caps (cgroup v1 or v2).

Per device ``i`` (``P`` = the owning pid, ``X`` = a free 10.232.X.0/24)::

    root ns  ef<P>h<i> 10.232.X.(4i+1)/30  <--veth-->  ef<P>d<i> 10.232.X.(4i+2)/30  netns
                                                        edge-fleet-<P>-<i>: sshd on port 22

All devices serve the one test account ``edgeuser`` (tests/support/sshd.py creates it, with the
device Python venv in /opt). Namespaces share the filesystem, so each sshd runs in a private
mount namespace (``ip netns exec`` makes one) with a copy of /etc/passwd bind-mounted over the
real one, naming that device's own home: ``<session>/dev<i>/home``, seen by the same path from
the root namespace. The sshd and everything it starts live in cgroup(s)
``edge-fleet-<P>-<i>`` (cpu: CFS quota of ``cpus`` CPUs; memory: ``memory_mb``; CPU accounting),
created below this process's own cgroups by tests/support/cgroups.py (v1: one group per
controller; v2: one group, after delegating cpu and memory from this process's cgroup).

Only addresses of namespaces created here ever carry traffic. Teardown kills everything in each
device's cgroups, then removes the veths, namespaces, cgroups and files, step by step even when
one step fails; leftovers of a SIGKILLed owner are removed by the next :func:`running_fleet`
(:func:`remove_stale`). Needs Linux, root, iproute2, OpenSSH's sshd and writable cgroup cpu and
memory controllers (v1 or v2): :func:`unavailable` says why not.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import cgroups
from tests.support.sshd import (
    DEVICE_USER,
    DEVICE_VENV,
    SSH_KEYGEN,
    SSHD_BIN,
    SSHDaemon,
    SSHDError,
    device_lock,
    ensure_device_venv,
    ensure_user,
    keygen,
    reap,
    require_root_and_sshd,
    sshd_config_text,
    subreaper,
    write_authorized_keys,
)

PREFIX = "edge-fleet-"
CFS_PERIOD_US = 10_000  # short, so a fractional cap throttles finely, not in 100 ms bursts
READY_TIMEOUT = 15.0
MAX_DEVICES = 64  # /30 per device in one /24

# Inside the device's mount namespace: its own /etc/passwd (naming its home), then exec.
_OWN_PASSWD_SH = 'mount --bind "$1" /etc/passwd || exit 125; shift; exec "$@"'


class FleetUnavailable(SSHDError):
    """Emulated devices cannot run here (the message says why)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EmulatedDevice:
    """One emulated device."""

    name: str  # dev0, dev1, ...
    netns: str
    address: str  # its IPv4 address, reachable from the root namespace
    port: int
    home: Path  # edgeuser's home on this device (same path inside and outside)
    host_key: str  # "ssh-ed25519 AAAA..."
    sshd_pid: int
    cgroup: cgroups.Group  # its CPU and memory caps: cpu_limit(), memory_limit(), members()

    def cpu_seconds(self) -> float | None:
        """CPU time used so far by everything running on the device (cgroup accounting)."""
        return self.cgroup.cpu_seconds()

    @property
    def cpu_cgroup(self) -> Path:
        """The directory of its CPU cap (v1 and v2 files differ: prefer ``cgroup.cpu_limit()``)."""
        return self.cgroup.cpu

    @property
    def memory_cgroup(self) -> Path | None:
        """The directory of its memory cap (prefer ``cgroup.memory_limit()``)."""
        return self.cgroup.memory

    @property
    def target(self) -> str:
        """user@address:port."""
        return f"{DEVICE_USER}@{self.address}:{self.port}"


@dataclass(frozen=True, kw_only=True, slots=True)
class EmulatedFleet:
    """A running fleet and the files a client needs to reach it."""

    devices: tuple[EmulatedDevice, ...]
    user: str
    identity: Path  # authorized on every device
    wrong_identity: Path  # authorized nowhere
    known_hosts: Path  # every device's real host key
    python: str  # the devices' python (venv with numpy, onnxruntime, ai_edge_litert)
    root: Path  # the session directory
    cpus: float
    memory_mb: int

    def write_inventory(self, path: Path, *, profile: str | None = None,
                        devices: tuple[EmulatedDevice, ...] | None = None,
                        host_vars: dict[str, dict[str, Any]] | None = None,
                        group: str = "fleet") -> Path:
        """An Ansible YAML inventory of (some of) the devices, connection vars in ``all``."""
        import yaml

        common: dict[str, Any] = {"ansible_user": self.user,
                                  "ansible_ssh_private_key_file": str(self.identity),
                                  "ansible_python_interpreter": self.python}
        if profile is not None:
            common["edge_profile"] = profile
        hosts = {d.name: {"ansible_host": d.address, "ansible_port": d.port,
                          **(host_vars or {}).get(d.name, {})}
                 for d in (devices or self.devices)}
        doc = {"all": {"vars": common, "children": {group: {"hosts": hosts}}}}
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def own_homes(self) -> None:
        """Every device's sshd sees its own /etc/passwd again. The one-device sshd's
        ``usermod -d`` (tests.support.sshd.make_home) replaces /etc/passwd by a rename, and a
        rename over a mount point detaches that mount in every other mount namespace: the
        devices would all share that device's home (and its deploy lock) from then on."""
        for device in self.devices:
            if _home_seen(device.sshd_pid) != str(device.home):
                _check(["nsenter", f"--mount=/proc/{device.sshd_pid}/ns/mnt", "mount",
                        "--bind", str(device.home.parent / "passwd"), "/etc/passwd"])
            if _home_seen(device.sshd_pid) != str(device.home):
                raise FleetUnavailable(f"{device.name}: its sshd does not see its own home")

    def wipe(self) -> None:
        """Empty every device's home (for a fresh, first-time deploy)."""
        for device in self.devices:
            for entry in device.home.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()


# ---------------------------------------------------------------- preconditions


def unavailable() -> str | None:
    """None when emulated devices can run here, else a one-line reason."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return "emulated devices need root (network namespaces, cgroups, a test user)"
    for tool in ("ip", "sh", "mount", "nsenter", SSH_KEYGEN):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH (install iproute2, util-linux, openssh-client)"
    if not SSHD_BIN.exists():
        return f"{SSHD_BIN} is missing: install openssh-server"
    return cgroups.unavailable(cgroups.hierarchy(), ["cpu", "memory"])


# ---------------------------------------------------------------- small helpers


def _check(argv: list[str], timeout: float = 30.0) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise SSHDError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _quiet(argv: list[str]) -> None:
    subprocess.run(argv, capture_output=True, timeout=30, check=False)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.232.X.0/24 that no address or route of the root namespace overlaps."""
    used = []
    for line in _check(["ip", "-4", "-o", "addr", "show"]).splitlines():
        with contextlib.suppress(ValueError, IndexError):
            used.append(ipaddress.ip_interface(line.split()[3]).network)
    for line in _check(["ip", "-4", "route", "show", "table", "all"]).splitlines():
        head = line.split()[0] if line.split() else ""
        if head in ("default", "local", "broadcast", "unreachable", "blackhole", "prohibit"):
            continue
        with contextlib.suppress(ValueError):
            used.append(ipaddress.ip_network(head, strict=False))
    for third in range(256):
        net = ipaddress.ip_network(f"10.232.{third}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise FleetUnavailable("no free 10.232.X.0/24 subnet for the emulated devices")


# ---------------------------------------------------------------- stale leftovers


_NS = re.compile(rf"^{PREFIX}(\d+)-(\d+)$")
_VETH = re.compile(r"^ef(\d+)h(\d+)$")


def remove_stale() -> list[str]:
    """Remove namespaces, veths, cgroups and session dirs of fleets whose owner pid is gone."""
    removed = []
    names = _check(["ip", "netns", "list"]).split("\n")
    for ns in (line.split()[0] for line in names if line.strip()):
        match = _NS.match(ns)
        if match and not _pid_alive(int(match.group(1))):
            pids = _check(["ip", "netns", "pids", ns]).split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            _quiet(["ip", "netns", "del", ns])
            removed.append(ns)
    for line in _check(["ip", "-o", "link", "show"]).splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        match = _VETH.match(name)
        if match and not _pid_alive(int(match.group(1))):
            _quiet(["ip", "link", "del", name])
            removed.append(name)
    for group in cgroups.named(cgroups.hierarchy(), PREFIX):
        match = _NS.match(group.name)
        if match and not _pid_alive(int(match.group(1))):
            with contextlib.suppress(OSError):
                cgroups.remove_dir(group)
                removed.append(str(group))
    for session in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        owner = session.name.removeprefix(PREFIX).split("-", 1)[0]
        if owner.isdigit() and not _pid_alive(int(owner)):
            shutil.rmtree(session, ignore_errors=True)
            removed.append(str(session))
    return removed


# ---------------------------------------------------------------- one device's sshd


def _passwd_with_home(path: Path, home: Path) -> Path:
    """A copy of /etc/passwd in which edgeuser's home is ``home``."""
    lines = []
    for line in Path("/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) == 7 and fields[0] == DEVICE_USER:
            fields[5] = str(home)
        lines.append(":".join(fields))
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)
    return path


def _home_seen(pid: int) -> str | None:
    """edgeuser's home in the /etc/passwd that process ``pid`` (a device's sshd) sees."""
    for line in Path(f"/proc/{pid}/root/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) == 7 and fields[0] == DEVICE_USER:
            return fields[5]
    return None


# ---------------------------------------------------------------- the fleet


class _Builder:
    """Creates the fleet step by step, remembering every resource so teardown is exact."""

    def __init__(self, root: Path, uid: int, gid: int, cpus: float, memory_mb: int) -> None:
        self.root, self.uid, self.gid = root, uid, gid
        self.cpus, self.memory_mb = cpus, memory_mb
        self.owner = os.getpid()
        self.netns: list[str] = []
        self.veths: list[str] = []
        self.cgroups: list[cgroups.Group] = []
        self.daemons: list[SSHDaemon] = []

    def cgroup(self, name: str) -> cgroups.Group:
        group = cgroups.create(cgroups.hierarchy(), name, cpus=self.cpus, period_us=CFS_PERIOD_US,
                               memory_bytes=self.memory_mb * 2**20, accounting=True)
        self.cgroups.append(group)
        return group

    def network(self, index: int, host_ip: str, device_ip: str) -> str:
        ns = f"{PREFIX}{self.owner}-{index}"
        outside, inside = f"ef{self.owner}h{index}", f"ef{self.owner}d{index}"
        _check(["ip", "netns", "add", ns])
        self.netns.append(ns)
        _check(["ip", "link", "add", outside, "type", "veth", "peer", "name", inside])
        self.veths.append(outside)
        _check(["ip", "link", "set", inside, "netns", ns])
        _check(["ip", "addr", "add", f"{host_ip}/30", "dev", outside])
        _check(["ip", "link", "set", outside, "up"])
        _check(["ip", "-n", ns, "addr", "add", f"{device_ip}/30", "dev", inside])
        _check(["ip", "-n", ns, "link", "set", inside, "up"])
        _check(["ip", "-n", ns, "link", "set", "lo", "up"])
        return ns

    def device(self, index: int, subnet: ipaddress.IPv4Network, authorized: Path
               ) -> tuple[EmulatedDevice, SSHDaemon]:
        name = f"dev{index}"
        base = subnet.network_address + 4 * index
        host_ip, device_ip = str(base + 1), str(base + 2)
        folder = self.root / name
        folder.mkdir(mode=0o755)
        home = folder / "home"
        home.mkdir(mode=0o755)
        os.chown(home, self.uid, self.gid)
        host_key = keygen(folder / "host_ed25519")
        config = folder / "sshd_config"
        config.write_text(sshd_config_text(
            address=device_ip, port=22, host_key=folder / "host_ed25519",
            pid_file=folder / "sshd.pid", authorized_keys=authorized,
            extra=("UseDNS no", "MaxStartups 100")))
        passwd = _passwd_with_home(folder / "passwd", home)
        ns = self.network(index, host_ip, device_ip)
        group = self.cgroup(f"{PREFIX}{self.owner}-{index}")
        daemon = SSHDaemon(config, log_lines=200, prefix=group.join_argv([
            "ip", "netns", "exec", ns, "sh", "-c", _OWN_PASSWD_SH, "sh", str(passwd)]))
        self.daemons.append(daemon)
        return EmulatedDevice(name=name, netns=ns, address=device_ip, port=22, home=home,
                              host_key=host_key, sshd_pid=daemon.proc.pid, cgroup=group), daemon

    def teardown(self) -> list[str]:
        """Kill, then remove everything created; every step runs even if another fails."""
        errors: list[str] = []

        def step(what: str, func: Any, *args: Any) -> None:
            try:
                func(*args)
            except Exception as exc:  # noqa: BLE001 - keep tearing down, report at the end
                errors.append(f"{what}: {exc}")

        with subreaper():  # orphans of killed sessions come to us, not init
            killed: set[int] = set()
            for group in self.cgroups:
                for path in group.dirs:
                    killed |= cgroups.kill_members(path)
            for daemon in self.daemons:
                step("sshd", daemon.kill)
            reap(killed)
        for group in self.cgroups:
            step(f"cgroup {group.cpu.name}", cgroups.remove, group)
        for veth in self.veths:
            _quiet(["ip", "link", "del", veth])  # takes its peer in the namespace with it
        for ns in self.netns:
            step(f"netns {ns}", _check, ["ip", "netns", "del", ns])
        step(f"remove {self.root}", shutil.rmtree, self.root)
        return errors


@contextlib.contextmanager
def running_fleet(count: int = 8, *, cpus: float = 1.0, memory_mb: int = 1024,
                  venv: Path = DEVICE_VENV) -> Iterator[EmulatedFleet]:
    """Start ``count`` emulated devices; tear them all down on exit (also on errors)."""
    import pwd

    if not 1 <= count <= MAX_DEVICES:
        raise ValueError(f"count must be 1..{MAX_DEVICES}, got {count}")
    reason = unavailable()
    if reason is not None:
        raise FleetUnavailable(reason)
    require_root_and_sshd()
    # reentrant: this very process may hold it already (the session's ``ssh_device`` fixture)
    with device_lock(reentrant=True):
        python = ensure_device_venv(venv)
        ensure_user()
        user = pwd.getpwnam(DEVICE_USER)
        remove_stale()
        subnet = _free_subnet()
        root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
        root.chmod(0o755)  # edgeuser traverses it to its home
        builder = _Builder(root, user.pw_uid, user.pw_gid, cpus, memory_mb)
        try:
            keys = root / "keys"
            keys.mkdir(mode=0o755)
            client = keygen(keys / "id_ed25519")
            keygen(keys / "wrong_id_ed25519")
            authorized = write_authorized_keys(keys / "authorized_keys", client,
                                               comment="edge-fleet-client")
            started = [builder.device(i, subnet, authorized) for i in range(count)]
            for device, daemon in started:
                if not daemon.listening(device.address, device.port, READY_TIMEOUT):
                    raise SSHDError(f"sshd did not start listening on {device.address}:"
                                    f"{device.port}:\n" + "\n".join(daemon.log))
            devices = tuple(device for device, _ in started)
            known_hosts = keys / "known_hosts"
            known_hosts.write_text("".join(f"{d.address} {d.host_key}\n" for d in devices))
            yield EmulatedFleet(devices=devices, user=DEVICE_USER,
                                identity=keys / "id_ed25519",
                                wrong_identity=keys / "wrong_id_ed25519",
                                known_hosts=known_hosts, python=python, root=root, cpus=cpus,
                                memory_mb=memory_mb)
        finally:
            errors = builder.teardown()
            if errors:
                print("warning: fleet teardown: " + "; ".join(errors), file=sys.stderr)


#: One fleet per test run (by its size): started by the first module that asks for it, torn
#: down when the run's process ends.
_SHARED: dict[int, EmulatedFleet] = {}
_STACK = contextlib.ExitStack()
atexit.register(_STACK.close)


def _shared(count: int) -> EmulatedFleet:
    if count not in _SHARED:
        _SHARED[count] = _STACK.enter_context(running_fleet(count, cpus=1.0, memory_mb=1024))
    return _SHARED[count]


def fleet_or_skip(count: int, *, wipe: bool = True) -> Iterator[Any]:
    """A test module's fleet of ``count`` devices (1 CPU, 1 GB each), yielded by a fixture;
    a pytest skip naming why when this machine cannot run one (CI fails on any skip).

    The run starts one fleet and shares it: each module gets it with every device's home
    emptied (``wipe``), as a fresh fleet is, for a first-time deploy."""
    import pytest

    reason = unavailable()
    if reason is not None:
        pytest.skip(f"emulated devices unavailable: {reason}")
    try:
        fleet = _shared(count)
    except FleetUnavailable as exc:
        pytest.skip(f"emulated devices unavailable: {exc}")
    fleet.own_homes()  # another module's one-device sshd may have detached them
    if wipe:
        fleet.wipe()
    yield fleet
