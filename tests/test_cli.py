"""The CLI contract: exit statuses, one-line errors, --json documents, a fast --help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli, run_edge
from tests.support.profiles import one_runtime

ROOT = Path(__file__).parents[1]
HEAVY = ("tensorflow", "openvino", "torch", "onnx2tf", "onnxruntime", "paramiko", "rich")


@pytest.mark.parametrize("argv", [["--help"], ["deploy", "--help"], ["optimize", "--help"],
                                  ["profiles", "list"]])
def test_startup_imports_no_framework(argv: list[str]) -> None:
    code = (f"import sys; from edge.cli import main; main({argv!r}); "
            "print('\\nLOADED', sorted({m.split('.')[0] for m in sys.modules}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    loaded = json.loads(done.stdout.rsplit("LOADED", 1)[1].strip().replace("'", '"'))
    assert not [m for m in HEAVY if m in loaded], loaded


def test_every_command_help_has_an_example() -> None:
    for argv in (["--help"], ["inspect", "--help"], ["optimize", "--help"],
                 ["deploy", "--help"], ["profiles", "--help"], ["profiles", "show", "--help"],
                 ["profiles", "list", "--help"], ["profiles", "validate", "--help"],
                 ["profiles", "schema", "--help"]):
        result = run_cli(*argv)
        assert result.status == 0, argv
        assert "Example" in result.stdout, argv


def test_profiles_list_json_has_the_catalog() -> None:
    result = run_cli("profiles", "list", "--json")
    assert result.status == 0
    ids = {p["id"] for p in result.json()["profiles"]}
    assert len(ids) >= 10
    assert {"rpi4", "rpi5", "jetson-nano", "jetson-orin-nano", "coral-dev-board", "pixel-8",
            "intel-nuc", "imx8mp", "x86-64", "cloud-t4"} <= ids


def test_profiles_show_resolves_extends(tmp_path: Path) -> None:
    mine = tmp_path / "my-pi.yaml"
    mine.write_text("extends: rpi4\nid: my-pi\nmemory: {model_budget_mb: 256}\n")
    result = run_cli("profiles", "show", str(mine), "--json")
    assert result.status == 0, result.stderr
    shown = result.json()
    assert shown["memory"] == {"ram_mb": 4096, "model_budget_mb": 256}
    assert shown["compute"]["cpu"] == "Cortex-A72"


def test_profiles_validate_names_file_and_key(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("extends: rpi4\nid: broken\ncompute: {cores: -2}\n")
    good = Path(__file__).parents[1] / "profiles" / "rpi5.yaml"
    result = run_cli("profiles", "validate", str(good), str(broken))
    assert result.status == 2
    assert len(result.error_lines) == 1
    assert str(broken) in result.error_lines[0] and "compute.cores" in result.error_lines[0]
    assert "ok" in result.stdout and "rpi5" in result.stdout


def test_profiles_schema_is_json_schema() -> None:
    schema = run_cli("profiles", "schema").json()
    assert {"compute", "memory", "storage", "power", "accelerators", "runtimes", "link",
            "access"} <= set(schema["properties"])


def test_unknown_profile_is_one_line_usage_error(tmp_path: Path) -> None:
    result = run_cli("optimize", "sample:digits", "--profile", "rpi9", "-o",
                     str(tmp_path / "out"))
    assert result.status == 2
    assert result.stderr.count("\n") == 1
    assert "unknown profile 'rpi9'" in result.stderr and "rpi4" in result.stderr
    assert not (tmp_path / "out").exists()


def test_inspect_reports_params_macs_and_fit() -> None:
    result = run_cli("inspect", "sample:digits", "--profile", "rpi-zero-2w", "--json")
    assert result.status == 0, result.stderr
    info = result.json()
    assert info["inputs"][0]["shape"] == [1, 1, 8, 8]
    assert info["ops"]["Conv"] == 3
    # 3 convs + 2 gemms of the shipped digits CNN, counted by hand from its layer shapes
    assert info["macs"] == 64 * 16 * 9 + 64 * 32 * 16 * 9 + 16 * 32 * 32 * 9 + 128 * 64 + 64 * 10
    assert info["fit"]["fits"] is True


def test_corrupt_model_is_refused_without_output(tmp_path: Path) -> None:
    model = tmp_path / "broken.onnx"
    model.write_bytes(b"\x08\x07this is not protobuf" * 10)
    out = tmp_path / "bundle"
    result = run_cli("optimize", str(model), "--profile", "rpi4", "-o", str(out))
    assert result.status == 2
    assert len(result.stderr.splitlines()) == 1 and str(model) in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [model]


def test_dry_run_lists_plan_without_converting(tmp_path: Path) -> None:
    result = run_cli("optimize", "sample:digits", "--profile", "rpi4", "--dry-run", "--json",
                     "-o", str(tmp_path / "b"))
    assert result.status == 0
    plan = {p["candidate"]: p for p in result.json()["plan"]}
    assert plan["tflite-int8"]["keep"] and plan["onnxruntime-int8"]["keep"]
    assert not plan["tflite-fp16"]["keep"] and "fp16" in plan["tflite-fp16"]["reason"]
    assert not (tmp_path / "b").exists()


def test_bad_data_file_names_the_shape(tmp_path: Path) -> None:
    import numpy as np

    calib = tmp_path / "calib.npy"
    np.save(calib, np.zeros((10, 3, 8, 8), np.float32))
    result = run_cli("optimize", "sample:digits", "--profile", "rpi4", "--calib", str(calib),
                     "-o", str(tmp_path / "b"))
    assert result.status == 2
    assert "[3, 8, 8]" in result.stderr and "input" in result.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("case", ["corrupt-model", "unknown-profile", "missing-identity",
                                  "hostile-host"])
def test_deploy_bad_input_fails_before_touching_anything(case: str, tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(b"\x00garbage" if case == "corrupt-model" else
                      (Path(__file__).parents[1] / "edge/samples/digits.onnx").read_bytes())
    args = {"profile": "rpi9" if case == "unknown-profile" else "rpi4",
            "host": "pi@host;reboot" if case == "hostile-host" else "pi@127.0.0.1:1",
            "identity": str(tmp_path / "no-such-key")}
    argv = ["deploy", str(model), "--profile", args["profile"], "--host", args["host"],
            "-o", str(tmp_path / "out")]
    if case == "missing-identity":
        argv += ["--identity", args["identity"]]
    result = run_cli(*argv)
    assert result.status == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: ")
    expected = {"corrupt-model": "not a valid ONNX model", "unknown-profile": "unknown profile",
                "missing-identity": "no such key file",
                "hostile-host": "not a valid host name"}[case]
    assert expected in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


def test_deploy_unreachable_host_is_exit_3(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    result = run_cli("deploy", "sample:digits", "--profile", "rpi4", "--host",
                     "pi@127.0.0.1:1", "--known-hosts", str(known), "-o", str(tmp_path / "b"))
    assert result.status == 3
    assert "cannot connect to 127.0.0.1:1" in result.stderr
    assert not (tmp_path / "b").exists()


def test_a_model_that_cannot_fit_is_refused_up_front(tmp_path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((1100, 1024), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "big",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1100])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1024])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "big.onnx")
    profile = tmp_path / "tiny.yaml"
    profile.write_text("extends: rpi4\nid: tiny\nmemory: {ram_mb: 64, model_budget_mb: 1}\n")
    result = run_cli("optimize", str(tmp_path / "big.onnx"), "--profile", str(profile),
                     "-o", str(tmp_path / "out"))
    assert result.status == 1, result.stderr
    assert "does not fit tiny" in result.stderr and "1 MB budget" in result.stderr
    assert not (tmp_path / "out").exists()
    inspected = run_cli("inspect", str(tmp_path / "big.onnx"), "--profile", str(profile))
    assert inspected.status == 1 and "do NOT fit" in inspected.stdout


# ------------------------------------------------------------------ exit 4, warnings, spellings
def test_an_internal_error_is_exit_4_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug (any exception that is not an EdgeError) is exit 4, never 1 (a failed check)."""
    import edge.core.profile

    def broken() -> list[str]:
        raise RuntimeError("catalog exploded\nsecond line")

    monkeypatch.setattr(edge.core.profile, "catalog_ids", broken)
    for argv in (["profiles", "list"], ["profiles", "list", "--json"]):
        result = run_cli(*argv)
        assert result.status == 4, result.stderr
        assert result.stdout == ""
        assert result.stderr == ("error: internal error: RuntimeError: catalog exploded (a bug "
                                 "in edge: re-run with --traceback and report it)\n")
    shown = run_cli("profiles", "list", "--traceback")  # the stack, and still exit 4
    assert shown.status == 4 and "Traceback (most recent call last)" in shown.stderr
    assert shown.stderr.rstrip().splitlines()[-1].startswith("error: internal error: RuntimeError")
    usage = run_cli("--traceback", "inspect", "/nonexistent/m.onnx")  # an EdgeError: still 2
    assert usage.status == 2 and "Traceback" in usage.stderr


