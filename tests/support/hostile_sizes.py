"""Hostile corpus cases of issue 27 (hostile_sizes); see tests/support/hostile.py.

Sizes a file declares before edge reads them: .npy/.npz headers that claim terabytes behind
16 bytes, deflate members that expand to gigabytes, inventories whose host ranges expand to
millions of hosts or whose vars nest thousands deep, baselines nested 100,000 deep or holding
a p50 that is not a time, and result/bundle/split documents whose text or numbers matplotlib
cannot draw.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from tests.support.hostile import OLD_BUNDLE, Case, tiny_model

SPLIT = Path(__file__).parents[1] / "fixtures" / "edge-0.2" / "digits-split"

# ---------------------------------------------------------------- .npy / .npz writers


def npy_bytes(shape: tuple[int, ...], descr: object = "<f4", *, fortran: bool = False,
              body: int = 16, version: int = 1) -> bytes:
    """An .npy file whose header declares ``shape`` of ``descr`` and holds ``body`` zero bytes."""
    header = (f"{{'descr': {descr!r}, 'fortran_order': {fortran!r}, 'shape': {tuple(shape)!r}, }}"
              ).encode("latin1")
    size = 2 if version == 1 else 4
    pad = -(8 + size + len(header) + 1) % 64
    header += b" " * pad + b"\n"
    return (b"\x93NUMPY" + bytes((version, 0)) + len(header).to_bytes(size, "little") + header
            + bytes(body))


def _deflate_zeros(size: int) -> bytes:
    """A raw deflate stream that expands to ``size`` zero bytes (built from one flushed MB)."""
    chunk = 1 << 20
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    segment = c.compress(bytes(chunk)) + c.flush(zlib.Z_FULL_FLUSH)
    tail = zlib.compressobj(9, zlib.DEFLATED, -15)
    rest = size % chunk
    return segment * (size // chunk) + tail.compress(bytes(rest)) + tail.flush()


def zip_bytes(members: list[tuple[str, bytes, int, int]], flags: int = 0) -> bytes:
    """A zip of (name, stored data, method 0/8, declared uncompressed size) members (CRC 0
    where the data is a crafted stream: edge must refuse before reading that far)."""
    local, central = b"", b""
    for name, data, method, usize in members:
        crc = zlib.crc32(data) if method == 0 and usize == len(data) else 0
        fields = (20, flags, method, 0, 33, crc, len(data), usize, len(name.encode()))
        central += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, *fields, 0, 0, 0, 0, 0,
                               len(local)) + name.encode()
        local += struct.pack("<4s5H3L2H", b"PK\x03\x04", *fields, 0) + name.encode() + data
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members),
                      len(central), len(local), 0)
    return local + central + end


def _stored(name: str, data: bytes) -> tuple[str, bytes, int, int]:
    return (name, data, 0, len(data))


def _nan_x(n: int = 8) -> bytes:
    from io import BytesIO

    buf = BytesIO()
    np.save(buf, np.full((n, 4), np.nan, np.float32))
    return buf.getvalue()


#: name -> (bytes of the .npy, isolated): headers whose claims the bytes behind do not hold.
def _lying_npys() -> dict[str, tuple[Callable[[], bytes], bool]]:
    return {
        "huge-f4": (lambda: npy_bytes((10**11, 4)), False),
        "huge-f8": (lambda: npy_bytes((10**11, 4), "<f8"), False),
        "huge-i8": (lambda: npy_bytes((10**12, 4), "<i8"), False),
        "huge-u1": (lambda: npy_bytes((10**13, 4), "|u1"), False),
        "huge-bool": (lambda: npy_bytes((10**13, 4), "|b1"), False),
        "huge-c16": (lambda: npy_bytes((10**11, 4), "<c16"), False),
        "huge-f2-big-endian": (lambda: npy_bytes((10**11, 4), ">f2"), False),
        "huge-fortran": (lambda: npy_bytes((4, 10**11), fortran=True), False),
        "huge-5d": (lambda: npy_bytes((1000, 1000, 1000, 1000, 4)), False),
        "huge-v2": (lambda: npy_bytes((10**11, 4), version=2), False),
        "huge-unicode": (lambda: npy_bytes((10**11, 4), "<U16"), False),
        "negative-huge": (lambda: npy_bytes((-(10**11), -4)), False),
    }


#: name -> (.npz bytes, isolated).
def _lying_npzs() -> dict[str, tuple[Callable[[], bytes], bool]]:
    return {
        "member-huge": (lambda: zip_bytes([_stored("x.npy", npy_bytes((10**11, 4)))]), False),
        "member-huge-fortran": (lambda: zip_bytes(
            [_stored("x.npy", npy_bytes((4, 10**11), "<f8", fortran=True))]), False),
        "labels-huge": (lambda: zip_bytes([_stored("x.npy", _nan_x()),
                                           _stored("labels.npy", npy_bytes((10**12,), "<i8"))]),
                        False),
        "extra-member-huge": (lambda: zip_bytes([_stored("x.npy", _nan_x()),
                                                 _stored("junk.npy", npy_bytes((10**11, 4)))]),
                              False),
        "method-99": (lambda: zip_bytes([("x.npy", _nan_x(), 99, len(_nan_x()))]), False),
        "encrypted": (lambda: zip_bytes([_stored("x.npy", _nan_x())], flags=1), False),
        "deflate-bomb": (lambda: zip_bytes([_bomb("x.npy", (2**28, 3))]), True),
        "extra-deflate-bomb": (lambda: zip_bytes([_stored("x.npy", _nan_x()),
                                                  _bomb("junk.npy", (2**28, 3))]), True),
    }


def _bomb(name: str, shape: tuple[int, ...]) -> tuple[str, bytes, int, int]:
    """A deflate member that expands to a genuine .npy of ``shape`` float32 zeros (GBs)."""
    head = npy_bytes(shape, body=0)
    size = int(np.prod(shape)) * 4
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH) + _deflate_zeros(size)
    return (name, data, 8, len(head) + size)


def _data_argv(flag: str, name: str) -> tuple[str, ...]:
    if flag == "run-split":
        return ("run-split", "{d}/s", "--url", "http://127.0.0.1:9", "--input", f"{{d}}/{name}")
    return ("optimize", "{d}/m.onnx", "--profile", "x86-64", flag, f"{{d}}/{name}",
            "-o", "{d}/out")


def _data_make(flag: str, name: str, content: Callable[[], bytes]) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        if flag == "run-split":
            shutil.copytree(SPLIT, d / "s")
        else:
            tiny_model(d / "m.onnx")
        (d / name).write_bytes(content())
    return make


def _data_cases() -> Iterator[Case]:
    for suffix, files in (("npy", _lying_npys()), ("npz", _lying_npzs())):
        for kind, (content, isolated) in files.items():
            for flag in ("--eval",) if isolated else ("--calib", "--eval"):
                yield _data_case(suffix, kind, flag, content, isolated)
    for kind in ("huge-f4", "huge-f8", "huge-fortran", "huge-c16", "huge-v2"):
        yield _data_case("npy", kind, "run-split", *_lying_npys()[kind])


def _data_case(suffix: str, kind: str, flag: str, content: Callable[[], bytes],
               isolated: bool) -> Case:
    name = f"d.{suffix}"
    return Case(name=f"sizes {suffix} {kind} {flag.lstrip('-')}", argv=_data_argv(flag, name),
                make=_data_make(flag, name, content), isolated=isolated)


#: name -> (suffix, flag, content): headers of 0 bytes that claim 10**18 samples of no values
#: (a model of input [N, k] takes them), and images that are FIFOs.
def _zero_width() -> dict[str, tuple[str, str, Callable[[], bytes]]]:
    def member(shape: tuple[int, ...]) -> Callable[[], bytes]:
        return lambda: zip_bytes([_stored("x.npy", npy_bytes(shape, body=0))])
    return {  # --eval needs a pinned model: --calib pins it (optimize, partition)
        "zero-width": ("npy", "--calib", lambda: npy_bytes((10**18, 0), body=0)),
        "zero-width f8": ("npy", "--calib", lambda: npy_bytes((10**18, 0), "<f8", body=0)),
        "zero-width 3-d": ("npy", "--calib", lambda: npy_bytes((10**18, 1, 0), body=0)),
        "zero-width member": ("npz", "--calib", member((10**18, 0))),
        "zero-width partition": ("npy", "partition", lambda: npy_bytes((10**18, 0), body=0)),
    }


def _zero_width_cases() -> Iterator[Case]:
    for kind, (suffix, flag, content) in _zero_width().items():
        def make(d: Path, suffix: str = suffix, content: Callable[[], bytes] = content) -> None:
            tiny_model(d / "m.onnx", dims=("N", "k"))  # type: ignore[arg-type]
            (d / f"d.{suffix}").write_bytes(content())
        argv = (("partition", "{d}/m.onnx", "--profile", "rpi4", "--cloud", "cloud-c7i",
                 "--calib", f"{{d}}/d.{suffix}", "-o", "{d}/out") if flag == "partition"
                else _data_argv(flag, f"d.{suffix}"))
        yield Case(name=f"sizes {suffix} {kind}", argv=argv, make=make, isolated=True)
    for flag in ("--calib", "--eval"):
        def fifo(d: Path) -> None:
            tiny_model(d / "m.onnx", dims=(1, 3, 8, 8))
            (d / "images").mkdir()
            os.mkfifo(d / "images" / "a.png")
        # isolated: in-process, the corpus's 30 s alarm raises TimeoutError, an OSError that
        # the image reader would report as one line: the hang would pass
        yield Case(name=f"sizes images fifo {flag.lstrip('-')}", make=fifo,
                   argv=_data_argv(flag, "images"), isolated=True)


def cases() -> Iterator[Case]:
    yield from _data_cases()
    yield from _zero_width_cases()
    yield from _results_cases()
    yield from _baseline_cases()
    yield from _inventory_cases()
    yield from _split_cases()


# ---------------------------------------------------------------- baselines

TINY_SHA = "969e8eadd5e7c109bbdd58f79257fe1eaeff02f4c0d607bda7443e24e70fee20"  # tiny.bundle's


def report_doc(p50: object = 1.5, **bench: object) -> dict[str, object]:
    """An `edge bench --json` report of tiny.bundle's chosen artifact, p50 as given."""
    return {"target": "local", "transport": "local", "profile": "x86-64",
            "candidate": "onnxruntime-int8", "artifact_sha256": TINY_SHA, "release": "r1",
            "bench": {"where": "local", "runtime": "onnxruntime", "runs": 5, "warmup": 1,
                      "threads": 1, "p50_ms": p50, "p90_ms": 1.0, "p99_ms": 1.0,
                      "mean_ms": 1.0, **bench}}


