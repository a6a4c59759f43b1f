"""What really ran: each layer's unit and precision as the runtime that ran it says, read after
a ``bench`` timed the load (``Loaded.observe``: from that load where the runtime can say, else
from a second load of the same file and settings), never guessed from the plan.

A runtime's ``load`` may return a ``Loaded`` (a run callable that can also say what ran); one
that returns a plain callable cannot say, and its models are reported "not observable" with
why. Each layer is ``{"name", "op", "unit", "precision", "kernel", "macs"}``: ``unit`` where it
ran (CPU, NPU, GPU, an external delegate's unit), ``precision`` the arithmetic it computed in
(f32, bf16, f16, i8, u8, ...), ``macs`` its multiply-accumulates where its shapes say (0 else).
"""

from .errors import one_line

#: Layers at most per observation, and the longest text of one (edge.core.observed's bounds).
MAX_LAYERS, MAX_TEXT = 20000, 300
#: numpy / runtime type names -> how edge names a precision.
PRECISIONS = {
    "float": "f32", "float32": "f32", "f32": "f32", "fp32": "f32",
    "float16": "f16", "f16": "f16", "fp16": "f16", "half": "f16",
    "bfloat16": "bf16", "bf16": "bf16",
    "int8": "i8", "i8": "i8", "uint8": "u8", "u8": "u8",
    "int16": "i16", "i16": "i16", "int32": "i32", "i32": "i32", "int64": "i64", "i64": "i64",
    "bool": "bool", "boolean": "bool", "double": "f64", "float64": "f64", "f64": "f64",
}


class Loaded:
    """A loaded model: called, it runs once; ``observe()``: what its runtime says ran each
    layer of this very load (a dict with ``method`` and ``layers``)."""

    __slots__ = ("run", "observe")

    def __init__(self, run, observe):
        self.run = run
        self.observe = observe

    def __call__(self):
        return self.run()


def observed(run, runtime):
    """What ran each layer of a loaded model, as its runtime says; with ``why_not`` (and no
    layers) when the runtime cannot say or failed to."""
    observe = getattr(run, "observe", None)
    if observe is None:
        return {"runtime": runtime, "why_not": f"{runtime} does not say which unit or "
                                               "precision ran each layer"}
    try:
        found = observe()
    except Exception as exc:  # noqa: BLE001 - any runtime's failure to say is one line
        why = f"{runtime} could not say: {one_line(exc)}"
        return {"runtime": runtime, "why_not": why[:MAX_TEXT]}
    return dict(found, runtime=runtime, layers=found["layers"][:MAX_LAYERS])


def versions_of(read):
    """The versions ``read()`` names (runtime, plugins, driver), texts cut to ``MAX_TEXT``; {}
    when it fails: a version that cannot be read never hides what ran the layers."""
    try:
        return {str(k)[:MAX_TEXT]: str(v)[:MAX_TEXT] for k, v in read().items()}
    except Exception:  # noqa: BLE001 - any runtime's failure to say is no versions
        return {}


def layer(name, op, unit, precision, kernel="", macs=0):
    """One observed layer as the agent replies it (texts cut to ``MAX_TEXT``)."""
    return {"name": str(name)[:MAX_TEXT], "op": str(op)[:MAX_TEXT], "unit": str(unit)[:MAX_TEXT],
            "precision": precision_name(precision)[:MAX_TEXT], "kernel": str(kernel)[:MAX_TEXT],
            "macs": int(macs)}


def precision_name(kind):
    """edge's name of a runtime's type name ("float" -> "f32"); unknown names as given."""
    text = str(kind).lower()
    return PRECISIONS.get(text, text)


def count(shape):
    """The number of elements of a static shape (a list of ints); 0 when any is unknown."""
    total = 1
    for dim in shape:
        if not isinstance(dim, int) or dim < 0:
            return 0
        total *= dim
    return total


def product_macs(out_shape, inner):
    """Multiply-accumulates of a layer writing ``out_shape`` with ``inner`` products each."""
    return count(out_shape) * max(int(inner), 0)
