"""A generated corpus of hostile inputs for every command (issue 14).

Each case is a command line and the files it names, made in a fresh folder: models that are
not models or that no runtime can run, data with NaN or the wrong shape, profiles, manifests,
split files and inventories an attacker or an unlucky user wrote, numbers and host strings
that make no sense. Every one must end in one ``error:`` line with exit 2 (3 for a device or
transport), no traceback, no "internal error", nothing written outside the case's folder and
no change on the (local) device.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import shutil
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

OLD_BUNDLE = Path(__file__).parents[1] / "fixtures" / "edge-0.1" / "tiny.bundle"
#: TEST-NET-1: nothing answers, so a command that got as far as connecting would exit 3.
NOWHERE = "nobody@192.0.2.1"


#: Models ``inspect`` still describes (exit 0, with a warning that edge cannot run them).
DESCRIBED = ("string-input.onnx", "huge-dims.onnx", "opset-99.onnx", "custom-domain-op.onnx",
             "shape-mismatch.onnx")


#: The corpus's further classes (issue 27), one module each under tests/support, each with
#: ``cases() -> Iterator[Case]``.
MODULES = ("hostile_code", "hostile_home", "hostile_sizes", "hostile_client", "hostile_disk",
           "hostile_borders")


def _nothing(folder: Path) -> AbstractContextManager[Mapping[str, str]]:
    return contextlib.nullcontext({})


@dataclass(frozen=True, slots=True)
class Case:
    """``argv`` (``{d}`` is the case's folder) after ``make(folder)`` wrote its files; exit 0
    is expected only of a command that describes the input and warns.

    ``around(folder)`` is entered for the command's run (a hostile server, a full disk): the
    mapping it yields adds placeholders (``{url}``) to ``argv``. An ``isolated`` case runs as a
    child process whose memory is limited (``tests/test_hostile_corpus.py``), for inputs that
    would otherwise grow the test process without bound. ``says``: what its one error line
    must say, for a case whose failure was a misleading message or a limit it must name."""

    name: str
    argv: tuple[str, ...]
    make: Callable[[Path], None] = lambda folder: None
    status: tuple[int, ...] = (2,)
    around: Callable[[Path], AbstractContextManager[Mapping[str, str]]] = _nothing
    isolated: bool = False
    says: str = ""  # what the error line must say (a misleading message is a failure)

    def faults(self, status: int, stderr: str) -> list[str]:
        """How a run's exit status and stderr break the corpus's rules (none: they keep them):
        the case's status, no traceback or internal error, a warning when it describes (exit
        0), else one ``error:`` line saying ``says``. Used by the corpus test and by
        bench/corpus_before.py."""
        lines = [line for line in stderr.splitlines() if line.startswith("error:")]
        why = [f"exit {status}"] if status not in self.status else []
        if "Traceback" in stderr or "internal error" in stderr:
            why.append("a traceback or internal error")
        if status == 0 and "warning" not in stderr.lower():
            why.append("exit 0 without a warning")
        if status != 0 and (len(lines) != 1 or self.says not in lines[0]):
            why.append(f"its line: {lines[:1]}")
        return why


# ---------------------------------------------------------------- files


def tiny_model(path: Path, dtype: int = TensorProto.FLOAT, dims: tuple[int, ...] = (1, 4),
               opset: int = 17, op: str = "Relu") -> Path:
    x = helper.make_tensor_value_info("x", dtype, list(dims))
    y = helper.make_tensor_value_info("y", dtype, list(dims))
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _image_model(path: Path) -> Path:
    return tiny_model(path, dims=(1, 3, 8, 8))


def png_header(path: Path, width: int, height: int) -> None:
    """A PNG that declares width x height pixels and holds none (a decompression bomb's head)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b""))


def _external_data_model(path: Path) -> None:
    """An initializer whose external data is ../../secret (outside the model's folder)."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.0] * 4)
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "../../secret.bin"), ("offset", "0"), ("length", "16")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())


def _custom_domain_model(path: Path) -> None:
    """An op of a domain no runtime here knows (com.acme:Bar): onnx reads it, ORT cannot."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Bar", ["x"], ["y"], domain="com.acme")], "g",
                              [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.acme", 1)])
    model.ir_version = 8
    onnx.save(model, path)


def _shape_mismatch_model(path: Path) -> None:
    """x[1,4] @ w[5,3]: a graph whose shapes cannot fit (ORT refuses it at load)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    w = helper.make_tensor("w", TensorProto.FLOAT, [5, 3], [0.0] * 15)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def _bad_models() -> dict[str, Callable[[Path], None]]:
    """name -> writes {folder}/m.<suffix> (the suffix is in the name)."""
    return {
        "empty.onnx": lambda p: p.write_bytes(b""),
        "random.onnx": lambda p: p.write_bytes(bytes(range(256)) * 8),
        "text.onnx": lambda p: p.write_text("this is not a model\n"),
        "truncated.onnx": lambda p: p.write_bytes(
            tiny_model(p.with_name("full.onnx")).read_bytes()[:40]),
        "string-input.onnx": lambda p: tiny_model(p, TensorProto.STRING, (1,), op="Identity"),
        "huge-dims.onnx": lambda p: tiny_model(p, dims=(100000, 100000, 100000)),
        "opset-99.onnx": lambda p: tiny_model(p, opset=99),
        "unknown-op.onnx": lambda p: tiny_model(p, op="NoSuchOp"),
        "custom-domain-op.onnx": _custom_domain_model,
        "shape-mismatch.onnx": _shape_mismatch_model,
        "external-data-escape.onnx": _external_data_model,
        "directory.onnx": lambda p: p.mkdir(),
        "garbage.tflite": lambda p: p.write_bytes(b"TFL3" + bytes(200)),
        "empty.tflite": lambda p: p.write_bytes(b""),
        "garbage.h5": lambda p: p.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100)),
        "garbage.keras": lambda p: p.write_bytes(b"PK\x03\x04" + bytes(100)),
        "unknown.pt": lambda p: p.write_bytes(b"\x80\x02not a model"),
        "model.txt": lambda p: p.write_text("hello"),
    }


def _bad_data(model_input: tuple[int, ...] = (1, 4)) -> dict[str, Callable[[Path], None]]:
    """name -> writes {folder}/d.<suffix> for a one-input model of ``model_input``."""
    n = 8
    good = np.random.default_rng(0).random((n, *model_input[1:]), dtype=np.float32)

    def poisoned(value: float) -> Callable[[Path], None]:
        def make(p: Path) -> None:
            bad = good.copy()
            bad[3, 0] = value
            np.save(p, bad)
        return make

    return {
        "nan.npy": poisoned(np.nan), "inf.npy": poisoned(np.inf), "huge.npy": poisoned(3e38),
        "all-nan.npy": lambda p: np.save(p, np.full_like(good, np.nan)),
        "wrong-shape.npy": lambda p: np.save(p, good.reshape(n, 2, 2)),
        "empty.npy": lambda p: np.save(p, np.zeros((0, *model_input[1:]), np.float32)),
        "scalar.npy": lambda p: np.save(p, np.float32(1.0)),
        "strings.npy": lambda p: np.save(p, np.array([["a"] * model_input[1]] * n)),
        "complex.npy": lambda p: np.save(p, good.astype(np.complex64)),
        "garbage.npy": lambda p: p.write_bytes(b"\x93NUMPY garbage"),
        "pickle.npy": lambda p: np.save(p, np.array([{"a": 1}] * n, dtype=object),
                                        allow_pickle=True),
        "missing-key.npz": lambda p: np.savez(p, other=good),
        "labels-nan.npz": lambda p: np.savez(p, x=good, labels=np.full(n, np.nan)),
        "labels-negative.npz": lambda p: np.savez(p, x=good, labels=np.full(n, -7)),
        "labels-count.npz": lambda p: np.savez(p, x=good, labels=np.zeros(n + 3)),
        "labels-3d.npz": lambda p: np.savez(p, x=good, labels=np.zeros((n, 2, 2))),
        "labels-fraction.npz": lambda p: np.savez(p, x=good, labels=np.full(n, 0.5)),
        "garbage.npz": lambda p: p.write_bytes(b"PK\x03\x04garbage"),
        "data.csv": lambda p: p.write_text("1,2,3\n"),
        "missing.npy": lambda p: None,
    }


def _bad_images() -> dict[str, Callable[[Path], None]]:
    """name -> fills the folder {folder}/images for an image model [1, 3, 8, 8]."""
    def one(content: bytes) -> Callable[[Path], None]:
        return lambda p: (p / "a.png").write_bytes(content)
    return {
        "no-images": lambda p: (p / "readme.txt").write_text("no images"),
        "truncated-png": one(b"\x89PNG\r\n\x1a\nnot really"),
        "text-as-jpg": lambda p: (p / "a.jpg").write_text("not a jpeg"),
        "bomb": lambda p: png_header(p / "a.png", 20000, 20000),
        "zero-size": one(b""),
    }


PROFILE_BASE = "extends: x86-64\nid: bad\n"


def _bad_profiles() -> dict[str, str]:
    """name -> YAML text of {folder}/p.yaml (``SECRET`` is replaced by a file outside)."""
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    return {
        "garbage": "{{{{ not yaml ::",
        "list": "- a\n- b\n",
        "scalar": "just a string\n",
        "empty": "",
        "binary": "\x00\x01\x02\x03",
        "extends-absolute": "extends: SECRET\nid: bad\n",
        "extends-dotdot": "extends: ../secret.yaml\nid: bad\n",
        "extends-unknown": "extends: no-such-board\nid: bad\n",
        "extends-self": "extends: p.yaml\nid: bad\n",
        "extends-list": "extends: [a, b]\nid: bad\n",
        "unknown-key": PROFILE_BASE + "frobnicate: 3\n",
        "cores-zero": PROFILE_BASE + "compute: {cores: 0}\n",
        "cores-text": PROFILE_BASE + "compute: {cores: many}\n",
        "clock-nan": PROFILE_BASE + "compute: {clock_ghz: .nan}\n",
        "clock-inf": PROFILE_BASE + "compute: {clock_ghz: .inf}\n",
        "rtt-inf": PROFILE_BASE + "link: {kind: wifi, uplink_mbps: 10, downlink_mbps: 10, "
                                  "rtt_ms: .inf}\n",
        "ram-huge": PROFILE_BASE + "memory: {ram_mb: 1e400}\n",
        "arch-unknown": PROFILE_BASE + "compute: {arch: z80}\n",
        "runtime-unknown": PROFILE_BASE + "runtimes: [tensorflow-js]\n",
        "runtimes-empty": PROFILE_BASE + "runtimes: []\n",
        "id-spaces": "extends: x86-64\nid: 'my board'\n",
        "version-99": PROFILE_BASE + "version: 99\n",
        "work-dir-newline": PROFILE_BASE + 'access: {work_dir: "/tmp/x\\ntouch y"}\n',
        "host-nul": PROFILE_BASE + 'access: {host: "pi\\u0000x"}\n',
        "python-tab": PROFILE_BASE + 'access: {python: "python3\\tx"}\n',
        "port-zero": PROFILE_BASE + "access: {port: 0}\n",
        "port-huge": PROFILE_BASE + "access: {port: 70000}\n",
        "transport-unknown": PROFILE_BASE + "access: {transport: telnet}\n",
        "billion-laughs": laughs,
        "deep": "a: " + "[" * 5000 + "]" * 5000 + "\n",
    }


def _manifest_edits() -> dict[str, Callable[[dict, dict], None]]:
    """name -> edit(manifest, chosen candidate) of a copy of a real bundle."""
    def art(**kw: object) -> Callable[[dict, dict], None]:
        return lambda m, c: c["artifact"].update(kw)
    return {
        "candidates-string": lambda m, c: m.update(candidates="x"),
        "candidates-null": lambda m, c: m.update(candidates=None),
        "format-99": lambda m, c: m.update(format=99),
        "format-text": lambda m, c: m.update(format="one"),
        "chosen-unknown": lambda m, c: m.update(chosen="nope"),
        "chosen-number": lambda m, c: m.update(chosen=7),
        "file-number": art(file=123),
        "file-dotdot": art(file="../secret.onnx"),
        "file-absolute": art(file="/etc/hostname"),
        "file-empty": art(file=""),
        "file-missing": art(file="artifacts/none.onnx"),
        "sha-wrong": art(sha256="0" * 64),
        "sha-list": art(sha256=[1]),
        "runtime-unknown": art(runtime="rm -rf /"),
        "size-negative": art(size_bytes=-5),
        "profile-path": lambda m, c: m.update(profile="/etc/passwd", profile_spec={}),
        "profile-spec-bad": lambda m, c: m.update(profile="zz", profile_spec={"id": "zz"}),
        "source-string": lambda m, c: m.update(source="x"),
        "not-a-mapping": lambda m, c: (m.clear(), m.update(_list=True)),
    }


#: Edits of the manifest's profile, read only by a deploy without --profile.
PROFILE_EDITS = ("profile-path", "profile-spec-bad")


def _write_bundle(folder: Path, edit: Callable[[dict, dict], None]) -> None:
    bundle = Path(shutil.copytree(OLD_BUNDLE, folder / "b.bundle"))
    shutil.copy(next((bundle / "artifacts").iterdir()), folder / "secret.onnx")
    manifest = json.loads((bundle / "manifest.json").read_text())
    edit(manifest, next(c for c in manifest["candidates"] if c["status"] == "chosen"))
    text = "[1, 2]" if manifest.get("_list") else json.dumps(manifest)
    (bundle / "manifest.json").write_text(text)


def _raw_manifests() -> dict[str, str]:
    return {"json-garbage": "{not json", "json-deep": "[" * 100000 + "]" * 100000,
            "json-empty": "", "json-nan": '{"format": NaN}', "json-huge-int": "1" * 5000}


def _bad_splits() -> dict[str, str]:
    """name -> split.yaml text of {folder}/s/split.yaml."""
    base = ("version: 1\nmodel: m.onnx\nobjective: latency\n")
    return {
        "garbage": "{{{ not yaml",
        "empty": "",
        "list": "- 1\n- 2\n",
        "version-99": "version: 99\n",
        "head-dotdot": base + "head: ../../x.onnx\ntail: t.onnx\n",
        "tail-absolute": base + "head: h.onnx\ntail: /etc/hostname\n",
        "cuts-string": base + "cuts: x\n",
        "deep": "a: " + "[" * 5000 + "]" * 5000 + "\n",
    }


def _bad_inventories() -> dict[str, str]:
    return {
        "garbage": "{{{ not yaml",
        "empty": "",
        "list": "- a\n",
        "host-injection": "all:\n  hosts:\n    'pi;touch x':\n",
        "user-newline": "all:\n  hosts:\n    pi:\n      ansible_user: \"a\\nb\"\n",
        "port-text": "all:\n  hosts:\n    pi:\n      ansible_port: twenty\n",
        "ini-garbage": "[web\nfoo ansible_host=\n",
    }


HOSTS = ("", " ", "pi@", "@host", "pi@host:0", "pi@host:70000", "pi@host:port",
         "pi@host:22:22", "pi@[::1", "pi@[::1]x", "pi;rm -rf /@host", "pi@$(touch x)",
         "pi@`id`", "-oProxyCommand=x", "pi@-oProxyCommand=x", "pi@host\nx", "pi@\x00host",
         "pi@host/../x", "a" * 300 + "@host")


def _cli_values() -> list[tuple[str, tuple[str, ...]]]:
    """(name, argv) with a model ``{d}/m.onnx``; each flag value is wrong."""
    opt = ("optimize", "{d}/m.onnx", "--profile", "x86-64", "-o", "{d}/out")
    part = ("partition", "{d}/m.onnx", "--profile", "rpi4", "--cloud", "cloud-c7i",
            "-o", "{d}/out")
    dep = ("deploy", "{d}/m.onnx", "--profile", "x86-64", "-o", "{d}/out")
    values = []
    for flag, bad in (("--max-drop", ("-1", "101", "nan", "x")),
                      ("--min-cosine", ("2", "-2", "nan", "inf")),
                      ("--max-error", ("0", "-1", "inf", "nan")),
                      ("--latency-budget", ("0", "-5", "nan", "inf")),
                      ("--size-budget", ("0", "-1", "nan", "inf", "x")),
                      ("--shape", ("x=", "x=a,b", "x=-1,4", "nosuch=1,4", "x=1,4:complex",
                                   "x=0,4", "x=99999999,99999999")),
                      ("--metric", ("y=nosuch", "nosuch=values", "no_module_q:f", "y=", "=",
                                    "y=ctc:blank=x")),
                      ("--prune", ("0", "1", "-0.5", "nan", "x")),
                      ("--prune-budget", ("-1", "nan", "inf"))):
        values += [(f"optimize {flag} {v!r}", (*opt, flag, v)) for v in bad]
    for flag, bad in (("--bandwidth", ("0", "-1", "nan", "inf", "1e400", "x")),
                      ("--rtt", ("-1", "nan", "inf")),
                      ("--compress", ("int4", "")),
                      ("--objective", ("speed",))):
        values += [(f"partition {flag} {v!r}", (*part, flag, v)) for v in bad]
    for flag, bad in (("--runs", ("0", "-1", "x", "1e9")), ("--warmup", ("-1", "x")),
                      ("--threads", ("-1", "x")), ("--keep", ("0", "-1")),
                      ("--forks", ("0",))):
        values += [(f"deploy {flag} {v!r}", (*dep, flag, v)) for v in bad]
    values += [(f"deploy --host {h!r}", (*dep, "--host", h)) for h in HOSTS]
    values += [(f"rollback --host {h!r}", ("rollback", "--host", h)) for h in HOSTS[:8]]
    values += [("rollback --to bad", ("rollback", "--to", "../../etc")),
               ("rollback --to empty", ("rollback", "--to", "")),
               ("releases --prune-keep 0", ("releases", "--prune-keep", "0")),
               ("run-split no split", ("run-split", "{d}/nothing", "--url", "http://x")),
               ("run-split bad url", ("run-split", "{d}/nothing", "--url", "ftp://x")),
               ("serve-cloud no split", ("serve-cloud", "{d}/nothing")),
               ("report nothing", ("report", "{d}/nothing", "-o", "{d}/r.html")),
               ("inspect missing", ("inspect", "{d}/nothing.onnx")),
               ("profiles show unknown", ("profiles", "show", "no-such-board")),
               ("optimize unknown profile", ("optimize", "{d}/m.onnx", "--profile", "zz"))]
    return values


# ---------------------------------------------------------------- the corpus


def cases() -> Iterator[Case]:
    yield from _model_cases()
    yield from _data_cases()
    yield from _profile_cases()
    yield from _bundle_cases()
    yield from _split_cases()
    yield from _inventory_cases()
    for name, argv in _cli_values():
        yield Case(name=f"cli {name}", argv=argv, make=lambda d: tiny_model(d / "m.onnx"))
    for module in MODULES:
        yield from importlib.import_module(f"tests.support.{module}").cases()


def _model_cases() -> Iterator[Case]:
    commands = {
        "inspect": ("inspect", "{m}"),
        "optimize": ("optimize", "{m}", "--profile", "x86-64", "-o", "{d}/out"),
        "partition": ("partition", "{m}", "--profile", "rpi4", "--cloud", "cloud-c7i",
                      "-o", "{d}/out"),
        "deploy": ("deploy", "{m}", "--profile", "x86-64", "-o", "{d}/out"),
        "serve-cloud": ("serve-cloud", "{m}", "--export-repository", "{d}/repo"),
    }
    for kind, make in _bad_models().items():
        name = f"m.{kind.rsplit('.', 1)[-1]}"
        for command, argv in commands.items():
            if command == "serve-cloud" and kind == "huge-dims.onnx":
                continue  # a tail may declare any dims: the server bounds what a request sends
            described = command == "inspect" and kind in DESCRIBED
            yield Case(name=f"model {kind} {command}",
                       argv=tuple(a.replace("{m}", f"{{d}}/{name}") for a in argv),
                       make=lambda d, make=make, name=name: make(d / name),
                       status=(0,) if described else (2,))


def _data_cases() -> Iterator[Case]:
    for kind, make in _bad_data().items():
        name = f"d.{kind.rsplit('.', 1)[-1]}"
        for flag in ("--calib", "--eval"):
            yield Case(name=f"data {kind} {flag}",
                       argv=("optimize", "{d}/m.onnx", "--profile", "x86-64", flag,
                             f"{{d}}/{name}", "-o", "{d}/out"),
                       make=lambda d, make=make, name=name: (tiny_model(d / "m.onnx"),
                                                             make(d / name)))
    for kind, make in _bad_images().items():
        yield Case(name=f"images {kind}",
                   argv=("optimize", "{d}/m.onnx", "--profile", "x86-64", "--calib",
                         "{d}/images", "-o", "{d}/out"),
                   make=lambda d, make=make: (_image_model(d / "m.onnx"),
                                              (d / "images").mkdir(), make(d / "images")))


def _write_profile(folder: Path, text: str) -> None:
    (folder / "secret.yaml").write_text("root:$6$never-printed:19000:0:99999:7:::\n")
    (folder / "profiles").mkdir()
    body = text.replace("SECRET", str(folder / "secret.yaml"))
    (folder / "profiles" / "p.yaml").write_bytes(body.encode("utf-8", "surrogatepass"))


def _profile_cases() -> Iterator[Case]:
    for kind, text in _bad_profiles().items():
        def make(d: Path, text: str = text) -> None:
            _write_profile(d, text)
            tiny_model(d / "m.onnx")
        yield Case(name=f"profile {kind} validate", make=make,
                   argv=("profiles", "validate", "{d}/profiles/p.yaml"))
        yield Case(name=f"profile {kind} optimize", make=make,
                   argv=("optimize", "{d}/m.onnx", "--profile", "{d}/profiles/p.yaml",
                         "-o", "{d}/out"))


def _bundle_cases() -> Iterator[Case]:
    commands = {
        "deploy": ("deploy", "{d}/b.bundle", "--dry-run"),
        "deploy-remote": ("deploy", "{d}/b.bundle", "--profile", "x86-64", "--host", NOWHERE),
        "report": ("report", "{d}/b.bundle", "-o", "{d}/r.html"),
        "bench": ("bench", "{d}/b.bundle", "--profile", "x86-64", "--host", NOWHERE),
    }
    for kind, edit in _manifest_edits().items():
        for command, argv in commands.items():
            if kind in PROFILE_EDITS and command != "deploy":
                continue  # --profile given (or no profile read): the manifest's is not used
            yield Case(name=f"manifest {kind} {command}", argv=argv,
                       make=lambda d, edit=edit: _write_bundle(d, edit))
    for kind, text in _raw_manifests().items():
        for command, argv in commands.items():
            yield Case(name=f"manifest {kind} {command}", argv=argv,
                       make=lambda d, text=text: _document(d / "b.bundle" / "manifest.json",
                                                           text))


def _document(path: Path, text: str) -> None:
    """``text`` as a document edge reads (its folder made)."""
    path.parent.mkdir()
    path.write_text(text)


def _split_cases() -> Iterator[Case]:
    commands = {
        "run-split": ("run-split", "{d}/s", "--url", "http://127.0.0.1:9"),
        "serve-cloud": ("serve-cloud", "{d}/s", "--export-repository", "{d}/repo"),
        "report": ("report", "{d}/s", "-o", "{d}/r.html"),
    }
    for kind, text in _bad_splits().items():
        for command, argv in commands.items():
            yield Case(name=f"split {kind} {command}", argv=argv,
                       make=lambda d, text=text: _document(d / "s" / "split.yaml", text))


def _inventory_cases() -> Iterator[Case]:
    for kind, text in _bad_inventories().items():
        yield Case(name=f"inventory {kind}",
                   argv=("deploy", "{d}/b.bundle", "--inventory", "{d}/hosts.yml",
                         "--profile", "x86-64"),
                   make=lambda d, text=text: (_write_bundle(d, lambda m, c: None),
                                              (d / "hosts.yml").write_text(text)))
