"""Edge side of the split runtime: run the head, send the cut tensors, get the outputs back.

The client holds every precomputed cut of a split directory (split.yaml ``cuts``). Each request
measures the link as it goes: uplink bandwidth from the bytes sent and the time on the wire
(wall time minus the server's compute time, reported in its ``Server-Timing`` header, minus the
RTT measured with health requests when the client starts and every ``rtt_every_s``
seconds, between inferences). Before each inference it picks the cut that is best for
split.yaml's objective (latency by default) at the bandwidth and RTT measured so far; while
running all on the device it sends one request through the best split cut every
``probe_every_s`` seconds so the estimate stays current (that request still returns the right
outputs).

The link is gRPC when the server offers it (its health replies name an ``edge-grpc-port``) and the
device has grpcio and tritonclient's messages (:mod:`partition.client_grpc`: raw binary tensors,
one HTTP/2 connection); otherwise, or when gRPC cannot be reached, REST: the stdlib's
``http.client`` with one keep-alive connection and the KServe v2 binary tensor extension
(:mod:`partition.client_http`, which bounds and checks every reply), so the
device needs numpy and onnxruntime only.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from edge.core import progress
from edge.core.errors import UsageError
from edge.core.extras import require
from edge.core.select import Option, choose
from partition.client_grpc import GrpcLink, GrpcUnreachable, available
from partition.client_http import CloudUnreachable, HttpLink
from partition.kserve import (
    NP_TO_KSERVE,
    TOKEN_ENV,
    Declared,
    Expected,
    Reply,
)
from partition.solve import DEFAULT_ENERGY, EnergyModel
from partition.split import CutOption, SplitPlan, read_split_yaml

__all__ = ["CloudUnreachable", "LinkEstimate", "SplitClient", "SplitResult"]



@dataclass(frozen=True, slots=True)
class LinkEstimate:
    """What the client currently believes about the link."""

    uplink_mbps: float
    downlink_mbps: float
    rtt_ms: float
    measured: bool  # False until a request has measured the uplink


@dataclass(frozen=True, slots=True)
class SplitResult:
    """One inference through the split, with where its time went (ms)."""

    outputs: dict[str, np.ndarray]
    cut_id: str
    kind: str
    edge_ms: float
    link_ms: float  # wall time of the request minus the server's compute time
    cloud_ms: float  # the server's compute time (Server-Timing)
    total_ms: float
    up_bytes: int
    down_bytes: int
    predicted_ms: float  # for this cut at the link estimate it was chosen with
    link: LinkEstimate  # the estimate after this request
    fell_back: bool = False  # the cloud failed and this ran all on the device
    started: float = 0.0  # wall clock (epoch s) when the inference started
    probe: bool = False  # sent through the cloud only to keep the link estimate current

    def timing(self) -> dict[str, Any]:
        """Everything but the outputs, JSON-ready."""
        return {"cut_id": self.cut_id, "kind": self.kind, "edge_ms": self.edge_ms,
                "link_ms": self.link_ms, "cloud_ms": self.cloud_ms, "total_ms": self.total_ms,
                "up_bytes": self.up_bytes, "down_bytes": self.down_bytes,
                "predicted_ms": self.predicted_ms, "uplink_mbps": self.link.uplink_mbps,
                "rtt_ms": self.link.rtt_ms, "link_measured": self.link.measured,
                "fell_back": self.fell_back, "started": self.started, "probe": self.probe}


class SplitClient:
    """Runs a split model against a KServe v2 server, switching cut as the link changes."""

    def __init__(self, split_dir: str | os.PathLike[str], url: str, *,
                 token: str | None = None, cut: str | None = None, threads: int = 1,
                 timeout_s: float = 30.0, probe_every_s: float = 5.0,
                 smoothing: float = 0.5, rtt_every_s: float = 30.0,
                 protocol: str = "auto") -> None:
        self.plan = read_split_yaml(Path(split_dir))
        self.cuts = _cuts(self.plan)
        self._fixed = _fixed_cut(self.cuts, cut)
        self._http = _Link(url, _token(token), timeout_s, protocol)
        self._heads: dict[str, Any] = {}
        self._tails: dict[str, _TailSpec] = {}
        self._threads = threads
        self._probe_every_s = probe_every_s
        self._smoothing = smoothing
        self._rtt_every_s = rtt_every_s
        self._rtt_at = -math.inf
        self._down_until = -math.inf
        self._last_network = time.monotonic()
        self.link = _initial_link(self.plan)
        self._energy = _energy(self.plan)
        self.last_error: str | None = None

    def close(self) -> None:
        """Close the connection to the server."""
        self._http.close()

    @property
    def protocol(self) -> str:
        """"grpc" or "http": what the last request went over ("" before the first)."""
        return self._http.used

    def __enter__(self) -> SplitClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def measure_rtt(self, tries: int = 3) -> float:
        """Minimum round trip of a tiny health request, ms; updates the link estimate."""
        first = self._rtt_at == -math.inf
        best = min(self._http.ping() for _ in range(max(1, tries)))
        self._rtt_at = time.monotonic()
        if first:  # the probe clock starts once the link is up (gRPC set-up is not idle time)
            self._last_network = self._rtt_at
        self.link = LinkEstimate(self.link.uplink_mbps, self.link.downlink_mbps, best,
                                 self.link.measured)
        return best

    def choose(self) -> CutOption:
        """The cut split.yaml's objective prefers (latency by default) at the current link."""
        return self._pick()[0]

    def _pick(self) -> tuple[CutOption, bool]:
        """The cut to run next, and whether it is a probe of the cloud (the device is best)."""
        if self._fixed is not None:
            return self._fixed, False
        local = [c for c in self.cuts if c.split.tail is None]
        if local and time.monotonic() < self._down_until:
            return local[0], False  # the cloud was unreachable a moment ago
        best = self._best(self.cuts)
        remote = [c for c in self.cuts if c.split.tail is not None]
        if best.split.tail is None and remote and self._probe_due():
            return self._best(remote), True
        return best, False

    def _best(self, cuts: Sequence[CutOption]) -> CutOption:
        """The cut with the lowest score (edge's one chooser; the model is exact: no ties)."""
        options = [Option(id=c.id, cost=self.score(c), rank=(k,)) for k, c in enumerate(cuts)]
        chosen = choose(options, tie=0.0)
        return next(c for c in cuts if c.id == chosen.id)

    def infer(self, feeds: Mapping[str, np.ndarray]) -> SplitResult:
        """Run one inference through the chosen cut.

        In automatic mode a cloud that cannot be reached is not fatal when the split has an
        all-edge cut: that inference runs on the device and says so (``fell_back``), and so do
        the next ones for ``probe_every_s`` seconds before the cloud is tried again. A cloud
        that answers with an error (e.g. HTTP 401) is an error.
        """
        if time.monotonic() - self._rtt_at >= self._rtt_every_s:
            self._try_measure_rtt()
        cut, probe = self._pick()
        try:
            return replace(self._infer(cut, feeds), probe=probe)
        except CloudUnreachable as exc:
            local = [c for c in self.cuts if c.split.tail is None]
            if self._fixed is not None or not local or cut.split.tail is None:
                raise
            self.last_error = str(exc)
            self._down_until = time.monotonic() + self._probe_every_s
            return replace(self._infer(local[0], feeds), fell_back=True)

    def _try_measure_rtt(self) -> None:
        """Refresh the RTT between inferences (a cloud that is down is noted, not fatal)."""
        try:
            self.measure_rtt()
        except CloudUnreachable as exc:
            self.last_error = str(exc)
            self._down_until = time.monotonic() + self._probe_every_s
        self._rtt_at = time.monotonic()

    def _infer(self, cut: CutOption, feeds: Mapping[str, np.ndarray]) -> SplitResult:
        self._head(cut)  # load it outside the timed region (first use of a cut)
        with progress.hold():  # no redraw of the bars inside the timed inference
            return self._timed_infer(cut, feeds)

    def _timed_infer(self, cut: CutOption, feeds: Mapping[str, np.ndarray]) -> SplitResult:
        predicted = self._predicted(cut)
        wall = time.time()
        start = time.perf_counter()
        values = dict(feeds) | self._run_head(cut, feeds)
        edge_ms = (time.perf_counter() - start) * 1e3
        link_ms = cloud_ms = 0.0
        up = down = 0
        if cut.split.tail is not None:
            sent = {name: values[name] for name in cut.split.tail_inputs}
            reply = self._http.infer(cut.model, sent, self._expected(cut, sent))
            values |= reply.outputs
            link_ms, cloud_ms = reply.wall_ms - reply.server_ms, reply.server_ms
            up, down = reply.up_bytes, reply.down_bytes
            self._learn(reply)
        total = (time.perf_counter() - start) * 1e3
        outputs = {name: values[name] for name in cut.split.outputs}
        return SplitResult(outputs, cut.id, cut.kind, edge_ms, link_ms, cloud_ms, total, up, down,
                           predicted, self.link, started=wall)

    def _predicted(self, cut: CutOption) -> float:
        link = self.link
        return cut.predicted_ms(link.uplink_mbps, link.downlink_mbps, link.rtt_ms)

    def score(self, cut: CutOption) -> float:
        """What split.yaml's objective minimises for ``cut`` at the current link estimate."""
        objective = self.plan.predicted.get("objective", "latency")
        if objective == "latency":
            return self._predicted(cut)
        remote = cut.split.tail is not None
        on_wire = cut.link_ms(self.link.uplink_mbps, self.link.downlink_mbps) if remote else 0.0
        cloud = cut.cloud_ms if remote else 0.0
        if objective == "throughput":
            return max(cut.edge_ms, on_wire, cloud)
        energy = self._energy
        waiting = on_wire + cloud + (self.link.rtt_ms if remote else 0.0)
        return energy.mj(cut.edge_ms, waiting, cut.up_bytes if remote else 0)

    def _probe_due(self) -> bool:
        return time.monotonic() - self._last_network >= self._probe_every_s

    def _run_head(self, cut: CutOption, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The head's outputs by name ({} when the cut sends the raw inputs)."""
        split = cut.split
        session = self._head(cut)
        if session is None:
            return {}
        try:
            got = session.run(list(split.head_outputs),
                              {name: feeds[name] for name in split.head_inputs})
        except KeyError as exc:
            raise UsageError(f"input {exc.args[0]!r} is missing; the model needs "
                             f"{', '.join(split.head_inputs)}") from None
        return dict(zip(split.head_outputs, got, strict=True))

    def _head(self, cut: CutOption) -> Any:
        """The cut's head session (created on first use), None when the cut has no head."""
        if cut.split.head is None:
            return None
        session = self._heads.get(cut.id)
        if session is None:
            session = self._heads[cut.id] = _session(cut.split.head, self._threads)
        return session

    def _expected(self, cut: CutOption, sent: Mapping[str, np.ndarray]) -> Expected:
        """What the reply for ``cut`` must hold: the tail's outputs as it declares them (when
        the tail is on this device), dynamic dims resolved from what is sent."""
        spec = self._tails.get(cut.id)
        if spec is None:
            spec = self._tails[cut.id] = _tail_spec(cut.split.tail)
        symbols: dict[str, int] = {}
        for name, array in sent.items():
            dims = spec.inputs.get(name, Declared("", None)).dims or ()
            for want, got in zip(dims, np.shape(array), strict=False):
                if isinstance(want, str):
                    symbols.setdefault(want, int(got))
        return Expected(tuple(cut.split.tail_outputs), spec.outputs, symbols)

    def _learn(self, reply: Reply) -> None:
        """Update the uplink estimate from one request (exponential smoothing in log space)."""
        self._last_network = time.monotonic()
        link = self.link
        on_wire = reply.wall_ms - reply.server_ms - link.rtt_ms
        on_wire -= reply.down_bytes * 8 / (link.downlink_mbps * 1e3)
        if reply.up_bytes < 2048 or on_wire <= 0.05:
            return  # too small to time: keep the estimate
        sample = reply.up_bytes * 8 / (on_wire * 1e3)
        if link.measured:
            a = self._smoothing
            sample = math.exp(a * math.log(sample) + (1 - a) * math.log(link.uplink_mbps))
        self.link = LinkEstimate(sample, link.downlink_mbps, link.rtt_ms, True)


class _Link:
    """REST, or gRPC when the server offers it and this device can speak it (``protocol``:
    auto, http or grpc). gRPC that cannot be reached falls back to REST in auto."""

    def __init__(self, url: str, token: str | None, timeout_s: float, protocol: str) -> None:
        if protocol not in ("auto", "http", "grpc"):
            raise UsageError(f"--protocol {protocol!r} is not auto, http or grpc")
        if protocol == "grpc":
            require("cloud", "grpc", "tritonclient", why="--protocol grpc")
        self._rest = HttpLink(url, token, timeout_s)
        self._protocol, self._token, self._timeout = protocol, token, timeout_s
        self._grpc: GrpcLink | None = None
        self._decided = protocol == "http"
        self.used = ""

    def close(self) -> None:
        self._rest.close()
        if self._grpc is not None:
            self._grpc.close()

    def ping(self) -> float:
        """Wall ms of a health request, over the link inferences use."""
        if not self._decided:
            self._rest.ping()
            self._decide()
        if self._grpc is not None:
            try:
                return self._grpc.ping()
            except GrpcUnreachable as exc:
                self._drop_grpc(exc)
        return self._rest.ping()

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], expect: Expected) -> Reply:
        if not self._decided:
            self.ping()
        if self._grpc is not None:
            try:
                got = self._grpc.infer(model, inputs, expect)
                self.used = "grpc"
                return got
            except GrpcUnreachable as exc:
                self._drop_grpc(exc)
        self.used = "http"
        return self._rest.infer(model, inputs, expect)

    def _decide(self) -> None:
        self._decided = True
        port = self._rest.grpc_port
        if port is not None and not self._rest.https and available():
            self._grpc = GrpcLink(self._rest.host, port, self._token, self._timeout)
        elif self._protocol == "grpc":
            raise UsageError("--protocol grpc: the server offers no gRPC, or this device has "
                             "no grpcio/tritonclient[grpc] (or the URL is https)")

    def _drop_grpc(self, exc: Exception) -> None:
        if self._protocol == "grpc":
            raise CloudUnreachable(f"cannot reach the cloud server over gRPC: {exc}") from None
        assert self._grpc is not None
        self._grpc.close()
        self._grpc = None  # REST from now on


