"""Imports inside function bodies, and which of them are the lazy loads the guide allows.

Allowed: a heavy framework (a package of an optional extra a user installs, pyproject's
``[project.optional-dependencies]`` less ``test``/``dev``) loaded when it is needed, or a
module of the tree whose module-level imports load one (edge.core.torch_graph: torch); in the
device agent, a device runtime (the agent runs on Python 3.8 devices where numpy and each
runtime are optional); and in a module that ``edge --help`` loads, a module that would bring a
package ``edge --help`` does not load (a CLI command loading its flow, for one). Everything else
belongs at the top of its module, where a reader looks for it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["InnerImport", "Rules", "inner_imports", "optional_packages", "rules", "top_imports"]

#: Extras of the developer, not of a user: their packages are never a product's lazy load.
DEVELOPER_EXTRAS = {"test", "dev"}
#: Packages an extra brings without naming them: Keras 3 comes with TensorFlow; the agent's
#: tflite_runtime is the device-side wheel of ai-edge-litert.
BROUGHT_ALONG = {"keras", "tflite_runtime"}
#: Vendor SDKs that only run inside their converter's toolchain environment (edge toolchains).
TOOLCHAIN_SDKS = {"rknn"}
#: What the agent may load on a device (tests/test_architecture.py keeps the rest out).
AGENT_RUNTIMES = {"numpy", "onnxruntime", "openvino", "ai_edge_litert", "tflite_runtime"}
AGENT = "devices/agent/"
#: Folders some wheels install at the top of site-packages: no extra's import name.
STRAY = {"tests", "tools", "examples", "docs", "bench", "benchmarks", "scripts"}


@dataclass(frozen=True, kw_only=True, slots=True)
class InnerImport:
    """One import statement inside a function: where, and the modules it names."""

    path: str
    line: int
    function: str
    modules: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.path}:{self.line} in {self.function}(): {', '.join(self.modules)}"


def inner_imports(root: Path, packages: tuple[str, ...]) -> list[InnerImport]:
    """Every import statement inside a function of the ``packages`` under ``root``."""
    return [found for package in packages for path in sorted((root / package).rglob("*.py"))
            for found in _in_file(root, path)]


def _in_file(root: Path, path: Path) -> Iterator[InnerImport]:
    relative = path.relative_to(root)
    parts = relative.with_suffix("").parts
    for node, function in _with_function(ast.parse(path.read_text(encoding="utf-8")), None):
        if function is not None and isinstance(node, (ast.Import, ast.ImportFrom)):
            yield InnerImport(path=relative.as_posix(), line=node.lineno, function=function,
                              modules=_modules(root, node, parts))


def _with_function(node: ast.AST, function: str | None) -> Iterator[tuple[ast.AST, str | None]]:
    """Every node below ``node``, each once, with the innermost function it sits in."""
    for child in ast.iter_child_nodes(node):
        yield child, function
        inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        yield from _with_function(child, inner or function)


def _modules(root: Path, node: ast.Import | ast.ImportFrom, parts: tuple[str, ...],
             ) -> tuple[str, ...]:
    """The absolute names imported; ``from pkg import sub`` names ``pkg.sub`` where ``sub`` is
    a module of this tree."""
    if isinstance(node, ast.Import):
        return tuple(alias.name for alias in node.names)
    package = parts[:-1]
    base = ".".join(package[:len(package) - node.level + 1]) if node.level else ""
    module = ".".join(p for p in (base, node.module or "") if p)
    subs = [f"{module}.{a.name}" for a in node.names if _is_module(root, f"{module}.{a.name}")]
    return tuple(subs) or (module,)


def _is_module(root: Path, dotted: str) -> bool:
    path = root.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def optional_packages(pyproject: Path) -> set[str]:
    """Import names of the packages of pyproject's user extras (tf-keras -> tf_keras,
    pillow -> PIL: the installed distributions say which names each provides)."""
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    wanted = {_normal(m.group(0)) for name, reqs in extras.items()
              if name not in DEVELOPER_EXTRAS for req in reqs
              if (m := re.match(r"[A-Za-z0-9._-]+", req)) and not req.startswith("edge[")}
    provided = {top for top, dists in importlib.metadata.packages_distributions().items()
                for dist in dists if _normal(dist) in wanted}
    return ((provided - STRAY) | {w.replace("-", "_") for w in wanted} | BROUGHT_ALONG
            | TOOLCHAIN_SDKS)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def top_imports(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """What each module of the tree imports when it is imported: its module-level imports
    (not those inside functions or under ``if TYPE_CHECKING``), as absolute names."""
    found: dict[str, set[str]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            dotted = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            found[dotted] = {m for node in _module_level(tree.body)
                             for m in _modules(root, node, parts)}
    return found


def _module_level(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            yield from _module_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _module_level(node.body + node.orelse + node.finalbody
                                     + [s for h in node.handlers for s in h.body])


@dataclass(frozen=True, kw_only=True, slots=True)
class Rules:
    """What the allowed lazy loads are, for one tree."""

    optional: frozenset[str]
    at_help: frozenset[str]  # modules (all of them, dotted) that `edge --help` loads
    imports: dict[str, set[str]]  # top_imports of the tree

    def allowed(self, found: InnerImport) -> bool:
        """Whether ``found`` is a lazy load the guide allows."""
        return all(self._allowed(found.path, module) for module in found.modules)

    def _allowed(self, path: str, module: str) -> bool:
        loaded = self.loads(module)
        if loaded & self.optional:  # a heavy framework, or a module of ours built on one
            return True
        if path.startswith(AGENT) and module.split(".")[0] in AGENT_RUNTIMES:
            return True
        return self._loaded_at_help(path) and bool(
            {top for top in loaded if top not in sys.stdlib_module_names} - self.at_help)

    def loads(self, module: str) -> set[str]:
        """The top-level packages that importing ``module`` loads (its own, and through the
        module-level imports of this tree's modules, theirs)."""
        seen: set[str] = set()
        packages: set[str] = set()
        todo = [module]
        while todo:
            name = todo.pop()
            packages.add(name.split(".")[0])
            for step in (self._ours(name) - seen):
                seen.add(step)
                todo.extend(self.imports[step])
        return packages

    def _ours(self, name: str) -> set[str]:
        """``name`` and the packages above it, those that are modules of this tree (importing
        a module runs its packages' ``__init__`` first)."""
        parts = name.split(".")
        return {m for i in range(1, len(parts) + 1)
                if (m := ".".join(parts[:i])) in self.imports}

    def _loaded_at_help(self, path: str) -> bool:
        dotted = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        return dotted in self.at_help


def rules(root: Path, packages: tuple[str, ...]) -> Rules:
    """The rules for the tree at ``root`` (runs ``edge --help`` in a child to see what it
    loads)."""
    code = ("import sys, json; from edge.cli import main; main(['--help']); "
            "print('\\nLOADED', json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, check=True)
    loaded = set(json.loads(done.stdout.rsplit("LOADED", 1)[1]))
    return Rules(optional=frozenset(optional_packages(root / "pyproject.toml")),
                 at_help=frozenset(loaded | {m.split(".")[0] for m in loaded}),
                 imports=top_imports(root, packages))
