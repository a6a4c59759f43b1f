"""PyTorch sources: a saved module exported with the TorchScript exporter. TorchScript is read
as data once its code is checked to call only PyTorch's compute ops (no file, process, network
or profiler call, no custom-op library); a pickle runs code when unpickled, so only
``--trust-model-code`` unpickles a module."""

from __future__ import annotations

import functools
import inspect
import io
import json
import logging
import pickle
import re
import tokenize
import warnings
import zipfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from edge.core.bounded import bounds, out_of_memory, run_bounded
from edge.core.errors import UsageError, first_line
from edge.core.extras import require
from edge.core.files import filled, scratch_file
from edge.core.intake.common import OPSET, Shapes, example, read_check
from edge.core.intake.torchargs import (
    bake_inputs,
    baked_args,
    fold_baked_ifs,
    int_not,
    positional,
    warn_state,
)

log = logging.getLogger("edge")


def from_torch(
    source: Path, out: Path, pins: Shapes, dtypes: Mapping[str, str], *, trust: bool = False,
    arg_values: Mapping[str, str] | None = None,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[tuple[str, np.ndarray]]]:
    """Export a saved module with torch.onnx.export(dynamo=False) on example inputs from pins;
    a pickled module is loaded only with ``trust`` (--trust-model-code). ``arg_values`` (--arg)
    gives forward's non-tensor arguments (int, float, bool): baked into the export."""
    require("pytorch", "torch", why=f"{source}: reading PyTorch models")
    import torch

    module = _load_torch(source, trust=trust)
    baked = baked_args(module, dict(arg_values or {}), pins, source)
    names = _torch_inputs(module, pins, source, baked)
    feeds = {n: example(pins[n], dtypes.get(n, "float32")) for n in names}
    args = tuple(torch.from_numpy(feeds[n]) for n in names)
    inputs = names
    if baked:
        warn_state(module, source)
        args, inputs = positional(module, {**dict(zip(names, args, strict=True)), **baked})
    with torch.no_grad():
        try:
            result = module(*args)
        except Exception as exc:  # the module's own error on the example inputs
            if out_of_memory(exc):  # the bounded child's limit, said as such
                raise MemoryError(first_line(exc)) from None
            raise UsageError(f"{source}: the module failed on the --shape example inputs "
                             f"({first_line(exc)})") from None
    values = _flatten_torch(result)
    out_names = ["output"] if len(values) == 1 else [f"output_{i}" for i in range(len(values))]
    with scratch_file(out, ".export.onnx") as exported:  # never a half-export under ``out``
        _export_torch(module, args, inputs, out_names, exported, source)
        model = bake_inputs(onnx.load(str(exported)), baked)
    model = fold_baked_ifs(model) if baked else model
    _output_shapes(model, values)
    return model, feeds, list(zip(out_names, values, strict=True))


def from_torch_bounded(
    source: Path, out: Path, pins: Shapes, dtypes: Mapping[str, str], *, trust: bool = False,
    arg_values: Mapping[str, str] | None = None,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[tuple[str, np.ndarray]]]:
    """``from_torch`` in a bounded child (edge.core.intake.torchref): the model's first run,
    its forward on the example inputs, cannot hang edge or take all memory (a UsageError
    naming the limit); its refusals come back as they are."""
    require("pytorch", "torch", why=f"{source}: reading PyTorch models")
    out.parent.mkdir(parents=True, exist_ok=True)
    job_file, raw, check = (out.with_suffix(s) for s in (".job.json", ".raw.onnx",
                                                         ".check.npz"))
    job = {"source": str(source), "out": str(out), "raw": str(raw), "check": str(check),
           "pins": {k: list(v) for k, v in pins.items()}, "dtypes": dict(dtypes),
           "trust": trust, "args": dict(arg_values or {})}
    try:  # the child's files are scratch, never a cache entry: removed whatever happens
        job_file.write_text(json.dumps(job))
        reply = run_bounded("edge.core.intake.torchref", [str(job_file)], limits=bounds(source),
                            what=f"{source}: running the model on the --shape example inputs")
        for line in reply.get("warnings", []) if isinstance(reply, dict) else []:
            log.warning("%s", line)
        model = onnx.load(str(raw))
        feeds, expected = read_check(check)
    finally:
        for scratch in (job_file, raw, check):
            scratch.unlink(missing_ok=True)
    return model, feeds, expected


