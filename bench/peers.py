#!/usr/bin/env python
"""Benchmark edge's choice against peers' one-command defaults, on one model, in one run.

    python bench/peers.py [--model cnn|digits] [--threads N] [--out FILE]

Rows: edge's choice (``edge optimize --profile x86-64`` run as a subprocess, its manifest's chosen
artifact loaded with edge's own target loader), each peer's documented one-command default
(ORT quantize_static after quant_pre_process, ORT quantize_dynamic, OpenVINO convert_model +
compile_model, NNCF quantize + compile_model, onnx2tf -> float32 .tflite on LiteRT) and the ORT
fp32 baseline. Every row runs with the same thread count, is timed in ONE process in interleaved
rounds (order alternates, ~100 ms idle and a re-warm before every timed block) and is compared
with ORT fp32 on held-out inputs (mean cosine, top-1 agreement, accuracy). A roofline (peak GOPS
measured with a 2048^3 GEMM per precision; MACs from ``edge inspect``) bounds the latency.

Conversions, model building and the roofline run in child processes, so the timing process
holds only the runtimes being timed. Everything cached goes under bench/.cache.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache"
BIN = Path(sys.executable).parent
PROFILE = "x86-64"
#: scikit-image sample images that ship inside the package (no download); one class each.
IMAGES = ("astronaut", "coffee", "chelsea", "rocket", "camera", "hubble_deep_field",
          "immunohistochemistry", "retina", "coins", "moon", "brick", "gravel")
MEAN = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
STD = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]
SIZE = 224
#: MobileNetV2 inverted-residual settings: expansion t, channels c, repeats n, stride s.
MNV2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
        (6, 160, 3, 2), (6, 320, 1, 1))
#: Residual branches start near identity: their last BatchNorm's gamma (see _make_cnn).
RESIDUAL_GAMMA = 0.2
CNN_RECIPE = "cnn-v2"  # cache key of the CNN build recipe; bump when _make_cnn changes
ONNX2TF_SAMPLE = "calibration_image_sample_data_20x128x128x3_float32.npy"
#: edge's default fidelity thresholds (edge optimize --max-drop / --min-cosine defaults).
MIN_COSINE, MAX_DROP = 0.98, 1.0
NOISE = 0.10  # differences under ~10% are noise on this shared machine
GEMM_N = 2048

Run = Callable[[np.ndarray], np.ndarray]


# ====================================================================== models and data


def sample_images() -> list[Any]:
    """The sample images as float32 torch tensors [3, H, W] in [0, 1]."""
    import torch
    from skimage import data, util

    out = []
    for name in IMAGES:
        img = util.img_as_float32(getattr(data, name)())
        img = np.stack([img] * 3, -1) if img.ndim == 2 else img[..., :3]
        out.append(torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))))
    return out


def crops(images: list[Any], per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random square crops (35-90% of the short side) resized to 224, ImageNet-normalized."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for label, img in enumerate(images):
        for _ in range(per_class):
            xs.append(_crop(img, rng))
            ys.append(label)
    order = rng.permutation(len(xs))
    x = (np.stack(xs) - MEAN) / STD
    return x[order].astype(np.float32), np.array(ys, np.int64)[order]


def _crop(img: Any, rng: np.random.Generator) -> np.ndarray:
    import torch.nn.functional as F

    _, h, w = img.shape
    side = int(min(h, w) * rng.uniform(0.35, 0.9))
    top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
    patch = img[None, :, top:top + side, left:left + side]
    patch = F.interpolate(patch, size=(SIZE, SIZE), mode="bilinear", antialias=True,
                          align_corners=False)[0]
    return (patch.flip(-1) if rng.random() < 0.5 else patch).numpy()


def mobilenet_v2(classes: int = 1000) -> Any:
    """A MobileNetV2 (width 1.0, ~3.5M params): ``features`` then a Linear ``head``."""
    from torch import nn

    def cbr(i: int, o: int, k: int = 3, s: int = 1, g: int = 1) -> nn.Module:
        return nn.Sequential(nn.Conv2d(i, o, k, s, k // 2, groups=g, bias=False),
                             nn.BatchNorm2d(o), nn.ReLU6(inplace=True))

    class Inverted(nn.Module):
        def __init__(self, i: int, o: int, stride: int, t: int) -> None:
            super().__init__()
            hidden, self.residual = i * t, stride == 1 and i == o
            layers = [cbr(i, hidden, 1)] if t != 1 else []
            layers += [cbr(hidden, hidden, 3, stride, hidden),
                       nn.Conv2d(hidden, o, 1, bias=False), nn.BatchNorm2d(o)]
            self.body = nn.Sequential(*layers)

        def forward(self, x: Any) -> Any:
            return x + self.body(x) if self.residual else self.body(x)

    layers, c = [cbr(3, 32, 3, 2)], 32
    for t, o, n, s in MNV2:
        for k in range(n):
            layers.append(Inverted(c, o, s if k == 0 else 1, t))
            c = o
    layers += [cbr(c, 1280, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    net = nn.Sequential()
    net.add_module("features", nn.Sequential(*layers))
    net.add_module("head", nn.Linear(1280, classes))
    return net


def build_cnn(work: Path) -> dict[str, str]:
    """The MobileNetV2 ONNX, calibration .npy and labelled held-out .npz (cached)."""
    files = {"onnx": work / "cnn.onnx", "calib": work / "calib.npy", "eval": work / "eval.npz"}
    if not all(p.is_file() for p in files.values()):
        work.mkdir(parents=True, exist_ok=True)
        _make_cnn(work, files)
    return {k: str(v) for k, v in files.items()}


def _make_cnn(work: Path, files: dict[str, Path]) -> None:
    """Random conv weights, BatchNorm statistics from real crops, a linear-probe head.

    Training MobileNetV2 on this CPU is out of reach (3-13 s per batch of 32), so the conv
    weights stay random. A plain random deep net is chaotic: rounding errors grow layer by
    layer (int8 features cosine 0.97, int8 logits 0.87), far from a trained net. Starting the
    residual branches near identity (last BatchNorm gamma 0.2, the "zero-init residual" trick)
    keeps it tame (int8 features 0.99). BatchNorm is re-estimated on real crops and the head is
    a logistic regression on the features of 12 image classes: confident, input-dependent
    logits for top-1 and accuracy checks. The other 988 head rows are zero.
    """
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    images = sample_images()
    train_x, train_y = crops(images, 16, seed=0)
    net = mobilenet_v2()
    _tame_residuals(net)
    _recalibrate_bn(net, train_x[:24])
    _export(net.features, work / "features.onnx")
    _fit_head(net.head, _ort_features(work / "features.onnx", train_x), train_y)
    _export(net, files["onnx"])
    np.save(files["calib"], crops(images, 6, seed=1)[0])
    eval_x, eval_y = crops(images, 10, seed=2)
    np.savez(files["eval"], input=eval_x, labels=eval_y)


def _tame_residuals(net: Any) -> None:
    from torch import nn

    for module in net.modules():
        if getattr(module, "residual", False):
            nn.init.constant_(module.body[-1].weight, RESIDUAL_GAMMA)


def _recalibrate_bn(net: Any, x: np.ndarray) -> None:
    import torch
    from torch import nn

    for module in net.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.reset_running_stats()
            module.momentum = None  # cumulative average: one batch sets the statistics
    net.train()
    with torch.no_grad():
        net(torch.from_numpy(x))
    net.eval()


def _export(module: Any, path: Path) -> None:
    import torch

    module.eval()
    torch.onnx.export(module, torch.zeros(1, 3, SIZE, SIZE), str(path), input_names=["input"],
                      output_names=["output"], opset_version=17, dynamo=False)


def _ort_features(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, {"input": x[i:i + 1]})[0] for i in range(len(x))])


def _fit_head(head: Any, feats: np.ndarray, labels: np.ndarray) -> None:
    """Logistic regression into rows 0..K-1 of the 1000-way head; other rows output 0.

    On the raw features (standardizing amplified near-constant features and their rounding
    noise); multinomial logits sum to ~0 per sample, so the top logit is a fitted class.
    """
    import torch
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(max_iter=3000).fit(feats, labels)
    weight = np.zeros(tuple(head.weight.shape), np.float32)
    bias = np.zeros(head.bias.shape, np.float32)
    weight[: len(clf.classes_)] = clf.coef_
    bias[: len(clf.classes_)] = clf.intercept_
    with torch.no_grad():
        head.weight.copy_(torch.from_numpy(weight))
        head.bias.copy_(torch.from_numpy(bias))


def build_digits(work: Path) -> dict[str, str]:
    """The digits CNN from tests/support/digits.py (trained once, cached)."""
    sys.path.insert(0, str(ROOT))
    from tests.support.digits import train_digits

    files = {"onnx": work / "digits.onnx", "calib": work / "digits_calib.npy",
             "eval": work / "digits_eval.npz"}
    if not all(p.is_file() for p in files.values()):
        train_digits(work)
    return {k: str(v) for k, v in files.items()}


# ====================================================================== peers' defaults


PEERS = ("ort-static", "ort-dynamic", "nncf", "onnx2tf")


def build_peers(onnx_path: Path, calib_path: Path, work: Path) -> dict[str, dict[str, Any]]:
    """Each peer's artifact from its one-command defaults (cached by model and data hash)."""
    key = _digest(onnx_path, calib_path)
    work = work / key
    records = {}
    for name in PEERS:
        records[name] = _cached_build(name, onnx_path, np.load(calib_path), work / name)
    return records


