"""Cloud side of the edge-cloud split: serve ``tail.onnx`` over KServe v2 REST (model ``tail``).

Endpoints: ``GET /v2/health/live``, ``GET /v2/health/ready``, ``GET /v2/models/tail``,
``GET /v2/models/tail/ready``, ``POST /v2/models/tail/infer``. JSON tensors and the binary
tensor data extension (``Inference-Header-Content-Length``) are accepted for inputs and
produced for outputs.

HTTP is the stdlib ``http.server.ThreadingHTTPServer`` (no extra dependencies). Every request
except the health endpoints needs ``Authorization: Bearer <token>``; without a token the server
refuses to start unless ``insecure_no_auth`` is set explicitly. Bad requests get a 4xx JSON
``{"error": ...}`` and never stop the server.
"""

from __future__ import annotations

import argparse
import hmac
import json
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

MODEL_NAME = "tail"
PLATFORM = "onnxruntime_onnx"
DEFAULT_MAX_BODY = 64 * 1024 * 1024
HEADER_LEN = "Inference-Header-Content-Length"
TOKEN_ENV = "EDGE_CLOUD_TOKEN"

_KSERVE_TO_NP: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}
_ORT_TO_KSERVE: dict[str, str] = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
}
_ONNX_TO_KSERVE: dict[int, str] = {
    onnx.TensorProto.BOOL: "BOOL",
    onnx.TensorProto.UINT8: "UINT8",
    onnx.TensorProto.UINT16: "UINT16",
    onnx.TensorProto.UINT32: "UINT32",
    onnx.TensorProto.UINT64: "UINT64",
    onnx.TensorProto.INT8: "INT8",
    onnx.TensorProto.INT16: "INT16",
    onnx.TensorProto.INT32: "INT32",
    onnx.TensorProto.INT64: "INT64",
    onnx.TensorProto.FLOAT16: "FP16",
    onnx.TensorProto.FLOAT: "FP32",
    onnx.TensorProto.DOUBLE: "FP64",
}


class RequestError(Exception):
    """A client error carrying its HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class TensorSpec:
    """Name, KServe datatype and shape (``-1`` for symbolic dims) of one model tensor."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        """Return the KServe metadata form."""
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


def _dims(shape: Sequence[Any]) -> tuple[int, ...]:
    """Map an ORT shape to ints, symbolic/unknown dims to -1."""
    return tuple(d if isinstance(d, int) and d >= 0 else -1 for d in shape)


def _spec(arg: Any) -> TensorSpec:
    """Build a TensorSpec from an ORT NodeArg."""
    if arg.type not in _ORT_TO_KSERVE:
        raise ValueError(f"unsupported tensor type {arg.type} for {arg.name!r}")
    return TensorSpec(arg.name, _ORT_TO_KSERVE[arg.type], _dims(arg.shape))


def resolve_tail(path: str | os.PathLike[str]) -> Path:
    """Return the tail ONNX path given a split directory or the ONNX file itself."""
    p = Path(path)
    p = p / "tail.onnx" if p.is_dir() else p
    if not p.is_file():
        raise FileNotFoundError(f"no tail model at {p}")
    return p


def resolve_tails(path: str | os.PathLike[str]) -> dict[str, Path]:
    """Served name -> tail ONNX: every cut of a split directory ("tail" is the chosen one)."""
    p = Path(path)
    tails = {MODEL_NAME: resolve_tail(p)} if not p.is_dir() or (p / "tail.onnx").is_file() else {}
    if p.is_dir() and (p / "split.yaml").is_file():
        from partition.split import read_split_yaml

        for cut in read_split_yaml(p).cuts:
            if cut.model and cut.split.tail is not None:
                tails.setdefault(cut.model, cut.split.tail)
    if not tails:
        raise FileNotFoundError(f"no tail model in {p}")
    return tails


class TailModel:
    """An ORT session plus its KServe input/output specs."""

    def __init__(self, onnx_path: Path, name: str = MODEL_NAME, threads: int = 0) -> None:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(onnx_path), opts,
                                            providers=["CPUExecutionProvider"])
        self.name = name
        self.inputs = [_spec(a) for a in self.session.get_inputs()]
        self.outputs = [_spec(a) for a in self.session.get_outputs()]

    def metadata(self) -> dict[str, Any]:
        """Return the KServe model metadata document."""
        return {
            "name": self.name,
            "versions": ["1"],
            "platform": PLATFORM,
            "inputs": [s.to_json() for s in self.inputs],
            "outputs": [s.to_json() for s in self.outputs],
        }

    def run(self, feeds: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        """Run the session for the requested output names."""
        return self.session.run(names, feeds)


# ---------------------------------------------------------------- request parsing / validation


def _split_body(body: bytes, header_len: str | None) -> tuple[dict[str, Any], bytes]:
    """Split a request body into its JSON header and trailing binary section."""
    if header_len is None:
        head, rest = body, b""
    else:
        try:
            n = int(header_len)
        except ValueError:
            raise RequestError(f"bad {HEADER_LEN}") from None
        if not 0 <= n <= len(body):
            raise RequestError(f"{HEADER_LEN} out of range")
        head, rest = body[:n], body[n:]
    try:
        doc = json.loads(head)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(f"malformed JSON: {e}") from None
    if not isinstance(doc, dict):
        raise RequestError("request body must be a JSON object")
    return doc, rest


def _check_shape(spec: TensorSpec, shape: Any) -> tuple[int, ...]:
    """Validate a request shape against the model's (symbolic dims accept any positive size)."""
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) for d in shape
    ):
        raise RequestError(f"input {spec.name!r}: shape must be a list of integers")
    if len(shape) != len(spec.shape) or any(
        d < 0 or (m >= 0 and d != m) or (m < 0 and d == 0)
        for d, m in zip(shape, spec.shape, strict=True)
    ):
        raise RequestError(
            f"input {spec.name!r}: shape {shape} does not match model shape {list(spec.shape)}"
        )
    return tuple(shape)


