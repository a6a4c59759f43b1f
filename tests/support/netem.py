"""An emulated network link between two network namespaces: a userspace ``netem``. A test and
benchmark harness (tests/partition/test_link_emulated.py, bench/split_link.py); nothing in edge
imports it.

The kernel ``netem`` qdisc is not always available (and ``tbf``/``htb`` add no delay), so this
module builds the link itself::

    [edge netns] tunA <--fd--> forwarder process <--fd--> tunB [cloud netns]

Two TUN devices are opened in the root namespace, each is moved into its own namespace and
configured point-to-point; a forwarder child process (``python -I tests/support/netem_forward.py
forward ...``, holding both TUN fds) copies IP packets between them, delaying each by its
serialization at the rate and half the RTT (see netem_forward.py). ``set_spec`` sends the new
spec over a control socket; the single-threaded forwarder applies it atomically, to packets
arriving afterwards.

With ``edge_cpu_fraction=f`` the edge side also runs in a cgroup (v1 or v2,
tests/support/cgroups.py) limiting it to ``f`` CPUs with CFS bandwidth control. The period is
kept short (1 ms, the kernel minimum) so throttling is fine-grained instead of 100 ms bursts;
because the kernel also rejects quotas below 1 ms, the period grows to ``ceil(1 ms / f)`` for
``f < 1`` (``f=0.25``: 1 ms every 4 ms).

Requires Linux, root, ``/dev/net/tun``, iproute2 ``ip`` and a writable cgroup cpu controller;
see :func:`available`. Only the namespaces created here ever carry traffic. Each namespace gets
``net.ipv4.tcp_slow_start_after_idle=0`` so a warmed keep-alive connection keeps its window.

Caveats (measured on a 2-vCPU VM):

* Wake-up latency (the forwarder's timer, then the receiving process) adds ~0.3-1 ms to every
  round trip: a 20 ms spec measures ~20.6 ms, 100 ms ~100.8 ms.
* The rate applies to IP packets; TCP goodput is ~96.5% of it (headers) -- 10 Mbit/s gives
  ~9.6 Mbit/s. A deep queue (default 1000 packets, 1.2 s at 10 Mbit/s) lets a bulk TCP flow
  inflate the RTT of everything sharing that direction, like a bufferbloated link.
* The forwarder is Python: fine up to ~200 Mbit/s, at the cost of CPU (~10% of a core at
  10 Mbit/s, ~40% at 100 Mbit/s), which competes with the programs being measured.
* If the owning process is SIGKILLed, nothing cleans up at once; :func:`remove_stale` (also
  run by every new link) removes leftovers whose owner pid is gone.
"""

from __future__ import annotations

import atexit
import fcntl
import itertools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from tests.support import cgroups
from tests.support.netem_forward import LinkSpec

__all__ = ["EmulatedLink", "LinkSpec", "available", "remove_stale"]

Side = Literal["edge", "cloud"]

TUN_DEVICE = "/dev/net/tun"
FORWARDER = Path(__file__).with_name("netem_forward.py")
PREFIX = "edgetest-"
MTU = 1500
CFS_PERIOD_US = 1000  # the shortest legal period: fine-grained throttling

_TUNSETIFF = 0x400454CA
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000

# Writes $2 to the file $1 (a per-namespace sysctl under /proc/sys).
_WRITE_FILE_SH = 'printf %s "$2" > "$1"'

_counter = itertools.count()


def available() -> str | None:
    """None when an :class:`EmulatedLink` can be built here, else a one-line reason why not."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return "needs root (network namespaces, TUN devices, cgroups)"
    if not os.access(TUN_DEVICE, os.R_OK | os.W_OK):
        return f"{TUN_DEVICE} is missing or not accessible"
    for tool in ("ip", "sh"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH"
    return cgroups.unavailable(cgroups.hierarchy(), ["cpu"])


# --------------------------------------------------------------------------------------------
# Setup helpers (parent side)


def _ip(*args: str) -> None:
    """Run ``ip ARGS``, raising with its stderr on failure."""
    _check(["ip", *args])


def _check(argv: list[str]) -> None:
    """Run a setup command, raising RuntimeError with its output on failure."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")


def _open_tun() -> tuple[int, str]:
    """Open a new TUN device (IP packets, no packet-info header); return its fd and name."""
    fd = os.open(TUN_DEVICE, os.O_RDWR)
    try:
        request = struct.pack("16sH", b"edgetun%d", _IFF_TUN | _IFF_NO_PI)
        reply = fcntl.ioctl(fd, _TUNSETIFF, request)
    except OSError:
        os.close(fd)
        raise
    return fd, reply[:16].rstrip(b"\0").decode()


