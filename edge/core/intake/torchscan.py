"""The compiled graph of a TorchScript archive, listed in a bounded child (edge.core.bounded).

``python -m edge.core.intake.torchscan FILE`` loads the archive with ``torch.jit.load`` (which
compiles its code and runs only the ``__setstate__`` methods, already checked as text by
edge.core.intake.pytorch) and answers with every node kind of every method of
every module, inlined through the methods and functions they call (``ops``), and the calls
left that inlining could not follow (``calls``: the callee's type and method), as its answer
(edge.core.bounded.reply). Nothing of the module but its ``__setstate__`` runs.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from edge.core.bounded import OUT_OF_MEMORY, apply_limits, out_of_memory, reply
from edge.core.errors import first_line

__all__ = ["graph_ops", "main"]

#: Node kinds that call code the graph does not hold (left after inlining).
_CALLS = ("prim::CallMethod", "prim::CallFunction")


def graph_ops(module: Any) -> dict[str, list[str]]:
    """Every node kind of every method of ``module`` and its submodules, inlined, and the calls
    inlining left (``TYPE.METHOD``)."""
    import torch

    ops: set[str] = set()
    calls: set[str] = set()
    for _, sub in module.named_modules():
        for name in sub._c._method_names():
            graph = sub._c._get_method(name).graph.copy()
            torch._C._jit_pass_inline(graph)
            _walk(graph, ops, calls)
    return {"ops": sorted(ops), "calls": sorted(calls)}


def _walk(block: Any, ops: set[str], calls: set[str]) -> None:
    for node in block.nodes():
        ops.add(node.kind())
        if node.kind() in _CALLS:
            calls.add(_callee(node))
        for inner in node.blocks():
            _walk(inner, ops, calls)


def _callee(node: Any) -> str:
    """``TYPE.METHOD`` of a call inlining left (the first input's type: the object called)."""
    first = next(iter(node.inputs()), None)
    kind = str(first.type()) if first is not None else "?"
    return f"{kind}.{node.s('name') if node.hasAttribute('name') else '?'}"


def main(argv: list[str]) -> int:
    apply_limits()
    try:
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = torch.jit.load(argv[0], map_location="cpu")  # type: ignore[no-untyped-call]
        found = graph_ops(module)
    except Exception as exc:  # noqa: BLE001 - the loader's own errors, said as one line
        if out_of_memory(exc):
            return OUT_OF_MEMORY
        reply({"error": f"{argv[0]}: torch cannot load its TorchScript ({first_line(exc)})"})
        return 0
    reply(found)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
