"""Hostile corpus cases of issue 27 (hostile_disk); see tests/support/hostile.py.

* ``disk ...``: every command that writes an output, pointed at a real tmpfs that is full or
  nearly so (and edge's cache on one): one ``no space left`` line, exit 2, and the full file
  system holds nothing but its filler afterwards (checked when the case's ``around`` exits).
* ``release ...``: bundles whose artifact file name is not a plain name with its runtime's
  suffix, refused when the bundle is read (exit 2), before any device is reached.
* ``graph ...``: valid models whose If/Loop branches read outer-scope values, partitioned
  into a full folder: the split itself must work (a crash would be exit 4), then the disk is
  named.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from edge.core.intake.common import cached_path
from tests.support.hostile import OLD_BUNDLE, Case, tiny_model
from tests.support.subgraphs import if_reads_outer, loop_reads_outer, save

#: The tmpfs's size; what is left free is each case's fill level.
DISK_KB = 256
FILLER = "someone-elses-data"
#: A profile of one runtime (ONNX Runtime): an optimize here takes seconds, not onnx2tf's 20.
ORT_ONLY = "version: 1\nid: ort-only\nextends: x86-64\nruntimes: [onnxruntime]\n"


@contextlib.contextmanager
def full_disk(leave: int) -> Iterator[Path]:
    """A fresh tmpfs of DISK_KB, filled (by a file that is not edge's) to ``leave`` bytes free;
    on leaving, it must hold the filler alone: no output, no staging, half-written or whole."""
    mount = Path(tempfile.mkdtemp(prefix="edge-full-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_KB}k,mode=0777", "tmpfs",
                           str(mount)], capture_output=True, text=True, check=False)
    if done.returncode != 0:  # never a silent skip: CI runs as root, where this works
        mount.rmdir()
        raise AssertionError(f"cannot mount a tmpfs for the disk-full cases: {done.stderr}")
    try:
        fill(mount / FILLER, leave)
        yield mount
        left = sorted(p.name for p in mount.iterdir())
        assert left == [FILLER], f"a command on a full disk left {left} in {mount}"
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        mount.rmdir()


def fill(filler: Path, leave: int) -> None:
    stat = os.statvfs(filler.parent)
    left = stat.f_bavail * stat.f_frsize - leave
    with open(filler, "wb") as handle:
        while left > 0:
            left -= handle.write(b"\0" * min(left, 1 << 16))


def _output_on(leave: int) -> Callable[[Path], contextlib.AbstractContextManager[Mapping[str,
                                                                                       str]]]:
    @contextlib.contextmanager
    def around(folder: Path) -> Iterator[Mapping[str, str]]:
        with full_disk(leave) as mount:
            yield {"full": str(mount)}
    return around


def _cache_on(leave: int) -> Callable[[Path], contextlib.AbstractContextManager[Mapping[str,
                                                                                      str]]]:
    """EDGE_CACHE_DIR on the full disk (the output on a healthy one, in the case's folder
    would change it: the output goes to the full disk too)."""
    @contextlib.contextmanager
    def around(folder: Path) -> Iterator[Mapping[str, str]]:
        saved = os.environ.get("EDGE_CACHE_DIR")
        with full_disk(leave) as mount:
            os.environ["EDGE_CACHE_DIR"] = str(mount / "cache")
            try:
                yield {"full": str(mount)}
            finally:
                os.environ["EDGE_CACHE_DIR"] = saved or ""
                shutil.rmtree(mount / "cache", ignore_errors=True)  # what a cache keeps is fine
    return around


def _inputs(folder: Path) -> None:
    """m.onnx (a tiny model), ort.yaml (one runtime), b.bundle (edge 0.1's)."""
    tiny_model(folder / "m.onnx")
    (folder / "ort.yaml").write_text(ORT_ONLY)
    shutil.copytree(OLD_BUNDLE, folder / "b.bundle")


#: command -> argv writing its output under {full}
WRITERS: dict[str, tuple[str, ...]] = {
    "optimize": ("optimize", "{d}/m.onnx", "--profile", "{d}/ort.yaml", "-o", "{full}/out"),
    "optimize-nested": ("optimize", "{d}/m.onnx", "--profile", "{d}/ort.yaml", "-o",
                        "{full}/a/b/out.bundle"),
    "deploy": ("deploy", "{d}/m.onnx", "--profile", "{d}/ort.yaml", "-o", "{full}/dep"),
    "report": ("report", "{d}/b.bundle", "-o", "{full}/r.html"),
    "report-nested": ("report", "{d}/b.bundle", "-o", "{full}/x/r.html"),
    "partition": ("partition", "{d}/m.onnx", "--profile", "rpi4", "--cloud", "cloud-c7i",
                  "-o", "{full}/split"),
    "serve-cloud": ("serve-cloud", "{d}/m.onnx", "--export-repository", "{full}/repo"),
    "serve-cloud-nested": ("serve-cloud", "{d}/m.onnx", "--export-repository",
                           "{full}/models/repo"),
}
#: bytes left free: none, one page, a few pages (some writes pass, a later one fails)
LEVELS = {"0": 0, "4k": 4096, "12k": 12288}
#: command -> the fill levels it is tried at (an optimize or a report takes seconds: fewer)
TRIED = {"optimize": ("0", "12k"), "optimize-nested": ("4k",), "deploy": ("4k",),
         "report": ("0",), "report-nested": ("4k",)}


def _disk_cases() -> Iterator[Case]:
    for command, argv in WRITERS.items():
        for level in TRIED.get(command, tuple(LEVELS)):
            yield Case(f"disk {command} full {level}", argv, _inputs,
                       around=_output_on(LEVELS[level]))
    for command in ("optimize", "partition"):
        yield Case(f"disk {command} cache full", WRITERS[command], _inputs,
                   around=_cache_on(0))


# ---------------------------------------------------------------- release


#: name -> the chosen artifact's file name in the bundle (each refused when it is read)
NAMES = {
    "no suffix": "model",
    "command substitution": "$(touch pwned).onnx",
    "newline": "a\nb.onnx",
    "backtick": "a`id`.onnx",
    "right-to-left override": "a\u202exnno.onnx",
    "leading dash": "-rf.onnx",
    "leading dot": ".hidden.onnx",
    "very long": "x" * 200 + ".onnx",
    "cyrillic lookalike": "mod\u0435l.onnx",
    "fullwidth dot": "model\uff0eonnx",
    "trailing space": "model.onnx ",
    "space inside": "my model.onnx",
    "semicolon": "a;reboot.onnx",
    "another runtime's suffix": "model.tflite",
    "unknown suffix": "model.exe",
    "upper-case suffix": "model.ONNX",
}


def _renamed(name: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        bundle = Path(shutil.copytree(OLD_BUNDLE, folder / "b.bundle"))
        manifest = json.loads((bundle / "manifest.json").read_text())
        chosen = next(c for c in manifest["candidates"] if c["status"] == "chosen")
        (bundle / chosen["artifact"]["file"]).rename(bundle / "artifacts" / name)
        chosen["artifact"]["file"] = f"artifacts/{name}"
        (bundle / "manifest.json").write_text(json.dumps(manifest))
    return make


def _release_cases() -> Iterator[Case]:
    for label, name in NAMES.items():
        make = _renamed(name)
        yield Case(f"release {label} deploy local", ("deploy", "{d}/b.bundle", "--profile",
                                                     "x86-64"), make)
        yield Case(f"release {label} deploy dry-run", ("deploy", "{d}/b.bundle", "--dry-run"),
                   make)


# ---------------------------------------------------------------- graph


GRAPHS: dict[str, Callable[[], object]] = {
    **{f"if {kind}": (lambda kind=kind: if_reads_outer(kind))
       for kind in ("two", "input", "weight", "nested", "only-outer")},
    "loop": loop_reads_outer,
}


def _split_beside(folder: Path) -> contextlib.AbstractContextManager[Mapping[str, str]]:
    """{ok}: a folder with room (the split goes there), {full}: a full disk (the report)."""
    return _beside(folder)


@contextlib.contextmanager
def _beside(folder: Path) -> Iterator[Mapping[str, str]]:
    ok = Path(tempfile.mkdtemp(prefix="edge-room-"))
    try:
        with full_disk(0) as mount:
            yield {"full": str(mount), "ok": str(ok)}
    finally:
        shutil.rmtree(ok)


def _graph_cases() -> Iterator[Case]:
    """The split must succeed (before the fix it crashed: exit 4); its report then meets the
    full disk (exit 2)."""
    for label, build in GRAPHS.items():
        def make(folder: Path, build: Callable[[], object] = build) -> None:
            save(build(), folder / "m.onnx")  # type: ignore[arg-type]
        for bandwidth in ("0.1", "10000") if label == "if two" else ("0.1",):
            yield Case(f"graph {label} partition bandwidth {bandwidth}",
                       ("partition", "{d}/m.onnx", "--profile", "rpi4", "--cloud", "cloud-c7i",
                        "--bandwidth", bandwidth, "-o", "{ok}/split", "--report",
                        "{full}/r.html"),
                       make, around=_split_beside)


# ---------------------------------------------------------------- cache entries


def _dynamic_model(folder: Path) -> None:
    """m.onnx with a dynamic batch dim: ``--shape x=1,4`` makes a pinned copy in the cache."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, folder / "m.onnx")


def _torch_model(folder: Path) -> None:
    """m.pt: a TorchScript Linear(4, 4) (read as data, no --trust-model-code needed)."""
    import torch

    torch.jit.save(torch.jit.script(torch.nn.Linear(4, 4)), str(folder / "m.pt"))


def _entry(folder: Path, cache: Path, kind: str) -> Path:
    """The reference cache entry edge keeps for the case's model pinned to (1, 4)."""
    source, name = (folder / "m.onnx", "x") if kind == "onnx" else (folder / "m.pt", "input")
    return cached_path(source, cache / "reference", kind, {name: (1, 4)}, {})


def _broken(entry: Path) -> bool:
    """Whether a cache entry is there but does not read as a model (empty, torn)."""
    if not entry.is_file():
        return False
    try:
        return not onnx.load(str(entry), load_external_data=False).graph.output
    except Exception:  # noqa: BLE001 - protobuf's own errors for a torn file
        return True


@contextlib.contextmanager
def _cache_env(cache: Path) -> Iterator[None]:
    saved = os.environ.get("EDGE_CACHE_DIR")
    os.environ["EDGE_CACHE_DIR"] = str(cache)
    try:
        yield
    finally:
        os.environ["EDGE_CACHE_DIR"] = saved or ""
        shutil.rmtree(cache, ignore_errors=True)


def _poisoned(kind: str, cut: int | None) -> Callable[[Path], contextlib.AbstractContextManager[
        Mapping[str, str]]]:
    """A cache whose reference entry an earlier run left broken: empty (``cut`` None) or a
    whole entry cut after ``cut`` bytes. The run must treat it as absent, make it again (a
    warning, exit 0) and leave a whole entry."""
    @contextlib.contextmanager
    def around(folder: Path) -> Iterator[Mapping[str, str]]:
        with _cache_env(Path(tempfile.mkdtemp(prefix="edge-cache-"))):
            from edge.core.cache import cache_root

            entry = _entry(folder, cache_root(), kind)
            entry.parent.mkdir(parents=True)
            whole = onnx.load(str(folder / "m.onnx")).SerializeToString() if cut else b""
            entry.write_bytes(whole[:cut])
            yield {}
            assert not _broken(entry), f"the broken cache entry {entry} is still there"
    return around


@contextlib.contextmanager
def _full_cache(folder: Path) -> Iterator[Mapping[str, str]]:
    """The cache on a full disk: after the run (exit 2) no broken entry may be left in it."""
    with full_disk(0) as mount, _cache_env(mount / "cache"):
        yield {}
        broken = [p for p in (mount / "cache").rglob("*") if p.is_file()
                  and (p.stat().st_size == 0 or (p.suffix == ".onnx" and _broken(p)))]
        assert not broken, f"a full cache kept broken entries: {broken}"


def _cache_cases() -> Iterator[Case]:
    inspect_onnx = ("inspect", "{d}/m.onnx", "--shape", "x=1,4")
    yield Case("disk cache-empty onnx reference", inspect_onnx, _dynamic_model, (0,),
               _poisoned("onnx", None))
    yield Case("disk cache-torn onnx reference", inspect_onnx, _dynamic_model, (0,),
               _poisoned("onnx", 40))
    yield Case("disk cache-empty onnx reference optimize", (
        "optimize", "{d}/m.onnx", "--shape", "x=1,4", "--profile", "{d}/ort.yaml", "-o",
        "{d}/../out"), _ort_too(_dynamic_model), (0,), _poisoned("onnx", None))
    inspect_torch = ("inspect", "{d}/m.pt", "--shape", "input=1,4")
    yield Case("disk cache-empty torch reference", inspect_torch, _torch_model, (0,),
               _poisoned("torch", None))
    yield Case("disk cache-full torch export", inspect_torch, _torch_model, (2,), _full_cache)


def _ort_too(make: Callable[[Path], None]) -> Callable[[Path], None]:
    def both(folder: Path) -> None:
        make(folder)
        (folder / "ort.yaml").write_text(ORT_ONLY)
    return both


def cases() -> Iterator[Case]:
    yield from _disk_cases()
    yield from _cache_cases()
    yield from _release_cases()
    yield from _graph_cases()
