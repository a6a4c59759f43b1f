"""The ops a SavedModel runs, read from saved_model.pb without TensorFlow.

A few messages of TensorFlow's protos (SavedModel, MetaGraphDef, GraphDef, NodeDef,
FunctionDef, AttrValue, SaverDef, SignatureDef) are declared here with only the fields edge
reads; protobuf skips every other field. The ops that count are those of every graph node and
library function a load or a call can run (signatures, collections such as the main op, and
everything else). What the SaverDef's restore op reaches (a TF1 loader runs it) may hold only
restore ops reading the checkpoint the loader names (filename_tensor_name); what only its save
op reaches (never run by a load) may hold the checkpoint ops, which every SavedModel has.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CHECKPOINT_OPS", "RISKY_TF_OPS", "read_saved_model", "risky_ops",
           "saved_model_message"]

#: TensorFlow ops that reach outside the model when a graph runs: they read, list, map or write
#: files (checkpoints, datasets, summaries, debugger dumps, proto descriptors), call back into
#: Python, talk to a server, or wait for another worker or device (collectives, send/receive).
RISKY_TF_OPS = frozenset({
    # files
    "ReadFile", "WriteFile", "MatchingFiles", "ImmutableConst",
    "Save", "SaveV2", "SaveSlices", "MergeV2Checkpoints", "Restore", "RestoreV2", "RestoreSlice",
    "LoadAndRemapMatrix", "GenerateVocabRemapping",
    "InitializeTableFromTextFile", "InitializeTableFromTextFileV2",
    "WholeFileReader", "WholeFileReaderV2", "TextLineReader", "TextLineReaderV2",
    "TFRecordReader", "TFRecordReaderV2", "FixedLengthRecordReader",
    "FixedLengthRecordReaderV2", "LMDBReader",
    "TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset", "FixedLengthRecordDataset",
    "FixedLengthRecordDatasetV2", "CSVDataset", "CSVDatasetV2", "ExperimentalCSVDataset",
    "MatchingFilesDataset", "ExperimentalMatchingFilesDataset", "SaveDataset",
    "SaveDatasetV2", "LoadDataset", "ExperimentalLoadDataset", "SnapshotDataset",
    "SnapshotDatasetV2", "SnapshotDatasetReader", "SnapshotNestedDatasetReader",
    "CacheDataset", "CacheDatasetV2", "DatasetToTFRecord", "ExperimentalDatasetToTFRecord",
    "SqlDataset", "ExperimentalSqlDataset", "LMDBDataset", "ExperimentalLMDBDataset",
    "CreateSummaryFileWriter", "CreateSummaryDbWriter", "WriteSummary", "WriteRawProtoSummary",
    "WriteScalarSummary", "WriteHistogramSummary", "WriteImageSummary", "WriteAudioSummary",
    "WriteGraphSummary", "ImportEvent",
    "DebugIdentity", "DebugIdentityV2", "DebugIdentityV3", "DebugNanCount",
    "DebugNumericSummary", "DebugNumericSummaryV2", "DecodeProtoV2", "EncodeProto",
    # Python
    "PyFunc", "PyFuncStateless", "EagerPyFunc",
    # the network
    "DataServiceDataset", "DataServiceDatasetV2", "DataServiceDatasetV3",
    "DataServiceDatasetV4", "RegisterDataset", "RegisterDatasetV2", "DistributedSave",
    "RpcServer", "RpcServerStart", "RpcServerRegister", "RpcClient", "RpcCall",
    "RpcCheckStatus", "RpcGetValue", "RemoteCall",
    # graphs built from a serialized GraphDef held in a tensor (their ops are never scanned)
    "DatasetFromGraph", "DeserializeIterator",
    # ops that wait for other workers or devices that never come: collectives, send/receive
    # between tasks, the TPU and NCCL ones (issue 39: a load hung on one)
    "CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveGather",
    "CollectiveGatherV2", "CollectiveBcastSend", "CollectiveBcastSendV2",
    "CollectiveBcastRecv", "CollectiveBcastRecvV2", "CollectiveAllToAllV2",
    "CollectiveAllToAllV3", "CollectiveAssignGroupV2", "CollectiveInitializeCommunicator",
    "CollectivePermute", "NcclAllReduce", "NcclReduce", "NcclBroadcast", "Send", "Recv",
    "_Send", "_Recv", "_HostSend", "_HostRecv", "SendTPUEmbeddingGradients",
    "RecvTPUEmbeddingActivations", "InfeedDequeue", "InfeedDequeueTuple", "OutfeedEnqueue",
    "OutfeedEnqueueTuple",
})

#: The saver's own ops, allowed only in what nothing but the SaverDef's save op reaches (a load
#: never runs it).
CHECKPOINT_OPS = frozenset({"Save", "SaveV2", "SaveSlices", "MergeV2Checkpoints", "Restore",
                            "RestoreV2", "RestoreSlice"})

#: The only risky ops allowed in what the SaverDef's restore op reaches (a TF1 loader runs it),
#: and only reading the checkpoint the loader names (SaverDef.filename_tensor_name).
RESTORE_OPS = frozenset({"Restore", "RestoreV2", "RestoreSlice"})

#: PrintV2 is harmless on stderr/stdout/the log; its ``output_stream`` may also name a file.
_PRINT_STREAMS = (b"stderr", b"stdout", b"log(info)", b"log(warning)", b"log(error)")

# name -> fields (name, number, type, repeated, message type)
_MESSAGES: dict[str, tuple[tuple[str, int, str, bool, str], ...]] = {
    "SavedModel": (("meta_graphs", 2, "message", True, "MetaGraphDef"),),
    "MetaGraphDef": (("graph_def", 2, "message", False, "GraphDef"),
                     ("saver_def", 3, "message", False, "SaverDef"),
                     ("collection_def", 4, "message", True, "CollectionEntry"),
                     ("signature_def", 5, "message", True, "SignatureEntry")),
    "CollectionEntry": (("key", 1, "string", False, ""),
                        ("value", 2, "message", False, "CollectionDef")),
    "CollectionDef": (("node_list", 1, "message", False, "NodeList"),),
    "NodeList": (("value", 1, "string", True, ""),),
    "SaverDef": (("filename_tensor_name", 1, "string", False, ""),
                 ("save_tensor_name", 2, "string", False, ""),
                 ("restore_op_name", 3, "string", False, "")),
    "SignatureEntry": (("key", 1, "string", False, ""),
                       ("value", 2, "message", False, "SignatureDef")),
    "SignatureDef": (("inputs", 1, "message", True, "TensorEntry"),
                     ("outputs", 2, "message", True, "TensorEntry")),
    "TensorEntry": (("key", 1, "string", False, ""), ("value", 2, "message", False, "TensorInfo")),
    "TensorInfo": (("name", 1, "string", False, ""),),
    "GraphDef": (("node", 1, "message", True, "NodeDef"),
                 ("library", 2, "message", False, "FunctionDefLibrary")),
    "NodeDef": (("name", 1, "string", False, ""), ("op", 2, "string", False, ""),
                ("input", 3, "string", True, ""), ("attr", 5, "message", True, "AttrEntry")),
    "AttrEntry": (("key", 1, "string", False, ""), ("value", 2, "message", False, "AttrValue")),
    "AttrValue": (("list", 1, "message", False, "ListValue"), ("s", 2, "bytes", False, ""),
                  ("func", 10, "message", False, "NameAttrList")),
    "ListValue": (("func", 9, "message", True, "NameAttrList"),),
    "NameAttrList": (("name", 1, "string", False, ""),
                     ("attr", 2, "message", True, "AttrEntry")),
    "FunctionDefLibrary": (("function", 1, "message", True, "FunctionDef"),),
    "FunctionDef": (("signature", 1, "message", False, "OpDef"),
                    ("node_def", 3, "message", True, "NodeDef")),
    "OpDef": (("name", 1, "string", False, ""), ("input_arg", 2, "message", True, "ArgDef")),
    "ArgDef": (("name", 1, "string", False, ""),),
}

_PACKAGE = "edge_tfgraph"


@functools.cache
def saved_model_message() -> Any:
    """The SavedModel message class, declared with only the fields above (protobuf, the
    tflite extra's, is imported when a SavedModel is read)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="edge_tfgraph.proto", package=_PACKAGE,
                                               syntax="proto3")
    kinds = {"message": descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
             "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
             "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES}
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        for field, number, kind, repeated, type_name in fields:
            message.field.add(
                name=field, number=number, type=kinds[kind],
                label=(descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if repeated
                       else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL),
                type_name=f".{_PACKAGE}.{type_name}" if type_name else None)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.SavedModel"))


def read_saved_model(folder: Path) -> Any:
    """saved_model.pb (or .pbtxt) parsed with the fields above; ValueError when it is not one."""
    from google.protobuf import text_format

    binary = folder / "saved_model.pb"
    message = saved_model_message()()
    try:
        if binary.is_file():
            message.ParseFromString(binary.read_bytes())
        else:
            text_format.Parse((folder / "saved_model.pbtxt").read_text(), message,
                              allow_unknown_field=True)
    except Exception as exc:  # protobuf's DecodeError/ParseError, a bad encoding
        raise ValueError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    return message


def risky_ops(folder: Path) -> list[str]:
    """The risky ops (RISKY_TF_OPS, PrintV2 to a file) a load or a call of the SavedModel in
    ``folder`` can run, sorted; ValueError when saved_model.pb does not parse."""
    found: set[str] = set()
    for meta in read_saved_model(folder).meta_graphs:
        graph = _Graph.of(meta)
        ran, restore, save = _regions(graph)
        found |= {_risky_name(node) for node in ran}
        found |= {_restore_risk(graph, node, prefix) for node, prefix in restore}
        found |= {_risky_name(node) for node in save} - CHECKPOINT_OPS
    return sorted(found - {""})


def _restore_risk(graph: _Graph, node: Any, prefix: str) -> str:
    """What a node the restore op reaches risks: a restore op (or a call of a function that
    restores) reading another path than ``prefix`` (the checkpoint the loader names), or any
    other risky op."""
    if node.op in RESTORE_OPS or _restores(graph, node):
        return "" if _reads(node, prefix) else f"{node.op} (of a path the loader does not name)"
    return _risky_name(node)


def _restores(graph: _Graph, node: Any) -> bool:
    functions = _called(graph, _calls(graph, [node]))
    return any(n.op in RESTORE_OPS for f in functions for n in graph.functions[f])


def _reads(node: Any, prefix: str) -> bool:
    """Whether a node's first input (a restore op's checkpoint path) is ``prefix``."""
    return bool(node.input) and _node_name(node.input[0]) == prefix


def _risky_name(node: Any) -> str:
    """The node's op when it is risky, else ''."""
    if node.op in RISKY_TF_OPS:
        return str(node.op)
    if node.op == "PrintV2":
        stream = next((a.value.s for a in node.attr if a.key == "output_stream"), b"stderr")
        return "" if stream in _PRINT_STREAMS else "PrintV2 (to a file)"
    return ""


@dataclass(frozen=True, slots=True)
class _Graph:
    """One MetaGraphDef: its nodes and functions (with their first argument) by name, the
    saver's save, restore and filename nodes, and the nodes a loader runs by name (signatures,
    collections such as the main/init ops)."""

    nodes: dict[str, Any]
    functions: dict[str, list[Any]]
    first_args: dict[str, str]
    save: frozenset[str]
    restore: frozenset[str]
    filename: str
    roots: frozenset[str]

    @classmethod
    def of(cls, meta: Any) -> _Graph:
        saver = meta.saver_def
        named = [t.value.name for s in meta.signature_def
                 for t in (*s.value.inputs, *s.value.outputs)]
        named += [n for c in meta.collection_def for n in c.value.node_list.value]
        library = meta.graph_def.library.function
        return cls(nodes={n.name: n for n in meta.graph_def.node},
                   functions={f.signature.name: list(f.node_def) for f in library},
                   first_args={f.signature.name: f.signature.input_arg[0].name
                               for f in library if f.signature.input_arg},
                   save=_names([saver.save_tensor_name]),
                   restore=_names([saver.restore_op_name]),
                   filename=_node_name(saver.filename_tensor_name),
                   roots=_names(named))


def _names(tensors: Iterable[str]) -> frozenset[str]:
    return frozenset(_node_name(t) for t in tensors if t)


def _regions(graph: _Graph) -> tuple[list[Any], list[tuple[Any, str]], list[Any]]:
    """What a load or a call can run outside the saver (the graph's nodes neither saver op
    reaches, the named roots, all they depend on, and every function but those only the saver
    calls); what the restore op reaches (each node with the checkpoint path it may read: the
    filename node, or a function's first argument); what only the save op reaches."""
    restore = _upstream(graph, graph.restore)
    save = _upstream(graph, graph.save) - restore
    ran = _upstream(graph, (set(graph.nodes) - save - restore) | graph.roots)
    restore, save = restore - ran, save - ran
    ran_calls = _called(graph, _calls(graph, (graph.nodes[n] for n in ran)))
    restore_calls = _called(graph, _calls(graph, (graph.nodes[n] for n in restore)))
    save_calls = _called(graph, _calls(graph, (graph.nodes[n] for n in save)))
    ran_calls |= set(graph.functions) - restore_calls - save_calls
    restore_calls -= ran_calls
    return ([graph.nodes[n] for n in ran] + _function_nodes(graph, ran_calls),
            [(graph.nodes[n], graph.filename) for n in restore]
            + [(node, graph.first_args.get(f, "")) for f in restore_calls
               for node in graph.functions[f]],
            [graph.nodes[n] for n in save]
            + _function_nodes(graph, save_calls - ran_calls - restore_calls))


def _function_nodes(graph: _Graph, names: Iterable[str]) -> list[Any]:
    return [node for name in names for node in graph.functions[name]]


def _node_name(tensor: str) -> str:
    """'^name', 'name:0' or 'name:output:0' -> 'name'."""
    return tensor.lstrip("^").split(":")[0]


def _upstream(graph: _Graph, names: Iterable[str]) -> set[str]:
    """The named nodes and every node they read (data or control inputs), transitively."""
    seen: set[str] = set()
    stack = [n for n in names if n in graph.nodes]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        stack += [i for i in map(_node_name, graph.nodes[name].input) if i in graph.nodes]
    return seen


def _calls(graph: _Graph, nodes: Iterable[Any]) -> set[str]:
    """Library functions the nodes call: by op name or through a func / list(func) attr."""
    called: set[str] = set()
    for node in nodes:
        if node.op in graph.functions:
            called.add(node.op)
        called |= {f for f in _attr_functions(node.attr) if f in graph.functions}
    return called


def _attr_functions(attrs: Iterable[Any]) -> Iterator[str]:
    for entry in attrs:
        value = entry.value
        funcs = [value.func] if value.HasField("func") else list(value.list.func)
        for func in funcs:
            yield func.name
            yield from _attr_functions(func.attr)


def _called(graph: _Graph, roots: set[str]) -> set[str]:
    """The functions and every function they call, transitively."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        stack += _calls(graph, graph.functions[name])
    return seen
