"""The userspace-emulated link between two network namespaces: delay, rate, CPU limit, cleanup.

Skipped where :func:`tests.support.netem.available` says the machine lacks something (root,
/dev/net/tun, iproute2, a writable cgroup cpu controller, v1 or v2) -- and a skip fails the run
under EDGE_TEST_STRICT=1 (CI).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support import cgroups
from tests.support.netem import EmulatedLink, LinkSpec, available, remove_stale

_REASON = available()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

PY = sys.executable
PORT = 5201

# Cloud side: accept connections forever. "echo" echoes bytes back; "sink" reads frames (an
# 8-byte big-endian length, then that many bytes) and answers each with one byte.
SERVER = r"""
import socket, struct, sys
ip, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((ip, port))
srv.listen()
print("ready", flush=True)
def read_exact(c, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = c.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf
while True:
    conn, _ = srv.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        if mode == "echo":
            while data := conn.recv(65536):
                conn.sendall(data)
        else:
            while True:
                (size,) = struct.unpack("!Q", read_exact(conn, 8))
                read_exact(conn, size)
                conn.sendall(b"k")
    except (EOFError, OSError):
        pass
    conn.close()
"""

# Edge side: connect, then N one-byte round trips; prints connect time and RTTs (seconds).
ECHO_CLIENT = r"""
import json, socket, sys, time
ip, port, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0 = time.perf_counter()
s = socket.create_connection((ip, port))
connect = time.perf_counter() - t0
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
for _ in range(rounds):
    t0 = time.perf_counter()
    s.sendall(b"x")
    assert s.recv(1) == b"x"
    rtts.append(time.perf_counter() - t0)
print(json.dumps({"connect": connect, "rtts": rtts}))
"""

# Edge side: one warm-up frame, then a timed frame over the same (warmed) connection.
BULK_CLIENT = r"""
import json, socket, struct, sys, time
ip, port, warm, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = socket.create_connection((ip, port))
def frame(n):
    t0 = time.perf_counter()
    s.sendall(struct.pack("!Q", n) + bytes(n))
    assert s.recv(1) == b"k"
    return time.perf_counter() - t0
frame(warm)
print(json.dumps({"seconds": frame(size)}))
"""

# Either side: a CPU-bound loop, timed inside the process (startup excluded): wall seconds and
# the CPU seconds it used.
CPU_LOOP = r"""
import sys, time
t0, c0 = time.perf_counter(), time.process_time()
n = 0
for i in range(int(sys.argv[1])):
    n += i
print(time.perf_counter() - t0, time.process_time() - c0)
"""


@contextmanager
def cloud_server(link: EmulatedLink, mode: str) -> Iterator[None]:
    """A SERVER in the cloud namespace, listening on PORT until the block ends."""
    proc = link.popen(
        "cloud", [PY, "-c", SERVER, link.cloud_ip, str(PORT), mode], stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        yield
    finally:
        proc.kill()
        proc.wait()


def edge_json(link: EmulatedLink, script: str, *args: object) -> dict:
    """Run a client script in the edge namespace; return its JSON output."""
    argv = [PY, "-c", script, link.cloud_ip, str(PORT), *map(str, args)]
    done = link.run("edge", argv, capture_output=True, text=True, timeout=20, check=True)
    return json.loads(done.stdout)


def median_rtt_ms(link: EmulatedLink, rounds: int) -> float:
    """Median one-byte TCP echo round trip (ms) from edge to cloud."""
    return statistics.median(edge_json(link, ECHO_CLIENT, rounds)["rtts"]) * 1000


def assert_close(measured: float, expected: float, rel: float = 0.15, slack: float = 0.0) -> None:
    """``measured`` within ``rel`` of ``expected`` plus an absolute ``slack``."""
    assert abs(measured - expected) <= rel * expected + slack, (measured, expected)


@pytest.mark.parametrize(("rtt_ms", "rounds"), [(20.0, 25), (100.0, 11)])
def test_round_trip_time_matches_spec(rtt_ms: float, rounds: int) -> None:
    with EmulatedLink(LinkSpec(rate_mbit=10, rtt_ms=rtt_ms)) as link:
        with cloud_server(link, "echo"):
            measured = median_rtt_ms(link, rounds)
        stats = link.stats()
    print(f"rtt spec {rtt_ms} ms: median {measured:.2f} ms")
    assert_close(measured, rtt_ms, slack=1.0)
    assert stats["edge_to_cloud"]["packets"] >= rounds
    assert stats["cloud_to_edge"]["packets"] >= rounds


def test_throughput_matches_rate_over_a_warmed_connection() -> None:
    size, rate, rtt = 1_500_000, 10.0, 20.0
    with EmulatedLink(LinkSpec(rate_mbit=rate, rtt_ms=rtt)) as link:
        with cloud_server(link, "sink"):
            seconds = edge_json(link, BULK_CLIENT, 300_000, size)["seconds"]
        stats = link.stats()
    # The timed frame also pays one round trip (first byte there, acknowledgement back).
    mbit = size * 8 / (seconds - rtt / 1000) / 1e6
    print(f"throughput spec {rate} Mbit/s: {mbit:.2f} Mbit/s goodput ({seconds:.3f} s)")
    assert_close(mbit, rate)
    assert stats["edge_to_cloud"]["bytes"] > size
    assert stats["edge_to_cloud"]["drops"] == 0


def test_set_spec_changes_delay_on_the_fly() -> None:
    with EmulatedLink(LinkSpec(rate_mbit=10, rtt_ms=20)) as link:
        with cloud_server(link, "echo"):
            before = median_rtt_ms(link, 11)
            link.set_spec(LinkSpec(rate_mbit=10, rtt_ms=60))
            after = median_rtt_ms(link, 11)
        assert link.spec.rtt_ms == 60
    print(f"set_spec: {before:.2f} ms -> {after:.2f} ms")
    assert_close(before, 20, slack=1.0)
    assert_close(after, 60, slack=1.0)


def test_close_removes_namespaces_cgroup_and_programs() -> None:
    with EmulatedLink(LinkSpec(rate_mbit=10, rtt_ms=2), edge_cpu_fraction=0.5) as link:
        names = (link.edge_ns, link.cloud_ns)
        assert link.cgroup is not None
        cgroup = link.cgroup.cpu
        assert cgroup.is_dir()
        assert all(name.startswith("edgetest-") for name in names)
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert all(name in listed for name in names)
        sleeper = link.popen("edge", ["sleep", "60"])
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in listed for name in names)
    assert not Path(cgroup).exists()
    assert sleeper.poll() is not None
    link.close()  # idempotent


def test_cleanup_after_an_exception() -> None:
    with pytest.raises(KeyError), EmulatedLink(LinkSpec(rate_mbit=10, rtt_ms=2)) as link:
        names = (link.edge_ns, link.cloud_ns)
        raise KeyError("boom")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in listed for name in names)


def test_remove_stale_clears_leftovers_of_dead_processes() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is now free: a crashed link's owner
    parent = cgroups.hierarchy().parents["cpu"]
    ns, group = f"edgetest-{dead.pid}-0-edge", parent / f"edgetest-{dead.pid}-0"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    group.mkdir()
    try:
        removed = remove_stale()
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if group.exists():
            group.rmdir()
    assert ns in removed and str(group) in removed
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert ns not in listed


def test_edge_cpu_fraction_slows_cpu_bound_work() -> None:
    """The edge side gets a quarter of a CPU: its share (CPU seconds over wall seconds) is the
    cgroup's cap, and CPU-bound work there takes at least 2.5x as long as in the cloud.

    The wall-time ratio itself is not bounded above: it is ~4 on a quiet host, but the CPU seconds
    the same loop needs vary between runs on a shared VM (1.00-1.36x the cloud side's in one
    scratch series, and 6.1 once in CI), while the share stayed 0.248-0.251."""
    loop = [PY, "-c", CPU_LOOP, "600000"]
    times: dict[str, list[tuple[float, float]]] = {"edge": [], "cloud": []}
    with EmulatedLink(LinkSpec(rate_mbit=10, rtt_ms=2), edge_cpu_fraction=0.25) as link:
        for _ in range(5):  # interleaved, so drifting machine load hits both sides alike
            for side in ("cloud", "edge"):
                out = link.run(side, loop, capture_output=True, text=True, check=True).stdout
                wall, cpu = map(float, out.split())
                times[side].append((wall, cpu))
    ratio = _median(times["edge"], 0) / _median(times["cloud"], 0)
    share = statistics.median(cpu / wall for wall, cpu in times["edge"])
    print(f"cpu 0.25: edge/cloud = {ratio:.2f}, edge CPU share {share:.3f} {times}")
    assert share <= 0.25 * 1.1, "the edge side used more than its quarter of a CPU"
    assert ratio >= 2.5, "the edge side was not slowed"


def _median(runs: list[tuple[float, float]], k: int) -> float:
    return statistics.median(run[k] for run in runs)


def test_argv_and_spec_validation() -> None:
    with pytest.raises(ValueError):
        LinkSpec(rate_mbit=0, rtt_ms=10)
    with pytest.raises(ValueError):
        LinkSpec(rate_mbit=10, rtt_ms=-1)
    with EmulatedLink(LinkSpec(rate_mbit=10, rtt_ms=2)) as link:
        assert link.argv("cloud", ["true"]) == ["ip", "netns", "exec", link.cloud_ns, "true"]
        with pytest.raises(ValueError):
            link.argv("middle", ["true"])  # type: ignore[arg-type]
        assert link.run("edge", ["true"]).returncode == 0
