"""Reading a model never runs code from it unless --trust-model-code (issue 27, class 1).

Real hostile files (tests/support/hostile_code.py): pickles that call exec or os.system, a
whole pickled module whose class writes a file, Keras H5 files with a Lambda, SavedModels whose
signature writes, reads or lists files or calls Python. Each writes ``code-ran`` in the working
directory when it runs.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import h5py
import pytest

from edge.core.bounded import DEADLINE_ENV
from edge.core.errors import UsageError
from edge.core.intake import check_model_file, to_reference
from edge.core.intake.pytorch import risky_graph_op, risky_script_call
from edge.core.intake.tfgraph import (
    RISKY_TF_OPS,
    read_saved_model,
    risky_ops,
    saved_model_message,
)
from edge.core.intake.trust import OPT_IN, refuse_model_code
from tests.support.cli import run_cli
from tests.support.hostile_code import (
    FILES,
    LIMITED,
    MARKER,
    RUN_LIMITED,
    SPELLINGS,
    argv,
    built,
    deadline_for,
)

#: One file of each family: a pickle, a Keras Lambda, a SavedModel that writes.
FAMILIES = {"pickle": "pickle-exec.pt", "h5": "lambda.h5", "savedmodel": "writefile.savedmodel"}


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory: where a file that runs writes its marker."""
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    return here


def _model(tmp_path: Path, name: str) -> Path:
    path = tmp_path / ("m.savedmodel" if name.endswith(".savedmodel")
                       else f"m.{name.rsplit('.', 1)[-1]}")
    FILES[name](path)
    return path