def _output_shapes(model: onnx.ModelProto, values: list[np.ndarray]) -> None:
    """Give a graph output the exporter left without a shape (one made by an If) the shape of
    the module's result: every input is pinned, so it is static."""
    for value, array in zip(model.graph.output, values, strict=True):
        tensor = value.type.tensor_type
        if not tensor.HasField("shape"):
            tensor.shape.SetInParent()
            for dim in array.shape:
                tensor.shape.dim.add().dim_value = int(dim)


#: Op namespaces TorchScript code may call (``torch.ops.<ns>``/``ops.<ns>``) and custom-class
#: namespaces it may name (``torch.classes.<ns>``): the compute ops of PyTorch itself. Others
#: (c10d, profiler, a custom library's ops...) reach processes, the network or files.
SCRIPT_NAMESPACES = frozenset({"aten", "prim", "quantized", "_quantized", "prepacked",
                               "xnnpack", "mkldnn", "mkldnn_prepacked", "onednn", "rnn"})

#: Names a ``torch.``/``ops.`` reference of TorchScript code may not hold (any dotted part):
#: files (aten::save, aten::from_file, any load), distributed/RPC, the profiler and its export.
_RISKY_SCRIPT_PART = re.compile(
    r"save|load|from_file|file|distributed|c10d|rpc|profil|record_function|export|"
    r"symm_mem|nvshmem", re.IGNORECASE)

#: The most TorchScript code an archive may hold for edge to read it.
_MAX_CODE_BYTES = 32 << 20


def check_torch(source: Path) -> None:
    """Refuse (UsageError naming --trust-model-code) TorchScript whose code calls anything
    risky: read as text first (risky_script_call; loading runs its ``__setstate__`` methods),
    then on its compiled graph, listed in a bounded child (risky_graph_op: what will run,
    however the code spells it). A file that is not TorchScript goes through torch's
    weights-only unpickler, which runs no code from the file, and no module comes out of that
    (a module is unpickled by running the code the file names)."""
    if not _scripted(source):
        require("pytorch", "torch", why=f"{source}: reading PyTorch models")
        _load_torch(source, trust=False)
        return
    _check_script_code(source)
    require("pytorch", "torch", why=f"{source}: reading PyTorch models")
    stat = source.stat()
    found = risky_graph_op(_graph_of(str(source), stat.st_size, stat.st_mtime_ns))
    if found:
        raise UsageError(
            f"{source}: its TorchScript graph calls {found} (files, processes or the network "
            "of this host): running it would reach outside the model; edge refuses it unless "
            "you pass --trust-model-code for a model you trust")


@functools.lru_cache(maxsize=8)
def _graph_of(path: str, size: int, mtime_ns: int) -> dict[str, list[str]]:
    """The archive's node kinds and the calls inlining left (edge.core.intake.torchscan), once
    per file version."""
    reply = run_bounded("edge.core.intake.torchscan", [path], limits=bounds(Path(path)),
                        what=f"{path}: listing its TorchScript graph")
    if not (isinstance(reply, dict) and all(
            isinstance(reply.get(k), list) and all(isinstance(v, str) for v in reply[k])
            for k in ("ops", "calls"))):
        raise UsageError(f"{path}: its TorchScript graph could not be listed")
    return {k: list(reply[k]) for k in ("ops", "calls")}


def risky_graph_op(graph: Mapping[str, Sequence[str]]) -> str | None:
    """The first node kind of a compiled graph outside PyTorch's compute ops (a namespace not
    in SCRIPT_NAMESPACES, or a name of _RISKY_SCRIPT_PART), or a call inlining left to a
    custom class outside them or to a function value."""
    for op in graph["ops"]:
        namespace, _, name = op.partition("::")
        if namespace not in SCRIPT_NAMESPACES or _RISKY_SCRIPT_PART.search(name):
            return op
    return next((call for call in graph["calls"] if _risky_callee(call)), None)


def _risky_callee(call: str) -> bool:
    """A call left after inlining: a custom class's method (its namespace decides) or an
    interface's (its modules are walked too); any other (a function value) is not followed."""
    kind = call.rpartition(".")[0]
    if kind.startswith("__torch__.torch.classes."):
        return kind.split(".")[3] not in SCRIPT_NAMESPACES
    return "Function" in kind or kind == "?"


def _check_script_code(source: Path) -> None:
    """The TorchScript code files of the archive (``*/code/**.py``, matched in any letter case,
    as torch's reader finds them) call nothing risky; an archive edge cannot read as a plain
    zip, or whose names differ only in case, is refused (either could hide a code file)."""
    try:
        with zipfile.ZipFile(source) as archive:
            code = _code_files(archive, source)
            for info in code:
                _check_code_text(source, archive.read(info).decode("utf-8", "replace"))
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError,
            UnicodeDecodeError, EOFError) as exc:
        raise UsageError(f"{source}: not a TorchScript archive edge can read as a plain zip "
                         f"({first_line(exc)}); edge refuses it unless you pass "
                         "--trust-model-code for a model you trust") from None