def _flatten(data: Any) -> list[Any]:
    """Flatten (possibly nested) JSON list data."""
    if not isinstance(data, list):
        raise RequestError("tensor data must be a list")
    out: list[Any] = []
    for x in data:
        out.extend(_flatten(x) if isinstance(x, list) else [x])
    return out


def _json_array(spec: TensorSpec, data: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Convert JSON tensor data to an array of the model's dtype."""
    flat = _flatten(data)
    if len(flat) != math.prod(shape):
        raise RequestError(f"input {spec.name!r}: {len(flat)} values for shape {list(shape)}")
    ok = (
        (lambda x: isinstance(x, bool))
        if spec.datatype == "BOOL"
        else (lambda x: isinstance(x, (int, float)) and not isinstance(x, bool))
    )
    if not all(ok(x) for x in flat):
        raise RequestError(f"input {spec.name!r}: data has values of the wrong type")
    try:
        return np.array(flat, dtype=_KSERVE_TO_NP[spec.datatype]).reshape(shape)
    except (ValueError, OverflowError, TypeError) as e:
        raise RequestError(f"input {spec.name!r}: {e}") from None


def _binary_array(spec: TensorSpec, raw: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """Convert a binary tensor blob to an array of the model's dtype."""
    dt = _KSERVE_TO_NP[spec.datatype]
    if len(raw) != math.prod(shape) * dt.itemsize:
        raise RequestError(f"input {spec.name!r}: {len(raw)} bytes for shape {list(shape)}")
    return np.frombuffer(raw, dtype=dt.newbyteorder("<")).astype(dt).reshape(shape)


def _binary_size(entry: dict[str, Any]) -> int | None:
    """Return ``parameters.binary_data_size`` of a tensor entry, if any."""
    params = entry.get("parameters") or {}
    if not isinstance(params, dict):
        raise RequestError("parameters must be an object")
    size = params.get("binary_data_size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise RequestError("binary_data_size must be a non-negative integer")
    return size


def parse_inputs(model: TailModel, doc: dict[str, Any], binary: bytes) -> dict[str, np.ndarray]:
    """Validate the request inputs and return ORT feeds."""
    entries = doc.get("inputs")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise RequestError("'inputs' must be a list of objects")
    specs = {s.name: s for s in model.inputs}
    names = [e.get("name") for e in entries]
    if sorted(map(str, names)) != sorted(specs) or len(set(names)) != len(names):
        raise RequestError(f"input names {names} must be exactly {sorted(specs)}")
    feeds: dict[str, np.ndarray] = {}
    offset = 0
    for e in entries:
        spec = specs[e["name"]]
        if e.get("datatype") != spec.datatype:
            raise RequestError(
                f"input {spec.name!r}: datatype {e.get('datatype')!r}, model wants {spec.datatype}"
            )
        shape = _check_shape(spec, e.get("shape"))
        size = _binary_size(e)
        if size is None:
            feeds[spec.name] = _json_array(spec, e.get("data"), shape)
            continue
        if "data" in e or offset + size > len(binary):
            raise RequestError(f"input {spec.name!r}: inconsistent binary data")
        feeds[spec.name] = _binary_array(spec, binary[offset : offset + size], shape)
        offset += size
    if offset != len(binary):
        raise RequestError("unused trailing binary data")
    return feeds


def parse_outputs(model: TailModel, doc: dict[str, Any]) -> list[tuple[str, bool]]:
    """Return requested (output name, binary?) pairs; all outputs as JSON when none requested."""
    default_binary = (
        bool((doc.get("parameters") or {}).get("binary_data_output", False))
        if isinstance(doc.get("parameters") or {}, dict)
        else False
    )
    entries = doc.get("outputs")
    if entries is None:
        return [(s.name, default_binary) for s in model.outputs]
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise RequestError("'outputs' must be a list of objects")
    known = {s.name for s in model.outputs}
    out: list[tuple[str, bool]] = []
    for e in entries:
        if e.get("name") not in known:
            raise RequestError(f"unknown output {e.get('name')!r}; model has {sorted(known)}")
        params = e.get("parameters") or {}
        if not isinstance(params, dict):
            raise RequestError("parameters must be an object")
        out.append((e["name"], bool(params.get("binary_data", default_binary))))
    return out


def build_response(
    model: TailModel,
    doc: dict[str, Any],
    requested: list[tuple[str, bool]],
    arrays: list[np.ndarray],
) -> tuple[bytes, int | None]:
    """Return the response body and, if it has binary tensors, the JSON header length."""
    dtypes = {s.name: s.datatype for s in model.outputs}
    outs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for (name, binary), arr in zip(requested, arrays, strict=True):
        entry: dict[str, Any] = {"name": name, "shape": list(arr.shape), "datatype": dtypes[name]}
        if binary:
            blob = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = arr.reshape(-1).tolist()
        outs.append(entry)
    resp: dict[str, Any] = {"model_name": model.name, "model_version": "1", "outputs": outs}
    if isinstance(doc.get("id"), str):
        resp["id"] = doc["id"]
    head = json.dumps(resp).encode()
    return (head + b"".join(blobs), len(head)) if blobs else (head, None)


# ---------------------------------------------------------------- HTTP layer


class _Handler(BaseHTTPRequestHandler):
    """KServe v2 REST handler; configuration lives on the server object."""

    server: EdgeCloudServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms stall

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Log only when the server is verbose."""
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, header_len: int | None = None,
              infer_ms: float | None = None) -> None:
        """Send a response with a JSON (or JSON+binary) body."""
        self.send_response(status)
        ctype = "application/octet-stream" if header_len is not None else "application/json"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if header_len is not None:
            self.send_header(HEADER_LEN, str(header_len))
        if infer_ms is not None:  # lets a client tell compute time from time on the link
            self.send_header("Server-Timing", f"infer;dur={infer_ms:.3f}")
        if status >= 400 and self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, doc: dict[str, Any]) -> None:
        """Send a JSON document."""
        self._send(status, json.dumps(doc).encode())

    def _error(self, status: int, message: str) -> None:
        """Send a JSON error."""
        self._json(status, {"error": message})

    def _authorized(self) -> bool:
        """Check the bearer token in constant time (always true without auth)."""
        if self.server.token is None:
            return True
        got = self.headers.get("Authorization", "")
        expected = f"Bearer {self.server.token}"
        return hmac.compare_digest(got.encode("utf-8", "replace"), expected.encode("utf-8"))

    def _route(self, method: str) -> None:
        """Dispatch a request, turning every failure into a JSON error."""
        try:
            self._dispatch(method, self.path.split("?", 1)[0].rstrip("/"))
        except RequestError as e:
            self._error(e.status, str(e))
        except Exception as e:  # noqa: BLE001 - the server must keep serving
            self._error(500, f"internal error: {type(e).__name__}: {e}")

    def _dispatch(self, method: str, path: str) -> None:
        """Route a path to its endpoint."""
        if path in ("/v2/health/live", "/v2/health/ready"):
            return self._json(200, {"live": True} if path.endswith("live") else {"ready": True})
        if not self._authorized():
            self.close_connection = self.command == "POST"
            raise RequestError("missing or invalid bearer token", 401)
        if (method, path) == ("GET", "/v2"):
            return self._server_meta()
        model, rest = self._model_route(method, path)
        routes = {("GET", ""): self._model_meta, ("GET", "/ready"): self._ready,
                  ("POST", "/infer"): self._infer}
        handler = routes.get((method, rest.removeprefix("/versions/1")))
        if handler is None:
            self.close_connection = method == "POST"
            raise RequestError(f"no route {method} {path}", 404)
        return handler(model)

    def _model_route(self, method: str, path: str) -> tuple[TailModel, str]:
        """The served model a /v2/models/NAME/... path names, and the rest of the path."""
        prefix = "/v2/models/"
        name, _, rest = path.removeprefix(prefix).partition("/")
        model = self.server.models.get(name) if path.startswith(prefix) else None
        if model is None:
            self.close_connection = method == "POST"
            raise RequestError(f"no route {method} {path} (models: "
                               f"{', '.join(sorted(self.server.models))})", 404)
        return model, "/" + rest if rest else ""

    def _server_meta(self) -> None:
        """Send server metadata."""
        self._json(
            200, {"name": "edge-cloud", "version": "1", "extensions": ["binary_tensor_data"]}
        )

    def _model_meta(self, model: TailModel) -> None:
        """Send model metadata."""
        self._json(200, model.metadata())

    def _ready(self, model: TailModel) -> None:
        """Send model readiness."""
        self._json(200, {"name": model.name, "ready": True})

    def _read_body(self) -> bytes:
        """Read the request body, enforcing Content-Length and the size limit."""
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise RequestError("chunked bodies are not supported; send Content-Length", 411)
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True
            raise RequestError("Content-Length required", 411) from None
        if length < 0 or length > self.server.max_body:
            self.close_connection = True
            raise RequestError(f"body of {length} bytes exceeds limit {self.server.max_body}", 413)
        return self.rfile.read(length)

    def _infer(self, model: TailModel) -> None:
        """Validate an inference request, run the tail and send the outputs."""
        body = self._read_body()
        doc, binary = _split_body(body, self.headers.get(HEADER_LEN))
        feeds = parse_inputs(model, doc, binary)
        requested = parse_outputs(model, doc)
        start = time.perf_counter()
        try:
            arrays = model.run(feeds, [n for n, _ in requested])
        except Exception as e:  # noqa: BLE001 - ORT rejects e.g. inconsistent symbolic dims
            raise RequestError(f"inference failed: {e}") from None
        infer_ms = (time.perf_counter() - start) * 1e3
        out, header_len = build_response(model, doc, requested, arrays)
        self._send(200, out, header_len, infer_ms)

    def do_GET(self) -> None:  # noqa: N802
        """Handle GET."""
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        """Handle POST."""
        self._route("POST")


class EdgeCloudServer(ThreadingHTTPServer):
    """A threaded KServe v2 server for the tail models of a split (by served name)."""

    daemon_threads = True

    def __init__(
        self,
        addr: tuple[str, int],
        models: TailModel | dict[str, TailModel],
        token: str | None,
        max_body: int,
        verbose: bool = False,
    ) -> None:
        super().__init__(addr, _Handler)
        self.models = models if isinstance(models, dict) else {models.name: models}
        self.token, self.max_body, self.verbose = token, max_body, verbose
        self._thread: threading.Thread | None = None

    @property
    def model(self) -> TailModel:
        """The chosen cut's tail (served as "tail"), or the only one."""
        return self.models.get(MODEL_NAME) or next(iter(self.models.values()))

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        """host:port as tritonclient expects it."""
        return f"{self.server_address[0]!s}:{self.port}"

    def start(self) -> EdgeCloudServer:
        """Serve in a daemon thread and return self."""
        self._thread = threading.Thread(target=self.serve_forever, name="edge-cloud", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the socket."""
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()


def _resolve_token(token: str | None, token_file: str | os.PathLike[str] | None) -> str | None:
    """Return the token from the argument, the token file or EDGE_CLOUD_TOKEN (in that order)."""
    if token is None and token_file is not None:
        token = Path(token_file).read_text(encoding="utf-8").strip()
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
    if token is not None and not token.strip():
        raise ValueError("empty token")
    return token


def serve(
    split_dir_or_tail_onnx: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    token_file: str | os.PathLike[str] | None = None,
    insecure_no_auth: bool = False,
    max_body: int = DEFAULT_MAX_BODY,
    verbose: bool = False,
    threads: int = 0,
) -> EdgeCloudServer:
    """Start serving the tail models in a background thread and return the running server."""
    tok = _resolve_token(token, token_file)
    if tok is None and not insecure_no_auth:
        raise ValueError(
            f"no token configured (token, token_file or ${TOKEN_ENV}); "
            "pass insecure_no_auth=True (--insecure-no-auth) to serve without authentication"
        )
    models = {name: TailModel(path, name, threads)
              for name, path in resolve_tails(split_dir_or_tail_onnx).items()}
    return EdgeCloudServer((host, port), models, tok, max_body, verbose).start()


# ---------------------------------------------------------------- Triton model repository


def _pbtxt_tensor(vi: onnx.ValueInfoProto) -> str:
    """Render one config.pbtxt input/output entry."""
    tt = vi.type.tensor_type
    if tt.elem_type not in _ONNX_TO_KSERVE:
        raise ValueError(f"unsupported tensor type for {vi.name!r}")
    dims = ", ".join(str(d.dim_value) if d.HasField("dim_value") else "-1" for d in tt.shape.dim)
    dtype = _ONNX_TO_KSERVE[tt.elem_type]
    body = f"    name: {json.dumps(vi.name)}\n    data_type: TYPE_{dtype}\n    dims: [ {dims} ]\n"
    return "  {\n" + body + "  }"


def _pbtxt_list(key: str, values: list[onnx.ValueInfoProto]) -> str:
    """Render an ``input [...]`` or ``output [...]`` block."""
    return f"{key} [\n" + ",\n".join(_pbtxt_tensor(v) for v in values) + "\n]\n"


def model_config_pbtxt(model: onnx.ModelProto, name: str = MODEL_NAME) -> str:
    """Triton config.pbtxt for an ONNX tail served as ``name``."""
    inits = {i.name for i in model.graph.initializer}
    ins = [v for v in model.graph.input if v.name not in inits]
    head = f'name: "{name}"\nplatform: "{PLATFORM}"\nmax_batch_size: 0\n'
    return head + _pbtxt_list("input", ins) + _pbtxt_list("output", list(model.graph.output))


def export_model_repository(
    split: str | os.PathLike[str], out_dir: str | os.PathLike[str]
) -> Path:
    """Write out_dir/NAME/1/model.onnx and out_dir/NAME/config.pbtxt for every served tail.

    ``split`` is a split directory (every cut's tail) or one tail .onnx file (served as "tail").
    Returns the first model directory written ("tail" when the chosen cut has a tail).
    """
    written = []
    for name, src in resolve_tails(split).items():
        model_dir = Path(out_dir) / name
        (model_dir / "1").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, model_dir / "1" / "model.onnx")
        config = model_config_pbtxt(onnx.load(str(src), load_external_data=False), name)
        (model_dir / "config.pbtxt").write_text(config, encoding="utf-8")
        written.append(model_dir)
    return written[0]


# ---------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    """Build the CLI parser."""
    p = argparse.ArgumentParser(
        prog="python -m partition.serve", description=__doc__.splitlines()[0]
    )
    p.add_argument("split", help="split directory containing tail.onnx, or a tail .onnx file")
    p.add_argument("--bind", default="127.0.0.1", metavar="ADDR", help="address to listen on")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--token-file", help=f"file holding the bearer token (default: ${TOKEN_ENV})")
    p.add_argument("--insecure-no-auth", action="store_true", help="serve without authentication")
    p.add_argument(
        "--max-body", type=int, default=DEFAULT_MAX_BODY, help="request body limit in bytes"
    )
    p.add_argument(
        "--export-repository", metavar="DIR", help="write a Triton model repository and exit"
    )
    p.add_argument("--threads", type=int, default=0, help="ORT threads per request (0: all)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: serve until interrupted."""
    args = _parser().parse_args(argv)
    if args.export_repository:
        export_model_repository(args.split, args.export_repository)
        for model_dir in sorted(Path(args.export_repository).iterdir()):
            print(model_dir)
        return 0
    try:
        server = serve(
            args.split,
            args.bind,
            args.port,
            token_file=args.token_file,
            insecure_no_auth=args.insecure_no_auth,
            max_body=args.max_body,
            verbose=args.verbose,
            threads=args.threads,
        )
    except (ValueError, FileNotFoundError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if server.token is None:
        print("WARNING: serving WITHOUT authentication (--insecure-no-auth)", file=sys.stderr)
    names = ", ".join(repr(n) for n in sorted(server.models))
    print(f"serving {names} on http://{server.url}/v2", file=sys.stderr, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
