"""An emulated network link between two network namespaces: a userspace ``netem``.

The kernel ``netem`` qdisc is not always available (and ``tbf``/``htb`` add no delay), so this
module builds the link itself::

    [edge netns] tunA <--fd--> forwarder process <--fd--> tunB [cloud netns]

Two TUN devices are opened in the root namespace, each is moved into its own namespace and
configured point-to-point; a forwarder child process (``python devices/netem.py forward ...``,
holding both TUN fds) copies IP packets between them. Per direction and per packet::

    departure = max(arrival, previous departure) + len * 8 / rate    # serialization
    delivery  = departure + rtt / 2                                  # propagation

Packets leave each direction in FIFO order (never reordered). A packet is tail-dropped when
``queue_packets`` packets are already waiting for serialization (a router buffer; packets in
propagation do not count). ``set_spec`` sends the new spec over a control socket; the
single-threaded forwarder applies it atomically, to packets arriving afterwards.

With ``edge_cpu_fraction=f`` the edge side also runs in a cgroup v1 ``cpu`` group limiting it to
``f`` CPUs with CFS bandwidth control. The period is kept short (1 ms, the kernel minimum) so
throttling is fine-grained instead of 100 ms bursts; because the kernel also rejects quotas
below 1 ms, the period grows to ``ceil(1 ms / f)`` for ``f < 1`` (``f=0.25``: 1 ms every 4 ms).

Requires Linux, root, ``/dev/net/tun``, iproute2 ``ip`` and the cgroup v1 cpu controller; see
:func:`available`. Only the namespaces created here ever carry traffic. Each namespace gets
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

import argparse
import atexit
import ctypes
import fcntl
import itertools
import json
import math
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["EmulatedLink", "LinkSpec", "available", "remove_stale"]

Side = Literal["edge", "cloud"]

TUN_DEVICE = "/dev/net/tun"
CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
PREFIX = "edgetest-"
MTU = 1500

_TUNSETIFF = 0x400454CA
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000
_PR_SET_TIMERSLACK = 29
_MIN_CFS_US = 1000  # the kernel rejects CFS periods and quotas below 1 ms

# Joins the cgroup whose ``cgroup.procs`` is $1, then execs the rest of the argv. A constant
# script: the path and the command only ever travel as positional arguments.
_JOIN_CGROUP_SH = 'echo $$ > "$1" || exit 125; shift; exec "$@"'
# Writes $2 to the file $1 (a per-namespace sysctl under /proc/sys).
_WRITE_FILE_SH = 'printf %s "$2" > "$1"'

_counter = itertools.count()


@dataclass(frozen=True)
class LinkSpec:
    """Shape of the emulated link, identical in both directions."""

    rate_mbit: float  # each direction, megabits/s
    rtt_ms: float  # round-trip delay added (half each way)
    queue_packets: int = 1000  # tail drop beyond this many packets awaiting serialization

    def __post_init__(self) -> None:
        if not self.rate_mbit > 0 or math.isinf(self.rate_mbit):
            raise ValueError(f"rate_mbit must be positive and finite, got {self.rate_mbit}")
        if not self.rtt_ms >= 0 or math.isinf(self.rtt_ms):
            raise ValueError(f"rtt_ms must be >= 0 and finite, got {self.rtt_ms}")
        if self.queue_packets < 1:
            raise ValueError(f"queue_packets must be >= 1, got {self.queue_packets}")


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
    if not os.access(CGROUP_CPU / "cpu.cfs_quota_us", os.W_OK):
        return f"no writable cgroup v1 cpu controller at {CGROUP_CPU}"
    return None


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


def _cfs_settings(fraction: float) -> tuple[int, int]:
    """CFS (period_us, quota_us) giving ``fraction`` CPUs with the shortest legal period."""
    period = max(_MIN_CFS_US, math.ceil(_MIN_CFS_US / fraction))
    return period, max(_MIN_CFS_US, round(fraction * period))


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


def _empty_cgroup(group: Path) -> None:
    """Move ``group``'s members back to the root cpu cgroup and remove it (retrying briefly)."""
    root_procs = CGROUP_CPU / "cgroup.procs"
    for _ in range(50):
        try:
            for pid in (group / "cgroup.procs").read_text().split():
                try:
                    root_procs.write_text(pid)
                except OSError:
                    pass  # exited meanwhile
            group.rmdir()
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)  # a member was still exiting
            continue
        return


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
    for group in CGROUP_CPU.glob(f"{PREFIX}*"):
        if group.is_dir() and not _owner_alive(group.name):
            _empty_cgroup(group)
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
        self.cgroup: Path | None = None
        self._cgroup_wanted = CGROUP_CPU / f"{PREFIX}{ident}"
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
        self._cgroup_wanted.mkdir()
        self.cgroup = self._cgroup_wanted
        period, quota = _cfs_settings(fraction)
        (self.cgroup / "cpu.cfs_period_us").write_text(str(period))
        (self.cgroup / "cpu.cfs_quota_us").write_text(str(quota))

    def _start_forwarder(self, edge_fd: int, cloud_fd: int) -> None:
        """Start the forwarder child process with both TUN fds and a control socket."""
        parent, child = socket.socketpair()
        try:
            argv = [sys.executable, "-I", os.path.abspath(__file__), "forward"]
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
            procs = str(self.cgroup / "cgroup.procs")
            return ["sh", "-c", _JOIN_CGROUP_SH, "sh", procs, *inner]
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
        """Move any remaining members back to the root cpu cgroup, then remove the group."""
        if self.cgroup is not None:
            _empty_cgroup(self.cgroup)
            self.cgroup = None