def _deep(kind: str, depth: int) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    return '{"a": ' * depth + "1" + "}" * depth


def _bad_baselines() -> dict[str, str]:
    """name -> the text of a --baseline FILE."""
    texts = {f"p50-{name}": json.dumps(report_doc(value)) for name, value in (
        ("nan", float("nan")), ("inf", float("inf")), ("minus-inf", float("-inf")),
        ("zero", 0), ("minus-one", -1), ("minus-zero", -0.0), ("minus-huge", -1e308),
        ("nan-text", "nan"), ("inf-text", "Infinity"), ("minus-inf-text", "-inf"),
        ("zero-text", "0"), ("minus-text", "-5.5"), ("huge", 1e308),
        ("max-float", 1.7976931348623157e308), ("1e10", 1e10), ("over-max-ms", 1.000001e9))}
    plain = json.dumps(report_doc())
    texts |= {
        "p50-overflow": plain.replace('"p50_ms": 1.5', '"p50_ms": 1e400'),
        "p50-huge-int": plain.replace('"p50_ms": 1.5', '"p50_ms": -' + "9" * 400),
        "deep-list": _deep("list", 100_000),
        "deep-object": _deep("object", 100_000),
        "deep-in-device": plain.replace('"p50_ms"', '"device": ' + _deep("object", 50_000)
                                        + ', "p50_ms"'),
        "deep-in-compared": plain.replace('"release"', '"compared": ' + _deep("list", 50_000)
                                          + ', "release"'),
    }
    return texts


