"""The operators of a Vela output, read inside Vela's toolchain environment (never edge's):
``python child.py MODEL.tflite`` prints a JSON list of every operator in execution order, the
NPU's ``ethos-u`` custom operator by that name, the rest (run by the CPU) by their TFLite
builtin names. Standard library and ethosu.vela only; on failure the last line on stderr says
why, and the exit status is 1.
"""

from __future__ import annotations

import json
import sys


def operators(path: str) -> list[str]:
    """Operator names of every subgraph, in order."""
    from ethosu.vela.tflite.BuiltinOperator import BuiltinOperator
    from ethosu.vela.tflite.Model import Model

    names = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
    with open(path, "rb") as handle:
        model = Model.GetRootAsModel(handle.read(), 0)
    codes = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        number = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        custom = code.CustomCode()
        codes.append(custom.decode() if custom else names.get(number, str(number)))
    found = []
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        found += [codes[graph.Operators(j).OpcodeIndex()] for j in range(graph.OperatorsLength())]
    return found


def main(argv: list[str]) -> int:
    try:
        print(json.dumps(operators(argv[1])))
    except Exception as exc:  # noqa: BLE001 - reported as one line to edge
        print(f"{type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