def test_user_errors_keep_their_statuses() -> None:
    """The EdgeError family and click's usage errors are not internal errors."""
    assert run_cli("profiles", "show", "rpi9").status == 2
    assert run_cli("optimize", "sample:digits").status == 2  # missing --profile
    assert run_cli("frobnicate").status == 2


def test_json_carries_the_latency_budget_warning(tmp_path: Path) -> None:
    """On this x86_64 host an rpi4 latency budget cannot be applied: --json says so in the
    document (and stdout holds nothing else); text mode says so on stderr."""
    profile = one_runtime(tmp_path)  # the warning is the plan's, not a runtime's
    argv = ["optimize", "sample:digits", "--profile", str(profile), "--latency-budget", "5"]
    done = run_edge(*argv, "-o", str(tmp_path / "a"), "--json")
    assert done.status == 0, done.stderr
    document = json.loads(done.stdout)  # the whole of stdout is the one document
    assert isinstance(document, dict) and document["chosen"]
    budget = [w for w in document["warnings"] if w.startswith("--latency-budget not applied")]
    assert budget == ["--latency-budget not applied here: this host is x86_64, the device aarch64 "
                      "(edge deploy --on-device applies it to the device's own timings)"], document
    assert f"warning: {budget[0]}" in done.stderr.splitlines()
    text = run_cli(*argv, "-o", str(tmp_path / "b"))  # stderr is no terminal here
    assert text.status == 0, text.stderr
    assert f"warning: {budget[0]}" in text.stderr.splitlines()
    assert "warning" not in text.stdout