def _digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:16]


def _cached_build(name: str, src: Path, calib: np.ndarray, work: Path) -> dict[str, Any]:
    record_file = work / "record.json"
    if record_file.is_file():
        return json.loads(record_file.read_text())
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    start = time.perf_counter()
    try:
        record = {"file": str(_BUILDERS[name](src, calib, work))}
    except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, others go on
        record = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"}
    record["build_s"] = round(time.perf_counter() - start, 1)
    record_file.write_text(json.dumps(record))
    return record


def _reader(name: str, calib: np.ndarray) -> Any:
    """A CalibrationDataReader over the calibration samples, one at a time."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._feeds = iter({name: calib[i:i + 1]} for i in range(len(calib)))

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._feeds, None)

    return Reader()


def _ort_static(src: Path, calib: np.ndarray, work: Path) -> Path:
    """ORT docs: quant_pre_process, then quantize_static(model, out, reader) with defaults."""
    from onnxruntime.quantization import quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    quant_pre_process(str(src), str(work / "pre.onnx"))
    quantize_static(str(work / "pre.onnx"), str(work / "static.onnx"),
                    _reader(_input_name(src), calib))
    return work / "static.onnx"


def _ort_dynamic(src: Path, calib: np.ndarray, work: Path) -> Path:
    """quantize_dynamic(model, out) with defaults (every op it supports, Conv included)."""
    from onnxruntime.quantization import quantize_dynamic

    quantize_dynamic(str(src), str(work / "dynamic.onnx"))
    return work / "dynamic.onnx"


def _nncf(src: Path, calib: np.ndarray, work: Path) -> Path:
    """nncf.quantize(ov.convert_model(src), nncf.Dataset(calib)) with defaults, saved as IR."""
    import nncf
    import openvino as ov

    quantized = nncf.quantize(ov.convert_model(str(src)),
                              nncf.Dataset([calib[i:i + 1] for i in range(len(calib))]))
    ov.save_model(quantized, str(work / "nncf.xml"), compress_to_fp16=False)
    return work / "nncf.xml"


def _onnx2tf(src: Path, calib: np.ndarray, work: Path) -> Path:
    """``onnx2tf -i model.onnx -o out`` (defaults) -> out/model_float32.tflite."""
    shutil.copyfile(src, work / "model.onnx")
    # offline, onnx2tf downloads this for 3-channel inputs unless it is in its cwd
    np.save(work / ONNX2TF_SAMPLE, np.zeros((20, 128, 128, 3), np.float32))
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    with open(work / "onnx2tf.log", "wb") as log:
        subprocess.run([str(BIN / "onnx2tf"), "-i", "model.onnx", "-o", "out"], cwd=work,
                       env=env, stdout=log, stderr=subprocess.STDOUT, timeout=900, check=False)
    out = work / "out" / "model_float32.tflite"
    if not out.is_file():
        tail = (work / "onnx2tf.log").read_text(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"onnx2tf wrote no model_float32.tflite: {' | '.join(tail)}")
    return out


_BUILDERS = {"ort-static": _ort_static, "ort-dynamic": _ort_dynamic, "nncf": _nncf,
             "onnx2tf": _onnx2tf}


def _input_name(path: Path) -> str:
    import onnx

    return onnx.load(str(path), load_external_data=False).graph.input[0].name


def prepare(model: str) -> dict[str, Any]:
    """Child process: build the model and data, then every peer's artifact."""
    work = CACHE / (CNN_RECIPE if model == "cnn" else model)
    files = build_cnn(work) if model == "cnn" else build_digits(work)
    files["peers"] = build_peers(Path(files["onnx"]), Path(files["calib"]), work / "peers")
    return files