def _set_sysctl(ns: str, key: str, value: str) -> None:
    """Set a per-namespace sysctl (``net.*``; dotted or slashed) inside ``ns``."""
    path = "/proc/sys/" + (key if "/" in key else key.replace(".", "/"))
    _check(["ip", "netns", "exec", ns, "sh", "-c", _WRITE_FILE_SH, "sh", path, value])


def _kill_pids(pids: list[int]) -> None:
    """SIGKILL each pid, ignoring ones already gone."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _netns_pids(ns: str) -> list[int]:
    """Pids of processes living in namespace ``ns``."""
    done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False)
    return [int(tok) for tok in done.stdout.split() if tok.isdigit()]


def _owner_alive(name: str) -> bool:
    """Whether the process that created ``edgetest-<pid>-<n>[-side]`` still runs."""
    pid = name.removeprefix(PREFIX).split("-", 1)[0]
    if not pid.isdigit():
        return True  # not one of ours: leave it alone
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Remove namespaces and cgroups left by links whose process died without cleaning up.

    Only ``edgetest-<pid>-...`` names whose ``pid`` no longer exists are touched; processes
    still inside such a namespace are killed. Returns the names removed.
    """
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    removed = []
    for ns in names:
        if ns.startswith(PREFIX) and not _owner_alive(ns):
            _kill_pids(_netns_pids(ns))
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
            removed.append(ns)
    for group in cgroups.named(cgroups.hierarchy(), PREFIX):
        if not _owner_alive(group.name):
            cgroups.remove_dir(group)
            removed.append(str(group))
    return removed