def test_python_warnings_are_collected_once_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    import edge.core.profile

    real = edge.core.profile.catalog_ids

    def warned() -> list[str]:
        for _ in range(3):  # one call site, three times: shown once
            warnings.warn("catalog is stale", UserWarning, stacklevel=1)
        return real()

    monkeypatch.setattr(edge.core.profile, "catalog_ids", warned)
    for _ in range(2):  # Python shows a warning once per place; edge once per run
        result = run_cli("profiles", "list", "--json")
        assert result.status == 0
        assert result.json()["warnings"] == ["catalog is stale"]
        assert result.stderr.splitlines() == ["warning: catalog is stale"]
    assert run_cli("profiles", "list", "--json").json()["warnings"] == ["catalog is stale"]
    monkeypatch.setattr(edge.core.profile, "catalog_ids", real)
    assert run_cli("profiles", "list", "--json").json()["warnings"] == []


@pytest.mark.parametrize("argv", [
    ["profiles", "list", "--json"],
    ["profiles", "show", "rpi4", "--json"],
    ["profiles", "validate", "profiles/rpi4.yaml", "--json"],
    ["inspect", "sample:digits", "--json"],
    ["optimize", "sample:digits", "--profile", "rpi4", "--dry-run", "--json"],
    ["deploy", "sample:digits", "--profile", "rpi4", "--dry-run", "--json"],
])
def test_every_json_document_is_an_object_with_warnings(argv: list[str]) -> None:
    result = run_cli(*[str(ROOT / a) if a.startswith("profiles/") else a for a in argv])
    assert result.status == 0, result.stderr
    document = result.json()
    assert isinstance(document, dict) and document["warnings"] == []


def test_on_device_is_the_one_spelling_and_the_old_one_warns() -> None:
    for command in ("deploy", "partition"):
        shown = run_cli(command, "--help").stdout
        assert "--on-device" in shown and "--measure-on-device" not in shown
    base = ["deploy", "sample:digits", "--profile", "rpi4", "--dry-run", "--json"]
    plain, new, old = (run_cli(*base, *extra).json()
                       for extra in ([], ["--on-device"], ["--measure-on-device"]))
    assert "benchmark every faithful candidate on the device" not in " ".join(plain["steps"])
    assert "benchmark every faithful candidate on the device" in " ".join(new["steps"])
    assert old["steps"] == new["steps"] and new["warnings"] == []
    assert old["warnings"] == ["--measure-on-device is deprecated and will be removed: use "
                               "--on-device"]


def test_serve_cloud_binds_with_bind_and_refuses_host(tmp_path: Path) -> None:
    shown = run_cli("serve-cloud", "--help").stdout
    assert "--bind ADDR" in shown and "--host" not in shown
    result = run_cli("serve-cloud", str(tmp_path), "--host", "0.0.0.0")
    assert result.status == 2
    assert result.stderr == ("error: serve-cloud has no --host: it listens on --bind ADDR "
                             "(--host names the device in other commands); use --bind 0.0.0.0\n")


def test_a_flow_warning_reaches_the_json_document(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """deploy logs (no longer prints) that a bundle meets another profile: --json lists it."""
    monkeypatch.setenv("EDGE_LOCAL_DEVICE", str(tmp_path / "device"))
    bundle = tmp_path / "rpi4.bundle"
    pi4, pi5 = one_runtime(tmp_path), one_runtime(tmp_path, "rpi5")
    made = run_cli("optimize", "sample:digits", "--profile", str(pi4), "-o", str(bundle))
    assert made.status == 0, made.stderr
    result = run_cli("deploy", str(bundle), "--profile", str(pi5), "--runs", "5", "--json")
    assert result.status == 0, result.stderr
    said = "bundle was optimized for rpi4-onnxruntime, deploying with rpi5-onnxruntime"
    assert result.json()["warnings"] == [said]
    assert f"warning: {said}" in result.stderr