# ====================================================================== edge


def run_edge(files: dict[str, Any], out: Path) -> dict[str, Any]:
    """``edge optimize`` as a user runs it; returns its manifest and the wall time."""
    env = dict(os.environ, EDGE_CACHE_DIR=str(CACHE / "edge"))
    cmd = [str(BIN / "edge"), "optimize", files["onnx"], "--profile", PROFILE, "--calib",
           files["calib"], "--eval", files["eval"], "-o", str(out), "--json"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1) or not (out / "manifest.json").is_file():
        sys.exit(f"edge optimize failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    return {"manifest": manifest, "seconds": round(seconds, 1),
            "command": " ".join(cmd[1:]).replace(str(ROOT) + "/", "")}


def inspect(onnx_path: str) -> dict[str, Any]:
    """``edge inspect --json``: params and MACs."""
    proc = subprocess.run([str(BIN / "edge"), "inspect", onnx_path, "--json"],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


# ====================================================================== runners


@dataclass
class Row:
    """One benchmarked way to run the model."""

    name: str
    kind: str  # edge | peer | baseline
    runtime: str
    compute: str  # what the arithmetic runs in: fp32 | bf16 | int8 (+ float)
    how: str
    run: Run | None = None
    error: str | None = None
    build_s: float | None = None
    fidelity: dict[str, float | None] = field(default_factory=dict)
    times: list[float] = field(default_factory=list)


def ort_run(path: str, threads: int) -> Run:
    """An ORT CPU session: default options except the thread count."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return lambda x: sess.run(None, {name: x})[0]


def ov_run(model: Any, threads: int, config: dict[str, Any] | None = None) -> tuple[Run, str]:
    """compile_model(model, "CPU") with only the thread count set; returns (run, precision)."""
    import openvino as ov

    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                      **(config or {})})
    request = compiled.create_infer_request()

    def run(x: np.ndarray) -> np.ndarray:
        request.infer({0: x})
        return request.get_output_tensor(0).data.copy()

    return run, compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()


def litert_run(path: str, threads: int) -> Run:
    """ai_edge_litert Interpreter(num_threads=threads); NCHW feeds go in as NHWC."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=path, num_threads=threads)
    interp.allocate_tensors()
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    nhwc = len(inp["shape"]) == 4 and inp["shape"][3] in (1, 3) and inp["shape"][1] > 3

    def run(x: np.ndarray) -> np.ndarray:
        interp.set_tensor(inp["index"], np.ascontiguousarray(x.transpose(0, 2, 3, 1))
                          if nhwc else x)
        interp.invoke()
        return interp.get_tensor(out["index"]).copy()

    return run


def peer_rows(files: dict[str, Any], threads: int) -> list[Row]:
    """ORT fp32 baseline, then each peer's default, loaded for timing."""
    import openvino as ov

    peers = files["peers"]
    rows = [Row("ORT fp32 (baseline)", "baseline", "onnxruntime", "fp32",
                "InferenceSession, default options", ort_run(files["onnx"], threads))]
    rows.append(_peer(peers["ort-static"], Row(
        "ORT quantize_static", "peer", "onnxruntime", "int8",
        "quant_pre_process + quantize_static(model, out, reader): QDQ, per-tensor, MinMax"),
        lambda f: ort_run(f, threads)))
    rows.append(_peer(peers["ort-dynamic"], Row(
        "ORT quantize_dynamic", "peer", "onnxruntime", "int8",
        "quantize_dynamic(model, out): Conv -> ConvInteger, MatMul -> MatMulInteger"),
        lambda f: ort_run(f, threads)))
    rows.append(_ov_peer(Row("OpenVINO", "peer", "openvino", "?",
                             "convert_model + compile_model(model, 'CPU')"),
                         lambda: ov.convert_model(files["onnx"]), threads))
    rows.append(_ov_peer(_peer(peers["nncf"], Row(
        "NNCF quantize", "peer", "openvino", "?",
        "nncf.quantize(ov_model, nncf.Dataset(calib)) + compile_model(model, 'CPU')"), None),
        lambda: ov.Core().read_model(peers["nncf"]["file"]), threads, int8=True))
    rows.append(_peer(peers["onnx2tf"], Row(
        "onnx2tf -> LiteRT", "peer", "tflite", "fp32",
        "onnx2tf -i model.onnx -o out; model_float32.tflite; Interpreter(num_threads)"),
        lambda f: litert_run(f, threads)))
    return rows


def _peer(record: dict[str, Any], row: Row, load: Callable[[str], Run] | None) -> Row:
    row.build_s = record.get("build_s")
    if "error" in record:
        row.error = f"build failed: {record['error']}"
    elif load is not None:
        row.run = _guarded(row, lambda: load(record["file"]))
    return row


def _ov_peer(row: Row, model: Callable[[], Any], threads: int, int8: bool = False) -> Row:
    if row.error:
        return row
    loaded = _guarded(row, lambda: ov_run(model(), threads))
    if loaded:
        row.run, hint = loaded
        row.compute = f"int8 + {hint}" if int8 else hint
        row.how += f" -> INFERENCE_PRECISION_HINT={hint}"
    return row


def _guarded(row: Row, load: Callable[[], Any]) -> Any:
    try:
        return load()
    except Exception as exc:  # noqa: BLE001 - a runtime that cannot load it drops out
        row.error = f"load failed: {type(exc).__name__}: {str(exc).strip()[:300]}"
        return None


def edge_rows(edge: dict[str, Any], out: Path, threads: int) -> list[Row]:
    """edge's chosen artifact, loaded with edge's target loader at ``threads``."""
    sys.path.insert(0, str(ROOT))
    from edge.core.values import Bundle
    from targets import get_target

    bundle = Bundle.from_json(edge["manifest"])
    chosen = bundle.chosen_result()
    if chosen is None or chosen.artifact is None:
        return [Row("edge's choice", "edge", "-", "-", "-", error=f"none: {bundle.reason}")]
    art = chosen.artifact
    path = out / art.file
    how = f"{chosen.candidate.id} ({art.runtime}); {'; '.join(art.notes[:2])}"
    row = Row(f"edge's choice: {chosen.candidate.id}", "edge", art.runtime,
              _edge_compute(chosen.candidate.precision, art.runtime), how)
    target = get_target(chosen.candidate.target)
    runner = _guarded(row, lambda: target.load(path, bundle.source, threads=threads))
    name = bundle.source.inputs[0].name
    row.run = (lambda x: runner.run({name: x})[0]) if runner else None
    rows = [row]
    if art.runtime == "openvino":
        rows.append(_edge_bf16(path, bundle, chosen.candidate.id, threads))
    return rows


def _edge_compute(precision: str, runtime: str) -> str:
    if runtime == "openvino":  # edge's OpenVINO loader pins INFERENCE_PRECISION_HINT=f32
        return "int8 + f32" if precision == "int8" else "f32"
    return {"int8": "int8", "int8-dynamic": "int8 (dynamic) + fp32"}.get(precision, precision)


def _edge_bf16(path: Path, bundle: Any, cand: str, threads: int) -> Row:
    """The same OpenVINO artifact at this CPU's fastest hint (bf16), kept if fidelity holds."""
    from targets.openvino import load_with_hint

    compute = "int8 + bf16" if cand.endswith("-int8") else "bf16"
    row = Row(f"edge's choice @bf16: {cand}", "edge", "openvino", compute,
              "edge's artifact, load_with_hint(hint='bf16')")
    runner = _guarded(row, lambda: load_with_hint(path, bundle.source, threads=threads,
                                                  hint="bf16"))
    name = bundle.source.inputs[0].name
    row.run = (lambda x: runner.run({name: x})[0]) if runner else None
    return row


# ====================================================================== fidelity and timing


def fidelity(run: Run, xs: np.ndarray, ref: list[np.ndarray],
             labels: np.ndarray) -> dict[str, float]:
    """Mean cosine and top-1 agreement vs the fp32 outputs, and accuracy vs labels."""
    outs = [np.asarray(run(xs[i:i + 1]), np.float64).ravel() for i in range(len(xs))]
    cos = [float(o @ r / (np.linalg.norm(o) * np.linalg.norm(r) or 1.0))
           for o, r in zip(outs, ref, strict=True)]
    top = np.array([int(np.argmax(o)) for o in outs])
    top_ref = np.array([int(np.argmax(r)) for r in ref])
    return {"cosine": float(np.mean(cos)), "min_cosine": float(np.min(cos)),
            "top1_agreement": float(np.mean(top == top_ref)),
            "accuracy": float(np.mean(top == labels))}


def keeps_fidelity(fid: dict[str, float], reference_accuracy: float) -> bool:
    """edge's own thresholds: cosine >= 0.98 and accuracy at most 1 point below fp32."""
    return (fid["cosine"] >= MIN_COSINE
            and 100 * (reference_accuracy - fid["accuracy"]) <= MAX_DROP + 1e-9)


def interleaved(rows: list[Row], x: np.ndarray, rounds: int) -> None:
    """Time every row in rounds; the order alternates; idle + re-warm before each block."""
    calls = {row.name: _calls_per_block(row.run, x) for row in rows}
    for index in range(rounds):
        for row in rows if index % 2 == 0 else rows[::-1]:
            row.times += _block(row.run, x, calls[row.name])


def _calls_per_block(run: Run, x: np.ndarray) -> int:
    """About 0.2 s of calls per block, 10 to 300."""
    for _ in range(3):
        run(x)
    start = time.perf_counter()
    for _ in range(3):
        run(x)
    each = (time.perf_counter() - start) / 3
    return int(min(300, max(10, 0.2 / max(each, 1e-6))))


def _block(run: Run, x: np.ndarray, calls: int, idle_s: float = 0.1,
           warmup: int = 3) -> list[float]:
    time.sleep(idle_s)  # let the previous runtime's spinning thread pool go idle
    for _ in range(warmup):
        run(x)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        run(x)
        times.append((time.perf_counter() - start) * 1e3)
    return times


# ====================================================================== roofline


def roofline(threads: int) -> dict[str, Any]:
    """Child process: peak GOPS of a 2048^3 GEMM per precision and runtime, best of 10."""
    peaks: dict[str, Any] = {}
    for name, gemm in (("fp32 numpy (OpenBLAS)", _numpy_gemm),
                       ("fp32 openvino", lambda t: _ov_gemm(t, "f32")),
                       ("bf16 openvino", lambda t: _ov_gemm(t, "bf16")),
                       ("int8 onnxruntime MatMulInteger", _ort_int8_gemm),
                       ("int8 openvino (NNCF)", _ov_int8_gemm)):
        try:
            peaks[name] = round(2 * GEMM_N**3 / _best_seconds(gemm(threads)) / 1e9, 1)
        except Exception as exc:  # noqa: BLE001 - report what could be measured
            peaks[name] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
    return peaks


def _best_seconds(call: Callable[[], object], repeats: int = 10) -> float:
    call()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def _gemm_inputs(dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    if dtype == np.float32:
        return (rng.standard_normal((GEMM_N, GEMM_N), np.float32),
                rng.standard_normal((GEMM_N, GEMM_N), np.float32))
    return (rng.integers(0, 255, (GEMM_N, GEMM_N), np.uint8),
            rng.integers(-127, 127, (GEMM_N, GEMM_N), np.int8))


def _numpy_gemm(threads: int) -> Callable[[], object]:
    from threadpoolctl import threadpool_limits

    a, b = _gemm_inputs()
    limits = threadpool_limits(threads)  # stays in force in this child process
    assert limits is not None
    return lambda: a @ b


def _ov_matmul_model() -> tuple[Any, np.ndarray]:
    import openvino as ov
    import openvino.opset13 as ops

    a, b = _gemm_inputs()
    param = ops.parameter([GEMM_N, GEMM_N], np.float32, name="a")
    return ov.Model([ops.matmul(param, ops.constant(b), False, False)], [param]), a


def _ov_gemm(threads: int, hint: str) -> Callable[[], object]:
    model, a = _ov_matmul_model()
    run, _ = ov_run(model, threads, {"INFERENCE_PRECISION_HINT": hint})
    return lambda: run(a)


def _ov_int8_gemm(threads: int) -> Callable[[], object]:
    import nncf

    model, a = _ov_matmul_model()
    quantized = nncf.quantize(model, nncf.Dataset([a]), subset_size=1)
    run, _ = ov_run(quantized, threads)
    return lambda: run(a)


def _ort_int8_gemm(threads: int) -> Callable[[], object]:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    a, b = _gemm_inputs(np.uint8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "gemm",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [GEMM_N, GEMM_N])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [GEMM_N, GEMM_N])],
        [numpy_helper.from_array(b, "b")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8  # onnx 1.23 writes IR 14, newer than this onnxruntime reads
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(proto.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"a": a})


