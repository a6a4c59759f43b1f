#!/usr/bin/env python
"""Does an OpenVINO fp32 IR compute fp32 when a user loads it plainly, on a CPU with bf16?

    python bench/openvino_plain_load.py --out bench/results/openvino_plain_load.json

OpenVINO's CPU plugin computes in bf16 by default where the CPU has AVX512-BF16 or AMX, so an
IR that edge verified with ``INFERENCE_PRECISION_HINT=f32`` can compute something else in the
user's own ``core.compile_model("model.xml", "CPU")`` or a serving engine. Can the IR carry
the setting? This script checks, on the machine it runs on, ways of saving the same ONNX model
as IR:

* ``plain``: saved as it is converted (what edge wrote before issue 29);
* ``runtime_options``: the same IR with ``runtime_options/INFERENCE_PRECISION_HINT = f32``;
* ``execution_mode``: the same IR with ``runtime_options/EXECUTION_MODE_HINT = ACCURACY``;
* ``disable_fp16_compression``: every computing layer carrying that runtime attribute (a name
  the IR reader does not know: it is dropped);
* ``precise``: every computing layer carrying the ``precise`` runtime attribute (what edge's
  fp32 IR carries since issue 29: ``targets/openvino/target.py`` ``mark_precise``);
* ``loader_hint``: the plain IR compiled with the hint passed by the loader (edge's own loader).

Each is compiled with ``compile_model(xml, "CPU")`` and no other setting (the loader_hint row
aside); the row records the compiled model's INFERENCE_PRECISION_HINT and its outputs' largest
difference, RMS error and top-1 agreement against ONNX Runtime's fp32 on the same inputs.
Models: edge's digits sample (with its held-out digits) and a deep MLP (random weights, fixed
seed) where bf16's rounding accumulates. Needs only numpy, onnx, onnxruntime and openvino, so it
runs on a machine where edge is not installed (a GPU machine's CPU, for one).

bench/results/openvino_plain_load.json: OpenVINO 2026.4.1 on a Xeon with AMX-BF16 (the CPU of
a lent GPU machine). The plain IR computes bf16; ``runtime_options`` (the CPU plugin reads only
KV-cache and dynamic-quantization options from it) and ``disable_fp16_compression`` change
nothing; ``precise`` (all ops carrying it when read back) keeps the MLP's matrix products f32
(what the loader's hint computes) but not the digits CNN's convolutions (0.064 against 7e-6).
The compiled model reports INFERENCE_PRECISION_HINT bf16 either way: only the outputs tell.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402

HINT = "INFERENCE_PRECISION_HINT"
OPTIONS = ["runtime_options", HINT]


def deep_mlp(path: Path, width: int = 512, depth: int = 12) -> Path:
    """An MLP of ``depth`` Gemm+Tanh layers (fixed seed); its output is the last Gemm's."""
    rng = np.random.default_rng(0)
    nodes, inits, last = [], [], "x"
    for i in range(depth):
        weight = (rng.standard_normal((width, width)) * 1.4 / np.sqrt(width)).astype(np.float32)
        inits += [numpy_helper.from_array(weight, f"w{i}"),
                  numpy_helper.from_array(np.zeros(width, np.float32), f"b{i}")]
        nodes += [helper.make_node("Gemm", [last, f"w{i}", f"b{i}"], [f"g{i}"]),
                  helper.make_node("Tanh", [f"g{i}"], [f"t{i}"])]
        last = f"t{i}"
    nodes[-1] = helper.make_node("Identity", [f"g{depth - 1}"], ["y"])
    graph = helper.make_graph(nodes, "deep_mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                 ir_version=8), path)
    return path


def inputs(name: str, model: Path) -> list[np.ndarray]:
    """The inputs each model is run on (one sample per array, batch 1)."""
    if name == "digits":
        images = np.load(ROOT / "edge" / "samples" / "digits_eval.npz")["input"][:200]
        return [images[i:i + 1].astype(np.float32) for i in range(len(images))]
    rng = np.random.default_rng(1)
    return [rng.standard_normal((1, 512)).astype(np.float32) for _ in range(64)]


def reference(model: Path, feeds: list[np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return [session.run(None, {name: x})[0] for x in feeds]


def irs(model: Path, folder: Path) -> dict[str, Path]:
    """The plain IR and the one carrying the hint in its runtime options."""
    converted = ov.convert_model(str(model))
    plain = folder / "plain.xml"
    ov.save_model(converted, plain, compress_to_fp16=False)
    hinted = ov.Core().read_model(plain)
    hinted.set_rt_info("f32", OPTIONS)
    carrying = folder / "runtime_options.xml"
    ov.save_model(hinted, carrying, compress_to_fp16=False)
    accuracy = ov.Core().read_model(plain)
    accuracy.set_rt_info("ACCURACY", ["runtime_options", "EXECUTION_MODE_HINT"])
    ov.save_model(accuracy, folder / "execution_mode.xml", compress_to_fp16=False)
    return {"plain": plain, "runtime_options": carrying,
            "execution_mode": folder / "execution_mode.xml",
            "disable_fp16_compression": marked(plain, folder, "disable_fp16_compression"),
            "precise": marked(plain, folder, "precise")}


def marked(plain: Path, folder: Path, attribute: str) -> Path:
    """The plain IR with every computing layer carrying the runtime attribute ``attribute``
    (version 0) in its rt_info, weights shared."""
    tree = ElementTree.parse(plain)
    out = folder / f"{attribute}.xml"
    for layer in tree.getroot().iter("layer"):
        if layer.get("type") in ("Parameter", "Result", "Const"):
            continue
        info = layer.find("rt_info")
        if info is None:  # where the IR reader looks for it: right after <data>, else first
            info = ElementTree.Element("rt_info")
            layer.insert(1 if layer.find("data") is not None else 0, info)
        ElementTree.SubElement(info, "attribute", name=attribute, version="0")
    tree.write(out)
    shutil.copyfile(plain.with_suffix(".bin"), out.with_suffix(".bin"))
    return out


def run(compiled: Any, feeds: list[np.ndarray]) -> list[np.ndarray]:
    request = compiled.create_infer_request()
    return [np.array(request.infer({0: x})[0]) for x in feeds]


def compare(ref: list[np.ndarray], got: list[np.ndarray]) -> dict[str, float]:
    r, g = np.concatenate(ref).astype(np.float64), np.concatenate(got).astype(np.float64)
    spread = float(np.std(r)) or 1.0
    return {"max_abs": float(np.max(np.abs(g - r))),
            "rms_of_spread": float(np.sqrt(np.mean((g - r) ** 2)) / spread),
            "top1_agreement": float(np.mean(r.argmax(-1) == g.argmax(-1)))}


def rows(name: str, model: Path, folder: Path) -> list[dict[str, Any]]:
    feeds = inputs(name, model)
    ref, core, saved = reference(model, feeds), ov.Core(), irs(model, folder)
    ways = {way: (xml, {}) for way, xml in saved.items()}
    ways["loader_hint"] = (saved["plain"], {HINT: "f32"})
    found = []
    for way, (xml, config) in ways.items():
        compiled = core.compile_model(str(xml), "CPU", config)
        computes = compiled.get_property(HINT).get_type_name()
        found.append({"model": name, "way": way, "computes": computes,
                      "ops_carrying_rt_info": carrying(core, xml),
                      **compare(ref, run(compiled, feeds))})
    return found


def carrying(core: Any, xml: Path) -> str:
    """How many computing ops of the IR, read back, carry a node rt_info attribute of the
    marking ways ("3/7"), so a mark the reader dropped shows."""
    ops = [op for op in core.read_model(str(xml)).get_ordered_ops()
           if op.get_type_name() not in ("Parameter", "Result", "Constant")]
    keys = ("DisablePrecisionConversion_0", "disable_fp16_compression_0")
    return f"{sum(any(k in op.get_rt_info() for k in keys) for op in ops)}/{len(ops)}"


def cpu_flags() -> list[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith("flags")), [])
    return sorted(f for f in flags if "bf16" in f or f.startswith("amx") or f == "avx512f")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--git-sha", default="", help="the commit, where the tree has no .git")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        models = {"digits": ROOT / "edge" / "samples" / "digits.onnx",
                  "deep-mlp": deep_mlp(folder / "mlp.onnx")}
        found = [row for name, model in models.items() for row in rows(name, model, folder)]
    record = provenance.record("bench/openvino_plain_load.py")
    record["git_sha"] = args.git_sha or record["git_sha"]
    result = {"provenance": record, "openvino": ov.__version__, "bf16_flags": cpu_flags(),
              "source": "this host only (OpenVINO's CPU plugin on the machine named in "
                        "provenance)", "rows": found}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for row in found:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
