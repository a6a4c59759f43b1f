"""``--metric module:function``: the user's own judgement of a candidate's outputs.

The protocol (given on the command line only, never read from a bundle or split file)::

    def my_metric(reference, candidate, labels):
        # reference, candidate: {output name: numpy array [samples, *output shape]}
        #   (a list of per-sample arrays when the shapes vary from sample to sample)
        # labels: numpy array [samples], or None when the data has no labels
        return passed, value, reason   # bool, float, one-line str

``module`` is an importable module name (the current directory is searched first) or a
``path/to/file.py``. An exception or a malformed return is a usage error naming the function.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edge.core.errors import UsageError, first_line

__all__ = ["CustomResult", "call_metric", "load_metric"]

CustomResult = tuple[bool, float, str]
_LOADED: dict[str, Callable[..., Any]] = {}


def load_metric(spec: str) -> Callable[..., Any]:
    """The function ``module:function`` names (loaded once), or a UsageError."""
    if spec in _LOADED:
        return _LOADED[spec]
    module_name, _, function = spec.rpartition(":")
    if not module_name or not function.isidentifier():
        raise UsageError(f"--metric {spec}: give OUTPUT=KIND or module:function")
    module = _module(module_name, spec)
    found: Callable[..., Any] | None = vars(module).get(function)
    if not callable(found):
        raise UsageError(f"--metric {spec}: {module_name} has no function {function}")
    _LOADED[spec] = found
    return found


def _module(name: str, spec: str) -> Any:
    try:
        if name.endswith(".py"):
            path = Path(name)
            if not path.is_file():
                raise UsageError(f"--metric {spec}: no such file {name}")
            loader = importlib.util.spec_from_file_location(path.stem, path)
            assert loader is not None and loader.loader is not None
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
            return module
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        return importlib.import_module(name)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to fix
        raise UsageError(f"--metric {spec}: cannot import {name}: "
                         f"{type(exc).__name__}: {first_line(exc)}") from exc


def _stacked(names: Sequence[str], outputs: Sequence[Sequence[np.ndarray]],
             ) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for index, name in enumerate(names):
        arrays = [np.asarray(sample[index]) for sample in outputs]
        same = len({a.shape for a in arrays}) <= 1
        found[name] = np.stack(arrays) if same and arrays else arrays
    return found


def call_metric(spec: str, names: Sequence[str], reference: Sequence[Sequence[np.ndarray]],
                candidate: Sequence[Sequence[np.ndarray]], labels: Any) -> CustomResult:
    """Call the user's function; its (passed, value, reason), checked."""
    function = load_metric(spec)
    try:
        answer = function(_stacked(names, reference), _stacked(names, candidate), labels)
    except Exception as exc:  # noqa: BLE001 - the user's code: report, do not crash
        raise UsageError(f"--metric {spec} raised {type(exc).__name__}: "
                         f"{first_line(exc)}") from exc
    ok = (isinstance(answer, tuple) and len(answer) == 3 and isinstance(answer[0], bool | np.bool_)
          and isinstance(answer[1], int | float | np.number) and isinstance(answer[2], str))
    if not ok:
        raise UsageError(f"--metric {spec} returned {answer!r:.80}; expected "
                         "(passed: bool, value: float, reason: str)")
    lines = answer[2].strip().splitlines()
    return bool(answer[0]), float(answer[1]), lines[0][:200] if lines else ""
