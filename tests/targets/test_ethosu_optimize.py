"""``edge optimize`` for the i.MX 93 (Ethos-U65) profile with the real Vela 5.2.0 and LiteRT's
reference kernels: the digits sample, the bench MobileNetV2 and three trained zoo models each
give an ethos-u-int8 candidate compiled by Vela, with Vela's estimate shown as a vendor
estimate, verified per output (its task metric). The digits CNN keeps fidelity and is chosen;
MobileNetV2 and the zoo models lose more than edge's tolerances in full int8 (as the TFLite
target's own full-int8 does: bench/results/peers-*.json) and are rejected naming the output.
The plan of both Ethos-U profiles. No mocks."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import zoo
from tests.support.cli import run_cli
from tests.support.zoo_check import artifact_model, fidelity
from tests.support.zoo_run import original, outputs

ROOT = Path(__file__).resolve().parents[2]
#: The i.MX 93 with only its NPU's candidates (the heavy models: no CPU runtimes to convert).
NPU_ONLY = "extends: imx93\nid: imx93-npu\nruntimes: [ethos-u]\n"
ESTIMATE = "Vela 5.2.0 estimate for ethos-u65-256, NXP_iMX93, Dedicated_Sram_384KB"
#: The three trained zoo models bench/peerbench uses beside its MobileNetV2.
ZOO = ("fer-emotion", "oww-embedding", "mp-hand-landmark")


def _ethos_u(report: dict[str, Any]) -> dict[str, Any]:
    """The ethos-u-int8 candidate of an optimize report: compiled by Vela, labelled a vendor
    estimate, and verified per output (kept, or rejected naming the output and tolerance)."""
    found = next(c for c in report["candidates"] if c["candidate"]["target"] == "ethos-u")
    artifact = found["artifact"]
    assert artifact is not None, found["reason"]
    assert artifact["file"].endswith(".vela.tflite") and artifact["runtime"] == "ethos-u"
    assert [c["file"][-5:] for c in artifact["companions"]] == [".int8"]
    assert artifact["toolchain"]["ethos-u-vela"] == "5.2.0"
    assert any(ESTIMATE in n and "vendor estimate" in n for n in artifact["notes"])
    outputs_judged = found["fidelity"]["outputs"]
    assert outputs_judged and all(o["reason"] for o in outputs_judged)
    if found["status"] == "rejected":  # full int8 lost more than edge's tolerance: said per output
        failing = [o for o in outputs_judged if not o["passed"]]
        assert failing and all(o["name"] in found["reason"] or o["reason"] in found["reason"]
                               for o in failing[:1]), found["reason"]
        return found
    assert found["status"] in ("chosen", "passed"), found["reason"]
    bench = found["bench"]
    assert bench["source"] == "estimate" and bench["where"] == ESTIMATE
    assert bench["p50_ms"] > 0 and bench["metrics"]["npu_ops"] > 0
    assert {"sram_kib", "cycles", "cpu_ops", "inferences_per_second"} <= set(bench["metrics"])
    return found


def _estimate(found: dict[str, Any]) -> str:
    """Vela's note of a candidate (the figures of its estimate)."""
    return next(n for n in found["artifact"]["notes"] if n.startswith(ESTIMATE))


def _optimize(model: str, *flags: str) -> dict[str, Any]:
    """optimize --json; exit 1 only when no candidate kept fidelity (the report still comes)."""
    result = run_cli("optimize", model, *flags, "--json")
    assert result.status in (0, 1), result.stderr[-1500:]
    report = result.json()
    assert (result.status == 1) == (report["chosen"] is None), result.stderr[-800:]
    return report


# ---------------------------------------------------------------- the plan


@pytest.mark.parametrize("profile", ["imx93", "corstone-300"])
def test_the_plan_tries_the_npu_first(profile: str) -> None:
    result = run_cli("optimize", "sample:digits", "--profile", profile, "--dry-run", "--json")
    assert result.status == 0, result.stderr
    planned = result.json()["plan"]
    first = next(c for c in planned if c["candidate"] != "original")
    assert first["candidate"] == "ethos-u-int8" and first["keep"]
    assert "Arm Ethos-U NPU" in first["reason"] and "every operator maps to it" in first["reason"]


# ---------------------------------------------------------------- the models (slow)


@pytest.mark.slow
def test_digits_on_the_imx93_profile(tmp_path: Path) -> None:
    # --exhaustive: the CPU candidates ranking after the chosen NPU one are converted too
    report = _optimize("sample:digits", "--profile", "imx93", "-o", str(tmp_path / "b"),
                       "--exhaustive")
    found = _ethos_u(report)
    assert found["status"] == "chosen"
    assert found["fidelity"]["accuracy"] >= found["fidelity"]["reference_accuracy"] - 0.02
    assert found["artifact"].get("fallbacks", []) == []  # every op on the NPU
    # the CPU candidates keep their measured figures; only the NPU's is Vela's estimate
    tflite = next(c for c in report["candidates"] if c["candidate"]["target"] == "tflite"
                  and c["candidate"]["precision"] == "int8")
    assert tflite["bench"]["source"] != "estimate" and tflite["bench"]["runs"] > 0


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """bench/peers.py's MobileNetV2 (random conv weights, BatchNorm from real crops, a linear
    probe over 12 image classes), its calibration crops and labelled held-out crops."""
    sys.path.insert(0, str(ROOT / "bench"))
    from peerbench.models import build_cnn

    return build_cnn(tmp_path_factory.mktemp("mobilenet"))


@pytest.mark.slow
def test_the_bench_mobilenet_v2(mobilenet: dict[str, str], tmp_path: Path) -> None:
    profile = tmp_path / "imx93-npu.yaml"
    profile.write_text(NPU_ONLY)
    report = _optimize(mobilenet["onnx"], "--profile", str(profile), "--calib",
                       mobilenet["calib"], "--eval", mobilenet["eval"], "-o", str(tmp_path / "b"))
    found = _ethos_u(report)
    # 300M MACs, every operator on the NPU: millions of cycles, hundreds of KiB of SRAM
    assert "0 on the CPU" in _estimate(found) and not found["artifact"].get("fallbacks")
    cycles = int(_estimate(found).split(" cycles")[0].rsplit(" ", 1)[1])
    assert cycles > 1_000_000


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_a_trained_zoo_model(name: str, tmp_path: Path) -> None:
    entry = zoo.entry(name)
    path = zoo.model(entry)
    calib, held_file = zoo.write_data(entry, tmp_path)
    profile = tmp_path / "imx93-npu.yaml"
    profile.write_text(NPU_ONLY)
    flags = [a for s in entry.shapes for a in ("--shape", s)]
    flags += [a for s in entry.metrics for a in ("--metric", s)]
    report = _optimize(str(path), "--profile", str(profile), "--calib", str(calib), "--eval",
                       str(held_file), "-o", str(tmp_path / "bundle"), *flags)
    found = _ethos_u(report)
    if found["status"] == "rejected":  # the per-output verdicts above say why
        return
    # the task itself, judged as the zoo judges it, on the reference kernels' outputs
    _, held = zoo.split(entry, zoo.samples(entry))
    orig = original(path)
    model = artifact_model(tmp_path / "bundle", found, report["source"])
    scores = fidelity(entry, orig, outputs(orig, held), model, held)
    assert scores["passed"], scores