@pytest.mark.parametrize("command", ["inspect", "optimize", "deploy", "partition"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_model_that_runs_code_is_refused_by_every_command(
    tmp_path: Path, cwd: Path, family: str, command: str,
) -> None:
    model = _model(tmp_path, FAMILIES[family])
    result = run_cli(*(a.replace("{d}", str(tmp_path)) for a in argv(command, str(model))))
    assert result.status == 2, result.stderr
    assert len(result.error_lines) == 1 and OPT_IN in result.error_lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (cwd / MARKER).exists(), "the model's code ran"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", sorted(set(FILES) - set(RUN_LIMITED)))
def test_every_hostile_file_is_refused_before_any_loader(tmp_path: Path, cwd: Path,
                                                         name: str) -> None:
    model = _model(tmp_path, name)
    with deadline_for(name), pytest.raises(UsageError, match=LIMITED.get(name, OPT_IN)):
        check_model_file(model)
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("name", RUN_LIMITED)
def test_a_first_run_past_its_limits_is_stopped_in_its_child(tmp_path: Path, cwd: Path,
                                                            name: str) -> None:
    """Issue 39: code that passes every check but never returns, or asks for 64 GB, when
    edge first runs forward (the reference's export; a SavedModel's in the TensorFlow child):
    one line naming the limit, no process left, nothing written."""
    model = _model(tmp_path, name)
    check_model_file(model)  # nothing in its graph but tensor math and a loop
    with deadline_for(name), pytest.raises(UsageError, match=LIMITED[name]):
        to_reference(model, tmp_path / "work",
                     shapes={} if name.endswith(".savedmodel") else {"x": (1, 4)})
    mine = str(tmp_path).encode()  # the child's job file is in the test's folder
    left = [p for p in Path("/proc").glob("[0-9]*/cmdline") if mine in _read(p)
            and (b"torchref" in _read(p) or b"edge.core.intake.tf" in _read(p))]
    assert left == [] and list(cwd.iterdir()) == []
    assert not any((tmp_path / "work").rglob("*.onnx"))


@pytest.mark.parametrize("name, says", [
    ("pickle-exec.pt", "it calls exec"), ("pickle-system.pt", "it calls os.system"),
    ("torch-module.pt", "it calls tests.support.model_code_torch.Booby"),
    ("pickle-inst.pt", "weights-only unpickler stops"),
    ("script-from-file.pt", "its TorchScript code calls torch.from_file"),
    ("script-save.pt", "its TorchScript code calls torch.save"),
    *((f"script-{s}.pt", "through getattr or parentheses") for s in SPELLINGS),
    ("script-setstate-save.pt", "calls torch through getattr or parentheses"),
    ("polyglot.h5", "a Lambda layer"),
    ("saver-savev2.savedmodel", "runs SaveV2"),
    ("dataset-from-graph.savedmodel", "runs DatasetFromGraph"),
    ("lambda.h5", "a Lambda layer"), ("nested-lambda.h5", "a Lambda layer"),
    ("writefile.savedmodel", "runs WriteFile"), ("readfile.savedmodel", "runs ReadFile"),
    ("matchingfiles.savedmodel", "runs MatchingFiles"),
    ("nested-writefile.savedmodel", "runs WriteFile"), ("save-op.savedmodel", "runs Save "),
])
def test_the_refusal_names_the_risk(tmp_path: Path, name: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        check_model_file(_model(tmp_path, name))


def test_the_opt_in_loads_a_pickled_module(tmp_path: Path, cwd: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # a cache of its own: another test's reference of the same file would skip the load
    monkeypatch.setenv("EDGE_CACHE_DIR", str(tmp_path / "cache"))
    model = _model(tmp_path, "torch-module.pt")
    result = run_cli("inspect", str(model), "--shape", "x=1,4", "--trust-model-code", "--json")
    assert result.status == 0, result.stderr
    assert [o["shape"] for o in result.json()["outputs"]] == [[1, 2]]
    assert (cwd / MARKER).exists()  # the user asked for it: the class's code ran


def test_the_opt_in_reaches_optimize_and_deploy(tmp_path: Path, cwd: Path) -> None:
    model = _model(tmp_path, "torch-module.pt")
    plan = run_cli("optimize", str(model), "--profile", "x86-64", "--shape", "x=1,4",
                   "--dry-run", "--trust-model-code")
    assert plan.status == 0, plan.stderr
    deploy = run_cli("deploy", str(model), "--profile", "x86-64", "--shape", "x=1,4",
                     "--dry-run", "--trust-model-code")
    assert deploy.status == 0, deploy.stderr
    refused = run_cli("deploy", str(model), "--profile", "x86-64", "--dry-run")
    assert refused.status == 2 and OPT_IN in refused.stderr


def test_the_opt_in_reaches_partition(tmp_path: Path, cwd: Path) -> None:
    model = _model(tmp_path, "torch-module.pt")
    result = run_cli("partition", str(model), "--profile", "rpi4", "--cloud", "cloud-c7i",
                     "--shape", "x=1,4", "-o", str(tmp_path / "split"), "--trust-model-code")
    assert result.status == 0, result.stderr
    assert (tmp_path / "split" / "split.yaml").is_file()


def test_torchscript_and_plain_weights_are_data(tmp_path: Path, cwd: Path) -> None:
    script = tmp_path / "script.pt"
    FILES["torch-module.pt"](tmp_path / "whole.pt")
    import tests.support.model_code_torch as torch_files

    torch_files.scripted(script)
    check_model_file(script)  # no refusal: TorchScript runs no Python of the file
    ref = to_reference(script, tmp_path / "work", shapes={"input": (1, 4)})
    assert ref.suffix == ".onnx"
    torch = pytest.importorskip("torch")
    weights = tmp_path / "weights.pt"
    torch.save(torch_files.Booby().state_dict(), weights)
    with pytest.raises(UsageError, match="holds a state_dict, not a module"):
        check_model_file(weights)
    assert list(cwd.iterdir()) == []


def test_a_clean_savedmodel_keeps_its_saver_ops_out_of_the_scan() -> None:
    folder = built("clean.savedmodel")
    ops = {n.op for meta in read_saved_model(folder).meta_graphs
           for f in meta.graph_def.library.function for n in f.node_def}
    assert {"SaveV2", "RestoreV2", "MergeV2Checkpoints"} <= ops  # every SavedModel has them
    assert risky_ops(folder) == []
    refuse_model_code(folder, "savedmodel")


def _saver_graph(folder: Path, ops: dict[str, str], *, save: str = "",
                 main: str = "") -> Path:
    """A saved_model.pb whose SaverDef restores by node "restore" from the checkpoint named by
    node "filename" (saves by ``save``), from ``ops`` (name: op, each node reading the one
    before; a restore op reads its path, the first input, from the node before), with ``main``
    in the main-op collection."""
    message = saved_model_message()()
    meta = message.meta_graphs.add()
    meta.saver_def.restore_op_name = "restore"
    meta.saver_def.filename_tensor_name = "filename:0"
    meta.saver_def.save_tensor_name = save
    if main:
        entry = meta.collection_def.add(key="saved_model_main_op")
        entry.value.node_list.value.append(main)
    before = None
    for name, op in ops.items():
        node = meta.graph_def.node.add(name=name, op=op)
        if before:
            node.input.append(before if op.startswith("Restore") else f"^{before}")
        before = name
    folder.mkdir()
    (folder / "saved_model.pb").write_bytes(message.SerializeToString())
    return folder


def test_the_saver_may_restore_but_not_write_files(tmp_path: Path) -> None:
    """A TF1 loader runs the SaverDef's restore op: only checkpoint ops are allowed there."""
    assert risky_ops(_saver_graph(tmp_path / "a", {"filename": "Const", "read": "RestoreV2",
                                                   "restore": "NoOp"})) == []
    assert risky_ops(_saver_graph(tmp_path / "b", {"evil": "WriteFile", "restore": "NoOp"})
                     ) == ["WriteFile"]


def test_the_restore_op_reaches_only_restore_ops_of_the_loaders_checkpoint(
    tmp_path: Path,
) -> None:
    """What the restore op reaches: SaveV2 (any checkpoint op but a restore) is refused, and a
    restore op reading another path than SaverDef.filename_tensor_name too."""
    assert risky_ops(_saver_graph(tmp_path / "a", {"filename": "Const", "read": "RestoreV2",
                                                   "restore": "NoOp"})) == []
    assert risky_ops(_saver_graph(tmp_path / "b", {"evil": "SaveV2", "restore": "NoOp"})
                     ) == ["SaveV2"]
    assert risky_ops(_saver_graph(tmp_path / "c", {"elsewhere": "Const", "read": "RestoreV2",
                                                   "restore": "NoOp"})
                     ) == ["RestoreV2 (of a path the loader does not name)"]


def test_the_save_op_alone_may_save_but_a_main_op_is_scanned(tmp_path: Path) -> None:
    """The save op (never run by a load) may hold SaveV2; the same node named as the main op
    (run by the loader) is scanned like any other."""
    graph = {"restore": "NoOp", "write": "SaveV2", "saved": "Identity"}
    assert risky_ops(_saver_graph(tmp_path / "a", graph, save="saved:0")) == []
    assert risky_ops(_saver_graph(tmp_path / "b", graph, save="saved:0", main="saved")
                     ) == ["SaveV2"]


def test_graphs_from_serialized_graphdefs_are_refused() -> None:
    assert {"DatasetFromGraph", "DeserializeIterator", "RemoteCall"} <= RISKY_TF_OPS


def test_a_text_saved_model_is_scanned_too(tmp_path: Path) -> None:
    from google.protobuf import text_format

    folder = _saver_graph(tmp_path / "a", {"evil": "ReadFile", "use": "Identity"})
    message = saved_model_message()()
    message.ParseFromString((folder / "saved_model.pb").read_bytes())
    (folder / "saved_model.pb").unlink()
    (folder / "saved_model.pbtxt").write_text(text_format.MessageToString(message))
    with pytest.raises(UsageError, match="runs ReadFile"):
        check_model_file(folder)


def test_python_ops_are_refused() -> None:
    assert risky_ops(built("pyfunc.savedmodel")) == ["EagerPyFunc"]
    assert {"PyFunc", "PyFuncStateless", "EagerPyFunc", "WriteFile", "ReadFile",
            "MatchingFiles", "ImmutableConst"} <= RISKY_TF_OPS


def test_a_saved_model_pb_that_does_not_parse_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "m.savedmodel"
    folder.mkdir()
    (folder / "saved_model.pb").write_bytes(b"\xff\xff\xff garbage")
    with pytest.raises(UsageError, match=f"is not a SavedModel .*{OPT_IN}"):
        check_model_file(folder)


def _h5(path: Path, config: dict) -> Path:
    with h5py.File(path, "w") as handle:
        handle.attrs["model_config"] = json.dumps(config)
    return path


def _layer(kind: str, **config: object) -> dict:
    return {"class_name": kind, "config": {"name": "l", **config}}


@pytest.mark.parametrize("layer, says", [
    (_layer("TFOpLambda", function="io.write_file"), "calls tf.io.write_file"),
    (_layer("TFOpLambda", function="raw_ops.WriteFile"), "calls tf.raw_ops.WriteFile"),
    (_layer("TFOpLambda", function="py_function"), "calls tf.py_function"),
    ({"module": "subprocess", "class_name": "Popen", "config": {}}, "module 'subprocess'"),
    (_layer("Lambda", function="lambda x: x"), "a Lambda layer"),
])
def test_risky_keras_configs_are_refused(tmp_path: Path, layer: dict, says: str) -> None:
    config = {"class_name": "Functional", "config": {"layers": [
        _layer("Dense", units=2), {"class_name": "Functional", "config": {"layers": [layer]}}]}}
    with pytest.raises(UsageError, match=says):
        refuse_model_code(_h5(tmp_path / "m.h5", config), "keras")


@pytest.mark.parametrize("layer, says", [
    (_layer("SlicingOpLambda", function="io.write_file"), "calls tf.io.write_file"),
    (_layer("ClassMethod", cls_symbol="io.write_file", method_name="__call__"),
     "calls tf.io.write_file.__call__"),
    (_layer("ClassMethod", cls_symbol="RaggedTensor", method_name="__init__"), "__init__"),
    (_layer("InstanceMethod", attr_name="numpy"), "reads the tensor's 'numpy'"),
    (_layer("InstanceProperty", attr_name="__class__"), "'__class__'"),
    (_layer("TFOpLambda", function="profiler.experimental.start"), "tf.profiler"),
    (_layer("TFOpLambda", function="load_op_library"), "tf.load_op_library"),
    (_layer("TFOpLambda", function="load_library"), "tf.load_library"),
    (_layer("TFOpLambda", function="config.experimental_connect_to_host"), "tf.config."),
    (_layer("TFOpLambda", function="distribute.experimental_set_strategy"), "tf.distribute"),
    (_layer("TFOpLambda", function="compat.v1.WholeFileReader"), "WholeFileReader"),
    (_layer("TFOpLambda", function="train.Saver"), "tf.train.Saver"),
    (_layer("TFOpLambda", function="saved_model.load"), "tf.saved_model.load"),
    (_layer("TFOpLambda", function="summary.write"), "tf.summary.write"),
    (_layer("TFOpLambda", function="debugging.enable_check_numerics"), "tf.debugging"),
])
def test_op_layers_call_only_tensor_math(tmp_path: Path, layer: dict, says: str) -> None:
    """tf_keras resolves an op layer's function, class method or tensor attribute by name: only
    math namespaces and plain array ops pass (an allowlist, not a deny-list)."""
    config = {"class_name": "Functional", "config": {"layers": [layer]}}
    with pytest.raises(UsageError, match=says):
        refuse_model_code(_h5(tmp_path / "m.h5", config), "keras")


def test_a_polyglot_is_checked_both_as_hdf5_and_as_a_zip(tmp_path: Path) -> None:
    """An HDF5 file behind a user block (found by h5py past offset 0) with a zip appended:
    the zip's config.json is checked too, whichever reader Keras picks."""
    path = tmp_path / "m.h5"
    with h5py.File(path, "w", userblock_size=512) as handle:
        handle.attrs["model_config"] = json.dumps({"class_name": "Sequential", "config": {}})
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("config.json", json.dumps(
            {"class_name": "Sequential", "config": {"layers": [_layer("Lambda")]}}))
    assert h5py.is_hdf5(path) and zipfile.is_zipfile(path)
    with pytest.raises(UsageError, match="a Lambda layer"):
        refuse_model_code(path, "keras")


@pytest.mark.parametrize("code, found", [
    ("torch.save(x, 'f')", "torch.save"), ("_0 = torch .\\\n save(x)", "torch.save"),
    ("y = (torch.\n from_file('f', True, 4))", "torch.from_file"),
    ("ops.aten.save(x, 'f')", "ops.aten.save"), ("torch.load('f')", "torch.load"),
    ("torch.jit.load('f')", "torch.jit.load"), ("ops.c10d.send(x)", "ops.c10d.send"),
    ("ops.prim.rpc_sync('w', f)", "ops.prim.rpc_sync"),
    ("torch.distributed.barrier()", "torch.distributed.barrier"),
    ("ops.profiler._record_function_enter('a')", "ops.profiler._record_function_enter"),
    ("torch.ops.my_lib.op(x)", "torch.ops.my_lib.op"),
    ("p: __torch__.torch.classes.dist_c10d.ProcessGroup", "classes.dist_c10d"),
    ("torch.autograd.profiler.record_function('a')", "torch.autograd.profiler"),
    ("x = ('", "code edge cannot read"),
])
def test_torchscript_calls_outside_tensor_math_are_refused(code: str, found: str) -> None:
    assert found in (risky_script_call(code) or "")


@pytest.mark.parametrize("code", [
    'getattr(torch, "save")(x, "f")', 'getattr(ops, "aten").save(x, "f")', "(torch).save(x)",
    "(ops.aten).save(x)", 'getattr((torch), "save")(x)', 'getattr(ops.aten, "save")(x)',
    "f = torch\n", "y = ops.aten\n",
])
def test_a_namespace_that_is_not_called_is_refused(code: str) -> None:
    assert "through getattr or parentheses" in (risky_script_call(code) or "")


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_the_compiled_graph_refuses_what_the_text_check_misses(
        tmp_path: Path, cwd: Path, spelling: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the text check blind, the graph of forward still names aten::save."""
    model = _model(tmp_path, f"script-{spelling}.pt")
    monkeypatch.setattr("edge.core.intake.pytorch.risky_script_call", lambda text: None)
    with pytest.raises(UsageError, match="its TorchScript graph calls aten::save"):
        check_model_file(model)
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("graph, found", [
    ({"ops": ["aten::linear", "prim::Loop", "quantized::linear"], "calls": []}, None),
    ({"ops": ["aten::relu", "aten::save"], "calls": []}, "aten::save"),
    ({"ops": ["aten::from_file"], "calls": []}, "aten::from_file"),
    ({"ops": ["c10d::allreduce_"], "calls": []}, "c10d::allreduce_"),
    ({"ops": ["profiler::_record_function_enter_new"], "calls": []}, "profiler::"),
    ({"ops": ["my_lib::run"], "calls": []}, "my_lib::run"),
    ({"ops": ["prim::CallMethod"],
      "calls": ["__torch__.torch.classes.quantized.LinearPackedParamsBase.unpack"]}, None),
    ({"ops": ["prim::CallMethod"],
      "calls": ["__torch__.torch.classes.dist_c10d.ProcessGroup.barrier"]}, "dist_c10d"),
    ({"ops": ["prim::CallFunction"], "calls": ["Function.?"]}, "Function"),
])
def test_graph_ops_outside_tensor_math_are_refused(graph: dict, found: str | None) -> None:
    got = risky_graph_op(graph)
    assert (got is None) if found is None else (found in (got or "")), got


def test_a_load_that_never_ends_is_stopped_and_leaves_nothing(
        tmp_path: Path, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(tmp_path, "script-setstate-loop.pt")
    monkeypatch.setenv(DEADLINE_ENV, "3")
    with pytest.raises(UsageError, match="still running after 3 s"):
        check_model_file(model)
    left = [p for p in Path("/proc").glob("[0-9]*/cmdline")
            if str(model).encode() in _read(p)]
    assert left == [], "the checker was left running"


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def test_torchscript_tensor_math_passes() -> None:
    code = ("def forward(self, x: Tensor) -> Tensor:\n  # torch.save in a comment\n"
            "  _0 = torch.linear(ops.aten.relu(x), torch.ones([4, 4]))\n"
            "  ops.prim.Print('saved')\n"
            "  p: __torch__.torch.classes.quantized.LinearPackedParamsBase = self.p\n"
            "  return ops.quantized.linear(_0, p, 1.0, 0)\n")
    assert risky_script_call(code) is None


def test_plain_keras_configs_pass(tmp_path: Path) -> None:
    config = {"class_name": "Functional", "module": "keras.src.models.functional",
              "config": {"layers": [_layer("TFOpLambda", function="math.add"),
                                    _layer("TFOpLambda", function="reshape"),
                                    _layer("TFOpLambda", function="compat.v1.nn.relu"),
                                    _layer("SlicingOpLambda", function="__operators__.getitem"),
                                    _layer("ClassMethod", cls_symbol="RaggedTensor",
                                           method_name="from_row_lengths"),
                                    _layer("InstanceProperty", attr_name="flat_values"),
                                    {"module": "keras.layers", "class_name": "Dense",
                                     "config": {"units": 2}}]}}
    refuse_model_code(_h5(tmp_path / "m.h5", config), "keras")
    with h5py.File(tmp_path / "weights.h5", "w") as handle:
        handle["w"] = [1.0]
    refuse_model_code(tmp_path / "weights.h5", "keras")  # weights only: no config, no code


def test_a_keras_zip_with_a_lambda_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", json.dumps(
            {"class_name": "Sequential", "module": "keras",
             "config": {"layers": [_layer("Lambda")]}}))
    with pytest.raises(UsageError, match="a Lambda layer"):
        refuse_model_code(path, "keras")


@pytest.mark.slow
def test_the_opt_in_runs_a_trusted_savedmodel(tmp_path: Path, cwd: Path) -> None:
    model = tmp_path / "m.savedmodel"
    shutil.copytree(built("writefile.savedmodel"), model)
    result = run_cli("inspect", str(model), "--trust-model-code")
    assert result.status == 0, result.stderr
    assert (cwd / MARKER).exists()


@pytest.mark.slow
def test_a_tflite_select_tf_op_does_not_run(tmp_path: Path, cwd: Path) -> None:
    """LiteRT has no kernel for FlexWriteFile (no Flex delegate): the .tflite is described, its
    op never runs, and no opt-in is asked."""
    model = tmp_path / "flex.tflite"
    shutil.copy(built("flex.tflite"), model)
    result = run_cli("inspect", str(model))
    assert "FlexWriteFile" in result.stdout, result.stderr
    assert not (cwd / MARKER).exists()


@pytest.mark.parametrize("op", ["CollectiveReduceV2", "CollectiveGatherV2",
                                "CollectiveBcastRecvV2", "NcclAllReduce", "_Recv", "Recv",
                                "InfeedDequeue"])
def test_a_graph_that_waits_for_another_worker_is_refused(tmp_path: Path, op: str) -> None:
    """Issue 39: a SavedModel whose signature waits for a second worker (a collective, a
    receive from another task or device) hung the load; it is refused before any loader."""
    folder = _saver_graph(tmp_path / "m.savedmodel", {"wait": op, "use": "Identity"})
    assert risky_ops(folder) == [op]
    with pytest.raises(UsageError, match=f"runs {op}"):
        check_model_file(folder)


@pytest.mark.parametrize("old, new", [("/code/", "/CODE/"), (".py", ".PY")])
def test_code_files_are_read_in_any_letter_case(tmp_path: Path, cwd: Path, old: str,
                                                new: str) -> None:
    """Review of issue 39: torch finds ``CODE/...PY`` as code, so edge reads it too (the
    archive's __setstate__ would have run in the graph-listing child)."""
    import tests.support.model_code_torch as torch_files

    model = tmp_path / "m.pt"
    torch_files.scripted_setstate_respelled("getattr-save")(model)
    torch_files.rename_code(model, old, new)
    with pytest.raises(UsageError, match="through getattr or parentheses"):
        check_model_file(model)
    assert list(cwd.iterdir()) == []


def test_an_archive_edge_cannot_read_plainly_is_one_line(tmp_path: Path) -> None:
    import tests.support.model_code_torch as torch_files

    model = tmp_path / "m.pt"
    torch_files.scripted(model)
    data = bytearray(model.read_bytes())
    with zipfile.ZipFile(model) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(".py"))
    head = info.header_offset  # the local header: name and extra lengths, then the bytes
    start = head + 30 + int.from_bytes(data[head + 26:head + 28], "little") + \
        int.from_bytes(data[head + 28:head + 30], "little")
    data[start] ^= 0xFF  # its bytes, not its CRC
    model.write_bytes(bytes(data))
    with pytest.raises(UsageError, match="as a plain zip"):
        check_model_file(model)
    with zipfile.ZipFile(model, "a") as archive:
        archive.writestr(info.filename.upper(), "")
    with pytest.raises(UsageError, match="differ only in letter case"):
        check_model_file(model)


def test_names_that_only_look_like_namespaces_pass() -> None:
    """A class attribute named ``ops`` or ``torch`` (a submodule), a local named ``classes``."""
    code = ("class M(Module):\n  __parameters__ = []\n"
            "  ops : __torch__.torch.nn.modules.container.ModuleList\n"
            "  torch : __torch__.torch.nn.modules.linear.Linear\n"
            "  def forward(self, x: Tensor) -> Tensor:\n    classes = self.classes\n"
            "    return torch.add(x, classes.weight)\n")
    assert risky_script_call(code) is None


def test_a_module_beside_the_model_is_never_imported(tmp_path: Path, cwd: Path) -> None:
    """The graph-listing child does not put the working folder on its import path."""
    import tests.support.model_code_torch as torch_files

    torch_files.scripted(cwd / "m.pt")
    (cwd / "json.py").write_text(f"open({str(tmp_path / MARKER)!r}, 'w').write('x')\n")
    check_model_file(cwd / "m.pt")
    assert not (tmp_path / MARKER).exists()


def test_a_model_that_prints_does_not_grow_edge(tmp_path: Path) -> None:
    import resource

    import tests.support.model_code_torch as torch_files

    model = tmp_path / "m.pt"
    torch_files.scripted_setstate_print(model)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    check_model_file(model)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 32 << 10  # KB