def _baseline_cases() -> Iterator[Case]:
    for kind, text in _bad_baselines().items():
        def make(d: Path, text: str = text) -> None:
            shutil.copytree(OLD_BUNDLE, d / "b.bundle")
            (d / "base.json").write_text(text)
        yield Case(name=f"gate {kind}", make=make,
                   argv=("bench", "{d}/b.bundle", "--profile", "x86-64", "--baseline",
                         "{d}/base.json"))


# ---------------------------------------------------------------- inventories


def children_bomb(levels: int) -> str:
    """Groups whose children are two aliases of the group below: 2**levels paths."""
    lines = ["all:", "  children:", "    g0: &g0", "      hosts:", "        pi:"]
    for i in range(1, levels + 1):
        lines += [f"    g{i}: &g{i}", "      children:", f"        a{i}: *g{i - 1}",
                  f"        b{i}: *g{i - 1}"]
    return "\n".join(lines) + "\n"


def _nested_children(depth: int) -> str:
    body = "".join(f"{'  ' * (2 * i + 1)}children:\n{'  ' * (2 * i + 2)}g{i}:\n"
                   for i in range(depth))
    return "all:\n" + body


#: name -> (file name, text, isolated): inventories whose sizes are only known once expanded.
def _big_inventories() -> dict[str, tuple[str, str, bool]]:
    deep_list = "[" * 3000 + "]" * 3000
    deep_map = "{a: " * 3000 + "1" + "}" * 3000
    return {
        "range-huge": ("hosts.yml", "all:\n  hosts:\n    pi[0:99999999]:\n", True),
        "range-huge-ini": ("hosts.ini", "[web]\npi[0:99999999]\n", True),
        "range-in-range": ("hosts.ini", "[web]\npi[[0:0]:99999999]\n", True),
        "range-in-range-end": ("hosts.yml", "all:\n  hosts:\n    pi[0:[9:9]9999999]:\n", True),
        "range-in-range-start": ("hosts.ini", "[web]\npi[[1:1]0:99999999]\n", True),
        "range-beyond-int64": ("hosts.ini", "[web]\npi[0:99999999999999999999999]\n", False),
        "range-product": ("hosts.yml", "all:\n  hosts:\n    n[0:9999][0:9999]:\n", True),
        "range-20k": ("hosts.yml", "all:\n  hosts:\n    pi[0:19999]:\n", False),
        "range-step": ("hosts.ini", "[web]\npi[0:999999:10]\n", False),
        "range-letters": ("hosts.ini", "[web]\nn[a:z][a:z][a:z]\n", False),
        "range-lines": ("hosts.ini", "[web]\n" + "".join(f"h{i}[0:999]\n" for i in range(11)),
                        False),
        "range-repeated": ("hosts.ini", "".join(f"[g{i}]\npi[0:8999]\n" for i in range(12)),
                           False),
        "vars-deep-list": ("hosts.yml", f"all:\n  hosts:\n    pi:\n      v: {deep_list}\n",
                           False),
        "vars-deep-map": ("hosts.yml", f"all:\n  hosts:\n    pi:\n      v: {deep_map}\n", False),
        "group-vars-deep": ("hosts.yml", f"all:\n  vars:\n    v: {deep_list}\n  hosts:\n"
                            "    pi:\n", False),
        "json-vars-deep": ("hosts.json", '{"all": {"hosts": {"pi": {"v": '
                           + "[" * 3000 + "]" * 3000 + "}}}}", False),
        "children-deep": ("hosts.yml", _nested_children(2000), False),
        "children-bomb": ("hosts.yml", children_bomb(26), False),
    }


