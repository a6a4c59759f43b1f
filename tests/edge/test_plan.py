"""The plan is pure: profile + model + what the host can convert -> candidates with reasons."""

from __future__ import annotations

from pathlib import Path

from edge.core.capabilities import Capabilities
from edge.core.plan import Planned, make_plan
from edge.core.profile import load_profile
from edge.core.values import ModelInfo, TensorSpec
from targets.openvino import BF16, OpenVINOTarget

#: The file formats each runtime declares it runs as they are (its target's caps.formats).
_FORMATS = {"tflite": ("tflite",), "onnxruntime": ("onnx",), "openvino": ("openvino",)}
#: What the OpenVINO target declares bf16 needs (the core names no runtime: caps carry it).
_NEEDS = {"openvino": (("bf16", BF16),)}


def _caps(runtime: str, *precisions: str, archs: tuple[str, ...] = ()) -> Capabilities:
    return Capabilities(runtime=runtime, precisions=precisions, suffix=".x", archs=archs,
                        formats=_FORMATS.get(runtime, ()), needs_isa=_NEEDS.get(runtime, ()))


TARGETS = {"tflite": (_caps("tflite", "fp32", "fp16", "int8"), None),
           "onnxruntime": (_caps("onnxruntime", "fp32", "int8"), None)}


def _model(params: int) -> ModelInfo:
    spec = TensorSpec(name="x", shape=(1, 3), dtype="float32")
    return ModelInfo(path="m", sha256="0", size_bytes=1, opset=17, inputs=(spec,),
                     outputs=(spec,), params=params, macs=0)


def _plan(profile: str, params: int = 1000, targets=TARGETS):
    return {p.candidate.id: p for p in make_plan(load_profile(profile), _model(params), targets)}


def test_rpi4_tries_int8_and_fp32_in_runtime_order() -> None:
    plan = make_plan(load_profile("rpi4"), _model(1000), TARGETS)
    kept = [p.candidate.id for p in plan if p.keep]
    assert kept == ["tflite-int8", "tflite-fp32", "onnxruntime-int8", "onnxruntime-fp32"]


def test_fp16_only_where_the_hardware_computes_it() -> None:
    assert not _plan("rpi4")["tflite-fp16"].keep
    assert "no fp16 arithmetic" in _plan("rpi4")["tflite-fp16"].reason
    assert _plan("rpi5")["tflite-fp16"].keep  # Cortex-A76 has fp16 arithmetic


def test_bf16_only_on_x86_cpus_with_bf16_instructions(tmp_path: Path) -> None:
    targets = {"openvino": (_caps("openvino", "fp32", "bf16", "int8"), None)}
    assert _plan("cloud-c7i", targets=targets)["openvino-bf16"].keep  # AMX, AVX512-BF16
    assert "computes bf16" in _plan("cloud-c7i", targets=targets)["openvino-bf16"].reason
    avx2 = _plan("x86-64", targets=targets)["openvino-bf16"]
    assert not avx2.keep and "no bf16 that OpenVINO's CPU plugin computes" in avx2.reason
    zen4 = tmp_path / "zen4.yaml"  # AVX512-BF16 without AMX
    zen4.write_text("extends: x86-64\nid: zen4\ncompute: {isa: [avx2, avx512f, avx512_bf16]}\n")
    assert _plan(str(zen4), targets=targets)["openvino-bf16"].keep
    arm = tmp_path / "arm-bf16.yaml"  # Arm's bf16 is not what OpenVINO's CPU plugin runs
    arm.write_text("extends: rpi5\nid: arm-bf16\ncompute: {isa: [neon, bf16]}\n"
                   "runtimes: [openvino]\n")
    assert not _plan(str(arm), targets=targets)["openvino-bf16"].keep