def _code_files(archive: zipfile.ZipFile, source: Path) -> list[zipfile.ZipInfo]:
    entries = archive.infolist()
    if len({i.filename.lower() for i in entries}) != len(entries):
        raise UsageError(f"{source}: its archive has file names that differ only in letter "
                         "case (one could hide code); edge refuses it unless you pass "
                         "--trust-model-code for a model you trust")
    code = [i for i in entries if "/code/" in i.filename.lower()
            and i.filename.lower().endswith(".py")]
    if sum(i.file_size for i in code) > _MAX_CODE_BYTES:
        raise UsageError(f"{source}: its TorchScript code is larger than "
                         f"{_MAX_CODE_BYTES >> 20} MB")
    return code


def _check_code_text(source: Path, text: str) -> None:
    found = risky_script_call(text)
    if found:
        raise UsageError(
            f"{source}: its TorchScript code calls {found} (files, processes or the "
            "network of this host): running it would reach outside the model; edge "
            "refuses it unless you pass --trust-model-code for a model you trust")


def risky_script_call(text: str) -> str | None:
    """The first risky reference of TorchScript code: a ``torch.``/``ops.`` name with a part
    matching _RISKY_SCRIPT_PART, an op/class namespace outside SCRIPT_NAMESPACES, or a
    ``torch``/``ops`` name that is not called (``getattr(torch, "save")``, ``(torch).save``:
    torch's own printer writes every call as ``torch.NAME(``; a class attribute named so,
    ``ops : __torch__...`` at the start of a line, is a declaration); code Python's tokenizer
    cannot read is risky too (it could hide any of them)."""
    try:
        for chain, before, after in _dotted_names(text):
            if _risky_chain(chain):
                return ".".join(chain)
            if chain[0] in ("torch", "ops") and after != "(" and not (
                    after == ":" and before in _LINE_START):
                return f"{'.'.join(chain)} through getattr or parentheses"
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return "code edge cannot read"
    return None


#: What precedes a name that starts a line (an attribute declared in a class body).
_LINE_START = ("", "\n", "INDENT", "DEDENT")


def _risky_chain(parts: list[str]) -> bool:
    if "classes" in parts[:-1] and parts[0] in ("torch", "__torch__"):
        namespace = parts[parts.index("classes") + 1]
        if namespace not in SCRIPT_NAMESPACES:
            return True
    if parts[0] not in ("torch", "ops"):
        return False
    if "ops" in parts[:-1] and parts[parts.index("ops") + 1] not in SCRIPT_NAMESPACES:
        return True
    return any(_RISKY_SCRIPT_PART.search(p) for p in parts[1:])


def _dotted_names(text: str) -> Iterator[tuple[list[str], str, str]]:
    """Each dotted name (``a.b.c``) of Python-syntax code with the token before and after it
    (``INDENT``/``DEDENT``/newline/"" at a line's start), comments and strings skipped."""
    chain: list[str] = []
    want_name = False
    before = last = ""
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in (tokenize.NL, tokenize.COMMENT):
            continue
        if token.type == tokenize.NAME and want_name:
            chain, want_name = [*chain, token.string], False
        elif token.type == tokenize.OP and token.string == "." and chain and not want_name:
            want_name = True
        else:
            if chain:
                yield chain, before, token.string
            if token.type == tokenize.NAME:
                chain, before = [token.string], last
            else:
                chain = []
            want_name = False
        last = _token_text(token)
    if chain:
        yield chain, before, ""


def _token_text(token: tokenize.TokenInfo) -> str:
    if token.type in (tokenize.INDENT, tokenize.DEDENT):
        return tokenize.tok_name[token.type]
    return "\n" if token.type == tokenize.NEWLINE else token.string


def is_torchscript(source: Path) -> bool:
    """Whether ``source`` is a TorchScript archive (a zip holding constants.pkl)."""
    return _scripted(source)


def _scripted(source: Path) -> bool:
    """Whether ``source`` is a TorchScript archive (a zip holding constants.pkl, any case)."""
    try:
        with zipfile.ZipFile(source) as archive:
            return any(n.lower().endswith("constants.pkl") for n in archive.namelist())
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError, ValueError):
        return False