def peak_by_precision(peaks: dict[str, Any]) -> dict[str, float]:
    """The best measured GOPS per precision (fp32, bf16, int8)."""
    best: dict[str, float] = {}
    for name, gops in peaks.items():
        if isinstance(gops, float):
            precision = name.split()[0]
            best[precision] = max(best.get(precision, 0.0), gops)
    return best


def bound_ms(macs: int, compute: str, peaks: dict[str, float]) -> float | None:
    """MACs x 2 / peak of the precision that does the bulk of the work."""
    precision = ("int8" if compute.startswith("int8") else
                 "bf16" if compute.startswith("bf16") else "fp32")
    peak = peaks.get(precision)
    return 2 * macs / (peak * 1e9) * 1e3 if peak else None


# ====================================================================== report


def summarize(rows: list[Row], macs: int, peaks: dict[str, float]) -> list[dict[str, Any]]:
    """Per-row results with p50/p90 and ratios vs ORT fp32 and vs edge's choice."""
    base = _p50(next(r for r in rows if r.kind == "baseline"))
    edge = _edge_p50(rows)
    out = []
    for row in rows:
        p50 = _p50(row)
        bound = bound_ms(macs, row.compute, peaks)
        out.append({
            "name": row.name, "kind": row.kind, "runtime": row.runtime, "compute": row.compute,
            "how": row.how, "error": row.error, "build_s": row.build_s,
            "p50_ms": p50, "p90_ms": float(np.percentile(row.times, 90)) if row.times else None,
            "samples": len(row.times),
            "speedup_vs_fp32": base / p50 if p50 and base else None,
            "edge_speedup_over_this": p50 / edge if p50 and edge else None,
            "roofline_bound_ms": bound,
            "roofline_fraction": bound / p50 if bound and p50 else None,
            **row.fidelity})
    return out