@dataclass(frozen=True, slots=True)
class _TailSpec:
    """A tail's inputs and outputs as it declares them (empty: the tail is not on this
    device)."""

    inputs: dict[str, Declared]
    outputs: dict[str, Declared]


def _tail_spec(path: Path | None) -> _TailSpec:
    if path is None or not path.is_file():
        return _TailSpec({}, {})
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception:  # noqa: BLE001 - unreadable here: the reply is checked without it
        return _TailSpec({}, {})
    return _TailSpec({v.name: _declared(v) for v in graph.input},
                     {v.name: _declared(v) for v in graph.output})


def _declared(value: onnx.ValueInfoProto) -> Declared:
    tensor = value.type.tensor_type
    try:
        datatype = NP_TO_KSERVE.get(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name,
                                    "")
    except (KeyError, ValueError, TypeError):
        datatype = ""
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                 for d in tensor.shape.dim)
    return Declared(datatype, dims if tensor.HasField("shape") else None)


def _session(path: Path, threads: int) -> Any:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _token(token: str | None) -> str | None:
    return token or os.environ.get(TOKEN_ENV) or None


def _cuts(plan: SplitPlan) -> tuple[CutOption, ...]:
    """The precomputed cuts (a split.yaml without them has just its chosen split)."""
    if plan.cuts:
        return plan.cuts
    predicted = plan.predicted
    up = sum(int(c.get("bytes") or 0) for c in plan.cut)
    return (CutOption(id="c0", kind=str(predicted.get("kind", "split")),
                      model="tail" if plan.split.tail else "", split=plan.split,
                      edge_ms=float(predicted["edge_ms"]), cloud_ms=float(predicted["cloud_ms"]),
                      up_bytes=up, down_bytes=0),)