def test_bf16_waits_for_a_host_that_can_verify_it() -> None:
    targets = {"openvino": (_caps("openvino", "fp32", "bf16", "int8"), None)}
    c7i, model = load_profile("cloud-c7i"), _model(1000)

    def bf16(host: frozenset[str]) -> Planned:
        plan = make_plan(c7i, model, targets, host_isa=host)
        return next(p for p in plan if p.candidate.id == "openvino-bf16")

    laptop = bf16(frozenset({"avx2", "fma"}))
    assert not laptop.keep and "could not be verified here" in laptop.reason
    assert bf16(frozenset({"avx2", "avx512_bf16"})).keep and bf16(frozenset({"amx_bf16"})).keep
    assert [p.candidate.precision for p in make_plan(c7i, model, targets)][:3] == [
        "int8", "fp32", "bf16"]  # bf16 ranks after fp32: its IR is fp32's, no smaller


def test_runtime_without_target_is_explained() -> None:
    plan = _plan("pixel-8")
    assert not plan["nnapi-*"].keep and "no nnapi target" in plan["nnapi-*"].reason


def test_missing_converter_drops_its_target_only() -> None:
    targets = dict(TARGETS, tflite=(_caps("tflite", "fp32", "int8"), "onnx2tf is not installed"))
    plan = _plan("rpi4", targets=targets)
    assert not plan["tflite-int8"].keep and "onnx2tf is not installed" in plan["tflite-int8"].reason
    assert plan["onnxruntime-int8"].keep


def test_model_over_the_budget_is_refused_per_precision() -> None:
    # rpi-zero-2w: 512 MB RAM; ~80M params: fp32 320 MB, int8 80 MB
    plan = _plan("rpi-zero-2w", params=80_000_000)
    budget = load_profile("rpi-zero-2w").memory.model_budget_mb
    assert 80 < budget < 305
    assert not plan["tflite-fp32"].keep and "budget" in plan["tflite-fp32"].reason
    assert plan["tflite-int8"].keep


def test_a_runtime_that_does_not_run_on_the_devices_arch_is_dropped_with_the_reason() -> None:
    targets = dict(TARGETS, tflite=(_caps("tflite", "fp32", "int8", archs=("x86_64",)), None))
    plan = _plan("rpi4", targets=targets)
    assert not plan["tflite-*"].keep and "does not run on aarch64" in plan["tflite-*"].reason
    assert plan["onnxruntime-int8"].keep


def test_a_target_module_that_did_not_import_is_explained() -> None:
    targets = dict(TARGETS, tflite=(None, "target module did not import: boom"))
    assert "did not import: boom" in _plan("rpi4", targets=targets)["tflite-*"].reason


def _original(profile: str, origin_format: str, ops: dict[str, int] | None = None,
              params: int = 1000):
    from dataclasses import replace

    model = replace(_model(params), ops=ops or {})
    plan = make_plan(load_profile(profile), model, TARGETS, origin_format)
    return plan[0], plan


def test_the_users_file_comes_first_when_the_device_runs_its_format() -> None:
    first, plan = _original("rpi4", "tflite")
    assert first.candidate.id == "original" and first.candidate.precision == "fp32"
    assert first.keep and "as it is, on tflite" in first.reason
    assert [p.candidate.id for p in plan if p.keep][1:] == [
        "tflite-int8", "tflite-fp32", "onnxruntime-int8", "onnxruntime-fp32"]
    onnx, _ = _original("rpi4", "onnx", ops={"ConvInteger": 2, "DynamicQuantizeLinear": 2})
    assert onnx.keep and onnx.candidate.precision == "int8-dynamic" and "onnxruntime" in onnx.reason


def test_the_users_file_is_explained_when_the_device_cannot_run_it() -> None:
    only_tflite = load_profile("rpi4").model_copy(update={"runtimes": ("tflite",)})
    plan = make_plan(only_tflite, _model(1000), TARGETS, "onnx")
    assert not plan[0].keep and "not onnxruntime" in plan[0].reason
    keras, _ = _original("rpi4", "keras")
    assert not keras.keep and "runs only once converted" in keras.reason
    assert make_plan(load_profile("rpi4"), _model(1000), TARGETS)[0].candidate.id != "original"


