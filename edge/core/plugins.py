"""Where runtime plug-ins are found: every folder of the ``targets`` package whose
``__init__`` declares ``RUNTIME`` (edge's own runtimes: a new one is a new folder, no other
edit), then the ``edge.targets`` entry points of other packages. This layer never imports a
runtime's converter or framework: a folder's ``__init__`` holds only its declaration."""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path, PurePath
from typing import Any

from edge.core.errors import UsageError, first_line

__all__ = ["GROUP", "PACKAGE", "compound_suffixes", "declared", "full_suffix", "plugin_names",
           "runtime_names"]

#: The entry point group another package registers a runtime under: ``name = "pkg:RUNTIME"``.
GROUP = "edge.targets"
#: The package whose folders are edge's own runtimes.
PACKAGE = "targets"


@functools.cache
def declared() -> dict[str, Any]:
    """Runtime name -> its declaration (``targets.base.Runtime``): the folders' first, then the
    entry points' (a name already found in a folder keeps the folder's). A plug-in that does
    not load, or whose entry point names another runtime, is one error line naming it."""
    found: dict[str, Any] = {}
    for where, load in (*_folders(), *_entries()):
        runtime = _loaded(where, load)
        if runtime is not None:
            found.setdefault(runtime.name, runtime)
    return dict(sorted(found.items()))


def _folders() -> Iterator[tuple[str, Callable[[], Any]]]:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return
    for module in pkgutil.iter_modules(list(spec.submodule_search_locations)):
        if module.ispkg:
            name = f"{PACKAGE}.{module.name}"
            yield name, functools.partial(_runtime_of, name)


def _runtime_of(module: str) -> Any:
    """A folder's ``RUNTIME``, None for a folder that declares none (a converter alone)."""
    return getattr(importlib.import_module(module), "RUNTIME", None)


def _entries() -> Iterator[tuple[str, Callable[[], Any]]]:
    for entry in entry_points(group=GROUP):
        yield f"{entry.group}:{entry.name} ({entry.value})", functools.partial(_checked, entry)


def _checked(entry: EntryPoint) -> Any:
    runtime = entry.load()
    if getattr(runtime, "name", None) != entry.name:
        raise ValueError(f"it declares runtime {getattr(runtime, 'name', None)!r}")
    return runtime


def _loaded(where: str, load: Callable[[], Any]) -> Any:
    try:
        return load()
    except Exception as exc:  # noqa: BLE001 - another package's code: any error, one line
        raise UsageError(f"the edge plug-in {where} does not load: {first_line(exc)}") from None


def runtime_names() -> tuple[str, ...]:
    """The registered runtimes' names."""
    return tuple(declared())


@functools.cache
def plugin_names() -> tuple[str, ...]:
    """Every name a profile may list that a plug-in offers: the runtimes and their targets,
    read without importing any (a folder's declaration is parsed; another package's entry
    point gives its runtime's name): loading a profile stays light."""
    names = {n for init in _folder_inits() for n in _declared_names(init)}
    names |= {entry.name for entry in entry_points(group=GROUP)}
    return tuple(sorted(names))


def _folder_inits() -> list[Path]:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted(Path(loc) / m.name / "__init__.py"
                  for loc in spec.submodule_search_locations
                  for m in pkgutil.iter_modules([loc]) if m.ispkg)


def _declared_names(init: Path) -> set[str]:
    """The runtime and target names of ``RUNTIME = Runtime(name=..., targets=((name, spec),
    ...))`` in a folder's ``__init__``, as literals (none when it declares no runtime)."""
    try:
        tree = ast.parse(init.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and any(isinstance(t, ast.Name) and t.id == "RUNTIME" for t in node.targets)):
            return _literal_names(node.value)
    return set()


def _literal_names(call: ast.Call) -> set[str]:
    found: set[str] = set()
    for keyword in call.keywords:
        with contextlib.suppress(ValueError, TypeError):
            value = ast.literal_eval(keyword.value)
            if keyword.arg == "name":
                found.add(str(value))
            elif keyword.arg == "targets":
                found |= {str(pair[0]) for pair in value}
    return found


def compound_suffixes() -> tuple[str, ...]:
    """The declared suffixes of more than one part (".vela.tflite"), longest first: an
    accelerator's artifact that is a .tflite or .onnx underneath, owned by its own runtime."""
    found = {s for r in declared().values()
             for s in (*r.suffixes, *r.companions) if s.count(".") > 1}
    return tuple(sorted(found, key=lambda s: (-len(s), s)))


def full_suffix(name: str) -> str:
    """A file name's suffix as runtimes declare them: the longest compound suffix it ends with
    ("m.vela.tflite" -> ".vela.tflite"), else its last ("m.v2.onnx" -> ".onnx")."""
    lowered = name.lower()
    return next((s for s in compound_suffixes() if lowered.endswith(s) and len(name) > len(s)),
                PurePath(name).suffix)