def _fixed_cut(cuts: tuple[CutOption, ...], cut: str | None) -> CutOption | None:
    """The cut pinned by --cut (an id, or all-edge / all-cloud), None for automatic."""
    if cut in (None, "auto"):
        return None
    for option in cuts:
        if cut in (option.id, option.kind):
            return option
    names = sorted({c.id for c in cuts} | {c.kind for c in cuts})
    raise UsageError(f"--cut {cut!r} is not a cut of this split; use auto or one of "
                     f"{', '.join(names)}")


def _initial_link(plan: SplitPlan) -> LinkEstimate:
    """The link split.yaml was planned for, until requests measure the real one."""
    p = plan.predicted
    return LinkEstimate(float(p.get("bandwidth_mbps", 10.0)),
                        float(p.get("downlink_mbps", p.get("bandwidth_mbps", 10.0))),
                        float(p.get("rtt_ms", 0.0)), False)


def _energy(plan: SplitPlan) -> Any:
    """The device energy model split.yaml was planned with (a generic board when absent)."""
    doc = plan.predicted.get("energy")
    if not isinstance(doc, dict):
        return DEFAULT_ENERGY
    return EnergyModel(float(doc["idle_w"]), float(doc["max_w"]), float(doc["tx_nj_per_bit"]),
                       bool(doc.get("assumed", False)))