# --------------------------------------------------------------------------------------------
# The forwarder (child process)


class _Direction:
    """One direction of the link: a FIFO of packets with their delivery times."""

    def __init__(self, src: int, dst: int) -> None:
        self.src, self.dst = src, dst
        self.queue: deque[tuple[float, bytes]] = deque()  # (delivery time, packet)
        self.waiting: deque[float] = deque()  # departure times of packets still serializing
        self.last_departure = 0.0
        self.last_delivery = 0.0
        self.packets = self.bytes = self.drops = 0

    def enqueue(self, packet: bytes, now: float, spec: LinkSpec) -> None:
        """Schedule ``packet`` (arrived at ``now``) or tail-drop it if the buffer is full."""
        while self.waiting and self.waiting[0] <= now:
            self.waiting.popleft()
        if len(self.waiting) >= spec.queue_packets:
            self.drops += 1
            return
        departure = max(now, self.last_departure) + len(packet) * 8 / (spec.rate_mbit * 1e6)
        delivery = max(departure + spec.rtt_ms / 2000, self.last_delivery)  # FIFO, no reordering
        self.last_departure, self.last_delivery = departure, delivery
        self.waiting.append(departure)
        self.queue.append((delivery, packet))

    def deliver(self, now: float) -> None:
        """Write every packet whose delivery time has come to the other side."""
        while self.queue and self.queue[0][0] <= now:
            _, packet = self.queue.popleft()
            try:
                os.write(self.dst, packet)
            except OSError:
                self.drops += 1
                continue
            self.packets += 1
            self.bytes += len(packet)

    def next_due(self) -> float | None:
        """Delivery time of the head packet, if any."""
        return self.queue[0][0] if self.queue else None

    def counters(self) -> dict[str, int]:
        """Forwarded packets and bytes, and drops."""
        return {"packets": self.packets, "bytes": self.bytes, "drops": self.drops}