def _load_torch(source: Path, *, trust: bool) -> Any:
    """A TorchScript archive, or (``trust``) a whole pickled module, in eval mode; untrusted,
    a pickle is read only by the weights-only unpickler."""
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.load is deprecated
            module = (torch.jit.load(str(source), map_location="cpu")  # type: ignore[no-untyped-call]
                      if _scripted(source)
                      else torch.load(str(source), map_location="cpu", weights_only=not trust))
    except Exception as exc:  # unpickling raises many types (missing class, bad file)
        refused = isinstance(exc, pickle.UnpicklingError) and not trust
        raise UsageError(_unpickling_refusal(source, exc) if refused else
                         f"{source}: not a loadable PyTorch module ({first_line(exc)}); save "
                         "it with torch.save(model) with its class importable, or with "
                         "torch.jit.save") from None
    if not isinstance(module, torch.nn.Module):
        what = "a state_dict" if isinstance(module, Mapping) else type(module).__name__
        raise UsageError(f"{source}: holds {what}, not a module; save the whole module "
                         "(torch.save(model)) or TorchScript (torch.jit.save)")
    return module.eval()


def _unpickling_refusal(source: Path, exc: Exception) -> str:
    """The weights-only unpickler's refusal as one line: the global the file would call (the
    code it would run), or the reason it stopped."""
    text = str(exc)
    named = re.search(r"unsupported global:? (?:GLOBAL )?([\w.]+)", text, re.IGNORECASE)
    if named:
        return (f"{source}: a pickled Python object (it calls {named.group(1)}): unpickling "
                "it would run code from the file; edge reads TorchScript (torch.jit.save) and "
                "refuses a pickled module unless you pass --trust-model-code for a model you "
                "trust")
    reason = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
    shown = reason.group(1) if reason else "an object it does not read"
    return (f"{source}: not a loadable PyTorch module (the weights-only unpickler stops: "
            f"{shown.strip()[:200]}); edge reads TorchScript (torch.jit.save), or a pickled "
            "module with --trust-model-code for a model you trust")


def _torch_inputs(module: Any, pins: Shapes, source: Path,
                  baked: Mapping[str, Any] | None = None) -> list[str]:
    """Forward's argument names that get example inputs: the required ones plus pinned ones
    (the ``baked`` non-tensor ones, --arg, get none)."""
    params = [(n, req) for n, req in _forward_params(module) if n not in (baked or {})]
    unknown = [n for n in pins if n not in dict(params)]
    if unknown:
        raise UsageError(f"--shape {unknown[0]}=...: {source.name}'s forward() has no argument "
                         f"'{unknown[0]}'; its arguments: {', '.join(n for n, _ in params)}")
    last = max((i for i, (n, req) in enumerate(params) if req or n in pins), default=-1)
    names = [n for n, _ in params[: last + 1]]
    missing = [n for n in names if n not in pins]
    if missing or not names:
        wanted = missing or [n for n, _ in params] or ["NAME"]
        raise UsageError(f"{source}: a PyTorch model needs example input shapes; give "
                         + " ".join(f"--shape {n}=DIMS" for n in wanted)
                         + " (DIMS like 1,3,224,224; append :int64 for an integer input)")
    return names


def _forward_params(module: Any) -> list[tuple[str, bool]]:
    """(name, required) for each positional argument of forward, without self."""
    import torch

    if isinstance(module, torch.jit.ScriptModule):
        args = module.forward.schema.arguments[1:]  # type: ignore[attr-defined]
        return [(a.name, not a.has_default_value()) for a in args]
    sig = inspect.signature(module.forward)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [(p.name, p.default is inspect.Parameter.empty)
            for p in sig.parameters.values() if p.kind in kinds]


def _flatten_torch(result: Any) -> list[np.ndarray]:
    """A forward result (tensor, or nested tuples/lists/dicts of them) as flat numpy arrays."""
    if isinstance(result, Mapping):
        return [a for v in result.values() for a in _flatten_torch(v)]
    if isinstance(result, (list, tuple)):
        return [a for v in result for a in _flatten_torch(v)]
    return [result.detach().cpu().numpy()]


def _export_torch(module: Any, args: tuple[Any, ...], names: list[str], out_names: list[str],
                  out: Path, source: Path) -> None:
    """torch.onnx.export with the TorchScript exporter at OPSET; failures name the source."""
    import torch

    with warnings.catch_warnings(), int_not():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(module, args, str(out), input_names=names, output_names=out_names,
                              opset_version=OPSET, dynamo=False, do_constant_folding=True)
        except Exception as exc:  # the exporter raises many types
            if filled(exc):
                raise  # a full disk: scratch_file names the cache entry and the space
            raise UsageError(f"{source}: torch.onnx.export failed ({first_line(exc)})") from None