def test_an_already_quantized_model_is_not_quantized_again() -> None:
    # ddddocr's captcha model ships with DynamicQuantizeLSTM and ConvInteger: ORT's static
    # int8 of it failed with a bare "'140_scale'"; the plan says why int8 is not tried
    base = _model(1000)
    model = ModelInfo(path="m", sha256="0", size_bytes=1, opset=12, inputs=base.inputs,
                      outputs=base.outputs, params=1000, macs=0,
                      ops={"ConvInteger": 2, "DynamicQuantizeLSTM": 1})
    plan = {p.candidate.id: p for p in make_plan(load_profile("rpi4"), model, TARGETS)}
    for cid in ("tflite-int8", "onnxruntime-int8"):
        assert not plan[cid].keep
        assert "already quantized (int8-dynamic)" in plan[cid].reason
    assert plan["tflite-fp32"].keep and plan["onnxruntime-fp32"].keep
    assert all(p.keep for p in _plan("rpi4").values() if p.candidate.precision == "int8")


def test_a_target_with_a_layer_plan_gets_a_mixed_twin_of_its_int8() -> None:
    from dataclasses import replace

    from edge.core.plan import plan_pruned

    planned = Capabilities(runtime="openvino", precisions=("fp32", "int8"), suffix=".xml",
                           layer_plan="layers")
    targets = dict(TARGETS, openvino=(planned, None))
    plan = make_plan(load_profile("x86-64"), _model(1000), targets)
    ids = [p.candidate.id for p in plan if p.keep]
    assert ids.index("openvino-int8-mixed") == ids.index("openvino-fp32") + 1
    assert not any(i.startswith(("onnxruntime", "tflite")) and i.endswith("mixed") for i in ids)
    twins = [p.candidate.id for p in plan_pruned(plan, _model(1000), 0.5)]
    assert len(twins) == len(set(twins)) and "openvino-int8-mixed-pruned" not in " ".join(twins)
    # no int8 to measure: no twin
    abroad = {p.candidate.id: p for p in make_plan(load_profile("x86-64"), _model(1000), targets,
                                                    timed_here=False)}
    assert not abroad["openvino-int8-mixed"].keep  # this host's times do not stand for it
    assert "do not stand for the x86_64 device's kernels" in abroad["openvino-int8-mixed"].reason
    fp32_only = dict(targets, openvino=(replace(planned, precisions=("fp32",)), None))
    plan = make_plan(load_profile("x86-64"), _model(1000), fp32_only)
    assert "openvino-int8-mixed" not in {p.candidate.id for p in plan}


def test_openvino_int8_dynamic_only_for_matrix_products_on_x86_with_vnni(
        tmp_path: Path) -> None:
    """OpenVINO's int8-dynamic quantizes matrix products only, on x86 CPUs with VNNI or AMX (its
    CPU plugin's run-time quantization): a model without MatMul/Gemm, an AVX2-only CPU or an ARM
    device gets it skipped with the reason."""
    caps = OpenVINOTarget.caps
    targets = {"openvino": (caps, None)}
    spec = TensorSpec(name="x", shape=(1, 3), dtype="float32")

    def dynamic(profile: str, ops: dict[str, int]) -> Planned:
        model = ModelInfo(path="m", sha256="0", size_bytes=1, opset=17, inputs=(spec,),
                          outputs=(spec,), params=1000, macs=0, ops=ops)
        plan = make_plan(load_profile(profile), model, targets)
        return next(p for p in plan if p.candidate.id == "openvino-int8-dynamic")

    assert dynamic("cloud-c7i", {"MatMul": 12, "Softmax": 2}).keep  # AVX512-VNNI, AMX
    assert dynamic("cloud-c7i", {"Gemm": 1, "Conv": 3}).keep
    convs = dynamic("cloud-c7i", {"Conv": 8, "Relu": 8})
    assert not convs.keep and "no MatMul or Gemm" in convs.reason
    avx2 = dynamic("x86-64", {"MatMul": 12})
    assert not avx2.keep and "AVX-VNNI, AVX512-VNNI or AMX" in avx2.reason
    arm = tmp_path / "arm.yaml"
    arm.write_text("extends: rpi5\nid: arm-ov\nruntimes: [openvino]\n")
    assert not dynamic(str(arm), {"MatMul": 12}).keep