class _Forwarder:
    """Single-threaded event loop moving packets between two TUN fds under a :class:`LinkSpec`."""

    READ_BURST = 256
    # Measured on a 2-vCPU VM: 0.2 ms of spinning trims ~0.3 ms off a 20 ms RTT but triples the
    # forwarder's CPU (a full core above ~50 Mbit/s), CPU the benchmarked programs need more.
    SPIN_S = 0.0

    def __init__(self, edge_fd: int, cloud_fd: int, ctl: socket.socket) -> None:
        self.up = _Direction(edge_fd, cloud_fd)
        self.down = _Direction(cloud_fd, edge_fd)
        self.by_src = {edge_fd: self.up, cloud_fd: self.down}
        self.ctl = ctl
        self.ctl_buffer = b""
        self.spec = LinkSpec(rate_mbit=1000.0, rtt_ms=0.0)
        for fd in self.by_src:
            os.set_blocking(fd, False)

    def run(self) -> None:
        """Loop until the control socket closes (the parent is gone or done)."""
        readable = [*self.by_src, self.ctl.fileno()]
        while True:
            now = time.monotonic()
            self.up.deliver(now)
            self.down.deliver(now)
            ready, _, _ = select.select(readable, [], [], self._timeout(now))
            for fd in ready:
                if fd == self.ctl.fileno():
                    if not self._serve_control():
                        return
                else:
                    self._read_packets(self.by_src[fd])

    def _timeout(self, now: float) -> float | None:
        """Seconds to wait for input: None with nothing queued, 0 (poll) close to a delivery.

        Timer wake-ups run ~0.1 ms late; with ``SPIN_S > 0`` the loop wakes that much early
        and polls until the delivery is due, costing up to ``SPIN_S`` of busy CPU per wake-up.
        """
        dues = [due for due in (self.up.next_due(), self.down.next_due()) if due is not None]
        if not dues:
            return None
        wait = min(dues) - now
        return wait - self.SPIN_S if wait > self.SPIN_S else 0.0

    def _read_packets(self, direction: _Direction) -> None:
        """Drain (a burst of) packets waiting on ``direction``'s source TUN."""
        for _ in range(self.READ_BURST):
            try:
                packet = os.read(direction.src, 65536)
            except (BlockingIOError, InterruptedError):
                return
            direction.enqueue(packet, time.monotonic(), self.spec)

    def _serve_control(self) -> bool:
        """Handle complete control lines; False when the parent closed the socket."""
        data = self.ctl.recv(65536)
        if not data:
            return False
        self.ctl_buffer += data
        while b"\n" in self.ctl_buffer:
            line, self.ctl_buffer = self.ctl_buffer.split(b"\n", 1)
            self.ctl.sendall(json.dumps(self._handle(json.loads(line))).encode() + b"\n")
        return True

    def _handle(self, message: dict[str, Any]) -> dict[str, Any]:
        """Apply one control message, returning the reply."""
        try:
            if message["op"] == "spec":
                self.spec = LinkSpec(**message["spec"])
                return {"result": None}
            if message["op"] == "stats":
                return {
                    "result": {
                        "edge_to_cloud": self.up.counters(),
                        "cloud_to_edge": self.down.counters(),
                    }
                }
            return {"error": f"unknown op {message['op']!r}"}
        except (KeyError, TypeError, ValueError) as exc:
            return {"error": str(exc)}


def _sharpen_timing() -> None:
    """Best effort: higher priority (wins the CPU under load) and 1 ns timer slack."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except OSError:
        pass
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(args: list[str] | None = None) -> int:
    """``python devices/netem.py forward EDGE_FD CLOUD_FD CTL_FD`` (started by EmulatedLink)."""
    parser = argparse.ArgumentParser(prog="netem", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    forward = sub.add_parser("forward", help="run the forwarder (internal)")
    for name in ("edge_fd", "cloud_fd", "ctl_fd"):
        forward.add_argument(name, type=int)
    ns = parser.parse_args(args)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    _sharpen_timing()
    ctl = socket.socket(fileno=ns.ctl_fd)
    _Forwarder(ns.edge_fd, ns.cloud_fd, ctl).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