def _p50(row: Row) -> float | None:
    return float(np.median(row.times)) if row.times else None


def _edge_p50(rows: list[Row]) -> float | None:
    """edge's row: as edge loads it (the bf16 variant counts only if it keeps fidelity)."""
    timed = [r for r in rows if r.kind == "edge" and r.times and r.fidelity.get("keeps")]
    return min((_p50(r) for r in timed), default=None)  # type: ignore[type-var]


def verdict(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's done-when: edge >= the best peer default at equal or better fidelity, and
    >= 2x ORT fp32."""
    edge = [r for r in results if r["kind"] == "edge" and r["p50_ms"] and r.get("keeps")]
    peers = [r for r in results if r["kind"] == "peer" and r["p50_ms"]]
    faithful = [r for r in peers if r.get("keeps")]
    if not edge or not peers:
        return {"error": "edge's choice or every peer failed"}
    mine = min(edge, key=lambda r: r["p50_ms"])
    fastest = min(peers, key=lambda r: r["p50_ms"])
    best = min(faithful, key=lambda r: r["p50_ms"]) if faithful else None
    ratio = best["p50_ms"] / mine["p50_ms"] if best else None
    as_close = [r for r in peers if r.get("cosine", 0) >= mine["cosine"] - 1e-4]
    close = min(as_close, key=lambda r: r["p50_ms"]) if as_close else None
    return {
        "edge_row": mine["name"], "edge_p50_ms": mine["p50_ms"],
        "edge_speedup_vs_fp32": mine["speedup_vs_fp32"],
        "fastest_peer": fastest["name"], "fastest_peer_ratio": fastest["p50_ms"] / mine["p50_ms"],
        "fastest_peer_keeps_fidelity": bool(fastest.get("keeps")),
        "best_faithful_peer": best["name"] if best else None, "best_faithful_peer_ratio": ratio,
        "not_slower_than_best_peer": ratio is not None and ratio >= 1.0,
        "within_noise_of_best_peer": ratio is not None and ratio >= 1.0 - NOISE,
        "at_least_2x_fp32": (mine["speedup_vs_fp32"] or 0) >= 2.0,
        "fastest_peer_with_cosine_at_least_edges": close["name"] if close else None,
        "its_ratio": close["p50_ms"] / mine["p50_ms"] if close else None,
    }


def table(results: list[dict[str, Any]]) -> str:
    """A markdown table of every row."""
    head = ("| candidate | compute | p50 ms | p90 ms | fp32 p50 / p50 | p50 / edge p50 | "
            "cosine | top-1 agree | accuracy | roofline bound |")
    lines = [head, "|" + "---|" * 10]
    for r in results:
        if r["p50_ms"] is None:
            lines.append(f"| {r['name']} | {r['compute']} | {r['error']} |" + " |" * 7)
            continue
        lines.append(
            f"| {r['name']} | {r['compute']} | {r['p50_ms']:.3f} | {r['p90_ms']:.3f} | "
            f"{_x(r['speedup_vs_fp32'])} | {_x(r['edge_speedup_over_this'])} | "
            f"{_f(r.get('cosine'), 4)}{'' if r.get('keeps') else ' ✗'} | "
            f"{_pct(r.get('top1_agreement'))} | {_pct(r.get('accuracy'))} | "
            f"{_f(r['roofline_bound_ms'], 3)} ms ({_pct(r['roofline_fraction'])}) |")
    return "\n".join(lines)


def edge_table(manifest: dict[str, Any]) -> str:
    """edge's own view: every candidate's status, fidelity and its host timing."""
    lines = ["| edge candidate | status | p50 ms (edge's timing) | threads | cosine | reason |",
             "|---|---|---|---|---|---|"]
    for c in manifest["candidates"]:
        bench, fid = c.get("bench") or {}, c.get("fidelity") or {}
        lines.append(f"| {c['candidate']['target']}-{c['candidate']['precision']} | "
                     f"{c['status']} | {_f(bench.get('p50_ms'), 3)} | "
                     f"{bench.get('threads', '')} | {_f(fid.get('cosine'), 4)} | "
                     f"{c['reason'][:90]} |")
    return "\n".join(lines)


def _x(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}x"


def _f(v: float | None, digits: int) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.1f}%"


def edge_digest() -> str:
    """A hash of edge's source (edge/, targets/): which edge these numbers belong to."""
    digest = hashlib.sha256()
    for path in sorted([*ROOT.glob("edge/*.py"), *ROOT.glob("targets/*.py")]):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    from importlib.metadata import version

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text()
                .splitlines() if ln.startswith("model name")), platform.processor())
    flags = next((ln.split(":", 1)[1].split() for ln in Path("/proc/cpuinfo").read_text()
                  .splitlines() if ln.startswith("flags")), [])
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16",
              "amx_int8")
    return {"cpu": cpu, "cores": os.cpu_count(), "isa": [f for f in wanted if f in flags],
            "loadavg_at_start": os.getloadavg(), "python": platform.python_version(),
            "versions": {p: version(p) for p in ("onnxruntime", "openvino", "nncf", "onnx2tf",
                                                  "ai-edge-litert", "tensorflow", "numpy",
                                                  "scikit-image", "torch")}}