class EmulatedLink:
    """Two network namespaces joined by an emulated link; a context manager.

    ``edge_ns``/``cloud_ns`` are the namespace names, ``edge_ip``/``cloud_ip`` the addresses of
    the two ends. Run programs on either side with :meth:`argv`, :meth:`popen` or :meth:`run`.
    """

    def __init__(self, spec: LinkSpec, *, edge_cpu_fraction: float | None = None) -> None:
        if edge_cpu_fraction is not None and not edge_cpu_fraction > 0:
            raise ValueError(f"edge_cpu_fraction must be positive, got {edge_cpu_fraction}")
        reason = available()
        if reason is not None:
            raise RuntimeError(f"cannot emulate a link here: {reason}")
        remove_stale()
        number = next(_counter)
        ident = f"{os.getpid()}-{number}"
        subnet = (os.getpid() + number) % 250 + 1  # cosmetic: each pair is isolated anyway
        self.spec = spec
        self.edge_ns = f"{PREFIX}{ident}-edge"
        self.cloud_ns = f"{PREFIX}{ident}-cloud"
        self.edge_ip = f"10.231.{subnet}.1"
        self.cloud_ip = f"10.231.{subnet}.2"
        self.cgroup: cgroups.Group | None = None
        self._cgroup_name = f"{PREFIX}{ident}"
        self._namespaces: list[str] = []
        self._procs: list[subprocess.Popen[Any]] = []
        self._forwarder: subprocess.Popen[bytes] | None = None
        self._ctl: socket.socket | None = None
        self._ctl_lock = threading.Lock()
        self._closed = False
        atexit.register(self.close)
        try:
            self._setup(edge_cpu_fraction)
        except BaseException:
            self.close()
            raise

    # -- setup -------------------------------------------------------------------------------

    def _setup(self, edge_cpu_fraction: float | None) -> None:
        """Namespaces, TUN devices, addresses, sysctls, cgroup, then the forwarder."""
        fds: list[int] = []
        try:
            for ns, local, peer in (
                (self.edge_ns, self.edge_ip, self.cloud_ip),
                (self.cloud_ns, self.cloud_ip, self.edge_ip),
            ):
                fd, dev = _open_tun()
                fds.append(fd)
                self._make_namespace(ns, dev, local, peer)
            if edge_cpu_fraction is not None:
                self._make_cgroup(edge_cpu_fraction)
            self._start_forwarder(fds[0], fds[1])
        finally:
            for fd in fds:  # the forwarder holds its own copies; the devices die with it
                os.close(fd)

    def _make_namespace(self, ns: str, dev: str, local: str, peer: str) -> None:
        """Create ``ns``, move TUN ``dev`` into it and configure it point-to-point."""
        _ip("netns", "add", ns)
        self._namespaces.append(ns)
        # A warmed keep-alive connection keeps its congestion window across idle periods.
        _set_sysctl(ns, "net.ipv4.tcp_slow_start_after_idle", "0")
        _ip("link", "set", dev, "netns", ns)
        # No IPv6 chatter (router solicitations, MLD) on the link itself; best effort.
        try:
            _set_sysctl(ns, f"net/ipv6/conf/{dev}/disable_ipv6", "1")
        except RuntimeError:
            pass
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "link", "set", dev, "mtu", str(MTU))
        _ip("-n", ns, "addr", "add", local, "peer", peer, "dev", dev)
        _ip("-n", ns, "link", "set", dev, "up")

    def _make_cgroup(self, fraction: float) -> None:
        """A cpu cgroup limiting its members to ``fraction`` CPUs (fine-grained CFS period)."""
        self.cgroup = cgroups.create(cgroups.hierarchy(), self._cgroup_name, cpus=fraction,
                                     period_us=CFS_PERIOD_US)

    def _start_forwarder(self, edge_fd: int, cloud_fd: int) -> None:
        """Start the forwarder child process with both TUN fds and a control socket."""
        parent, child = socket.socketpair()
        try:
            argv = [sys.executable, "-I", str(FORWARDER), "forward"]
            argv += [str(edge_fd), str(cloud_fd), str(child.fileno())]
            self._forwarder = subprocess.Popen(
                argv, pass_fds=(edge_fd, cloud_fd, child.fileno()), stdin=subprocess.DEVNULL
            )
        finally:
            child.close()
        self._ctl = parent
        self._ctl_file = parent.makefile("rwb", buffering=0)
        self.set_spec(self.spec)

    # -- running programs --------------------------------------------------------------------

    def argv(self, side: Side, argv: list[str]) -> list[str]:
        """``argv`` prefixed to run inside ``side``'s namespace (and the edge CPU cgroup)."""
        if not argv or not all(isinstance(arg, str) for arg in argv):
            raise ValueError("argv must be a non-empty list of strings")
        if side == "edge":
            inner = ["ip", "netns", "exec", self.edge_ns, *argv]
            if self.cgroup is None:
                return inner
            # Join the cgroup before `ip netns exec`, which remounts /sys (hiding the cgroupfs).
            return self.cgroup.join_argv(inner)
        if side == "cloud":
            return ["ip", "netns", "exec", self.cloud_ns, *argv]
        raise ValueError(f"side must be 'edge' or 'cloud', got {side!r}")

    def popen(self, side: Side, argv: list[str], **kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``side``; it is killed when the link closes."""
        proc = subprocess.Popen(self.argv(side, argv), **kw)
        self._procs.append(proc)
        return proc

    def run(self, side: Side, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` inside ``side`` to completion (``subprocess.run`` keywords apply)."""
        return subprocess.run(self.argv(side, argv), **kw)

    # -- forwarder control -------------------------------------------------------------------

    def set_spec(self, spec: LinkSpec) -> None:
        """Change rate/delay/queue; packets arriving from now on use the new spec."""
        self._request({"op": "spec", "spec": asdict(spec)})
        self.spec = spec

    def stats(self) -> dict[str, dict[str, int]]:
        """Packets, bytes and drops per direction (``edge_to_cloud``, ``cloud_to_edge``)."""
        return self._request({"op": "stats"})

    def _request(self, message: dict[str, Any]) -> Any:
        """Send one control message to the forwarder and return its reply."""
        with self._ctl_lock:
            if self._ctl is None or self._forwarder is None or self._forwarder.poll() is not None:
                raise RuntimeError("the link's forwarder is not running")
            self._ctl_file.write(json.dumps(message).encode() + b"\n")
            line = self._ctl_file.readline()
        if not line:
            raise RuntimeError("the link's forwarder exited")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"forwarder: {reply['error']}")
        return reply["result"]

    # -- teardown ----------------------------------------------------------------------------

    def __enter__(self) -> EmulatedLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill everything started here, then remove the cgroup and namespaces. Idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self._kill_programs()
        self._stop_forwarder()
        self._remove_cgroup()
        for ns in self._namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        self._namespaces.clear()

    def _kill_programs(self) -> None:
        """Kill the programs started by :meth:`popen` and anything else left in our namespaces."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for ns in self._namespaces:
            _kill_pids(_netns_pids(ns))

    def _stop_forwarder(self) -> None:
        """Stop the forwarder (its TUN devices vanish with it) and close the control socket."""
        if self._forwarder is not None and self._forwarder.poll() is None:
            self._forwarder.kill()
            self._forwarder.wait(timeout=5)
        if self._ctl is not None:
            self._ctl_file.close()
            self._ctl.close()
            self._ctl = None

    def _remove_cgroup(self) -> None:
        """Kill any remaining members, then remove the group."""
        if self.cgroup is not None:
            cgroups.remove(self.cgroup)
            self.cgroup = None


# --------------------------------------------------------------------------------------------
# The forwarder (child process)