def _inventory_cases() -> Iterator[Case]:
    for kind, (name, text, isolated) in _big_inventories().items():
        def make(d: Path, name: str = name, text: str = text) -> None:
            shutil.copytree(OLD_BUNDLE, d / "b.bundle")
            (d / name).write_text(text)
        yield Case(name=f"sizes inventory {kind}", make=make, isolated=isolated,
                   argv=("deploy", "{d}/b.bundle", "--inventory", f"{{d}}/{name}",
                         "--profile", "x86-64"))


# ---------------------------------------------------------------- results folders


#: name -> (folder reported, FIFO made, a good kept file beside it): reading a FIFO hangs.
RESULTS_FIFOS = {
    "fifo": ("res", "res/pi/abc.jsonl", None),
    "fifo device-folder": ("res/pi", "res/pi/abc.jsonl", None),
    "fifo beside-kept": ("res", "res/pi/zz.jsonl", "res/pi/aa.jsonl"),
}


def _results_cases() -> Iterator[Case]:
    for kind, (folder, fifo, good) in RESULTS_FIFOS.items():
        def make(d: Path, fifo: str = fifo, good: str | None = good) -> None:
            (d / fifo).parent.mkdir(parents=True)
            os.mkfifo(d / fifo)
            if good:
                (d / good).write_text(json.dumps({
                    "version": 1, "kept_at": "2026-01-01T10:00:00+0000", "regressed": False,
                    "report": report_doc()}) + "\n")
        yield Case(name=f"report results {kind}", make=make,
                   argv=("report", f"{{d}}/{folder}", "-o", "{d}/r.html"))