# ====================================================================== main


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("cnn", "digits"), default="cnn")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=8, help="interleaved timing rounds")
    ap.add_argument("--out", type=Path, help="JSON results (default "
                    "bench/results/peers-<model>[-<N>t].json)")
    args = ap.parse_args(argv)
    if args.out is None:
        suffix = "" if args.threads == 1 else f"-{args.threads}t"
        args.out = ROOT / "bench" / "results" / f"peers-{args.model}{suffix}.json"
    return args


def in_child(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn`` in a fresh spawned process (keeps torch/TF/NNCF out of the timing process)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def log(text: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    start = time.perf_counter()
    host = machine()
    log(f"model {args.model}: building model, data and peer artifacts (child process)")
    files = in_child(prepare, args.model)
    info = inspect(files["onnx"])
    log(f"{info['params']:,} params, {info['macs']:,} MACs; running edge optimize")
    bundle_dir = CACHE / "bundles" / args.model
    edge = run_edge(files, bundle_dir)
    log(f"edge chose {edge['manifest']['chosen']} in {edge['seconds']} s; roofline GEMMs")
    peaks = in_child(roofline, args.threads)
    rows = edge_rows(edge, bundle_dir, args.threads) + peer_rows(files, args.threads)
    ref_accuracy = measure_fidelity(rows, files)
    timed = [r for r in rows if r.run is not None and r.fidelity]
    log(f"timing {len(timed)} rows, {args.rounds} interleaved rounds, {args.threads} thread(s)")
    interleaved(timed, np.load(files["eval"])["input"][:1], args.rounds)
    best = peak_by_precision(peaks)
    results = summarize(rows, info["macs"], best)
    report = {
        "model": args.model, "threads": args.threads, "rounds": args.rounds,
        "command": f"/work/venv/bin/python bench/peers.py --model {args.model} "
                   f"--threads {args.threads}",
        "machine": host, "edge_source_digest": edge_digest(), "params": info["params"],
        "macs": info["macs"],
        "fp32_accuracy": ref_accuracy, "eval_samples": int(len(np.load(files["eval"])["labels"])),
        "peak_gops": peaks, "peak_gops_best": best, "edge": edge, "results": results,
        "verdict": verdict(results), "loadavg_at_end": os.getloadavg(),
        "wall_s": round(time.perf_counter() - start, 1)}
    report["edge"]["manifest"] = _slim(edge["manifest"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print_report(report)
    log(f"wrote {args.out} ({report['wall_s']} s)")
    return 0


def measure_fidelity(rows: list[Row], files: dict[str, Any]) -> float:
    """Fill every row's fidelity vs the baseline on the held-out set; return fp32 accuracy."""
    held = np.load(files["eval"])
    xs, labels = held["input"].astype(np.float32), held["labels"]
    base = next(r for r in rows if r.kind == "baseline")
    ref = [np.asarray(base.run(xs[i:i + 1]), np.float64).ravel() for i in range(len(xs))]
    ref_accuracy = float(np.mean(np.array([int(np.argmax(r)) for r in ref]) == labels))
    for row in rows:
        if row.run is None:
            continue
        try:
            row.fidelity = fidelity(row.run, xs, ref, labels)
        except Exception as exc:  # noqa: BLE001 - a row that cannot run drops out
            row.error, row.run = f"run failed: {type(exc).__name__}: {str(exc)[:200]}", None
            continue
        row.fidelity["keeps"] = keeps_fidelity(row.fidelity, ref_accuracy)
    return ref_accuracy


def _slim(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest without the repeated profile spec."""
    return {k: v for k, v in manifest.items() if k != "profile_spec"}


def print_report(report: dict[str, Any]) -> None:
    print(f"\n## {report['model']}: {report['params']:,} params, {report['macs']:,} MACs, "
          f"{report['threads']} thread(s); fp32 accuracy {100 * report['fp32_accuracy']:.1f}% "
          f"on {report['eval_samples']} held-out samples\n")
    print(table(report["results"]))
    print(f"\npeak GOPS ({report['threads']} thread(s)): {json.dumps(report['peak_gops'])}")
    print(f"\nedge optimize ({report['edge']['seconds']} s): chosen "
          f"{report['edge']['manifest']['chosen']}: {report['edge']['manifest']['reason']}\n")
    print(edge_table(report["edge"]["manifest"]))
    print(f"\nverdict: {json.dumps(report['verdict'], indent=1)}")


if __name__ == "__main__":
    sys.exit(main())