# ---------------------------------------------------------------- split documents


#: name -> (text in the fixture's split.yaml, its replacement): numbers no plan holds.
SPLIT_EDITS = {
    "cut-edge-nan": ("  edge_ms: 0.088", "  edge_ms: .nan"),
    "cut-edge-inf": ("  edge_ms: 0.088", "  edge_ms: .inf"),
    "cut-cloud-inf": ("  cloud_ms: 0.0319\n  up_bytes", "  cloud_ms: -.inf\n  up_bytes"),
    "cut-up-huge": ("  up_bytes: 256", "  up_bytes: " + "9" * 400),
    "cut-down-huge": ("  down_bytes: 40", f"  down_bytes: {2**60}"),
    "predicted-edge-nan": ("predicted:\n  edge_ms: 0.0\n", "predicted:\n  edge_ms: .nan\n"),
    "predicted-total-inf": ("  total_ms: 1.0556", "  total_ms: .inf"),
    "predicted-rtt-inf": ("  rtt_ms: 1.0", "  rtt_ms: .inf"),
    "band-max-inf": ("  max_mbps: 5.6234", "  max_mbps: .inf"),
    "band-predicted-nan": ("  predicted_ms: 0.088", "  predicted_ms: .nan"),
    "energy-idle-inf": ("    idle_w: 0.6", "    idle_w: .inf"),
}


def split_make(old: str, new: str) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        shutil.copytree(SPLIT, d / "s")
        text = (d / "s" / "split.yaml").read_text()
        assert old in text, old
        (d / "s" / "split.yaml").write_text(text.replace(old, new, 1))
    return make


def _split_cases() -> Iterator[Case]:
    commands = {"report": ("report", "{d}/s", "-o", "{d}/r.html"),
                "run-split": ("run-split", "{d}/s", "--url", "http://127.0.0.1:9")}
    for kind, (old, new) in SPLIT_EDITS.items():
        for command, argv in commands.items():
            yield Case(name=f"report split {kind} {command}", argv=argv,
                       make=split_make(old, new))
