"""Imports inside function bodies, and which of them are the lazy loads the guide allows.

Allowed: a heavy framework (a package of an optional extra a user installs, pyproject's
``[project.optional-dependencies]`` less ``test``/``dev``) loaded when it is needed; in the
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

import grimp

__all__ = ["InnerImport", "Rules", "inner_imports", "optional_packages", "rules"]

#: Extras of the developer, not of a user: their packages are never a product's lazy load.
DEVELOPER_EXTRAS = {"test", "dev"}
#: Packages an extra brings without naming them: Keras 3 comes with TensorFlow; the agent's
#: tflite_runtime is the device-side wheel of ai-edge-litert.
BROUGHT_ALONG = {"keras", "tflite_runtime"}
#: What the agent may load on a device (tests/test_architecture.py keeps the rest out).
AGENT_RUNTIMES = {"numpy", "onnxruntime", "openvino", "ai_edge_litert", "tflite_runtime"}
AGENT = "devices/agent/"


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
    for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    yield InnerImport(path=relative.as_posix(), line=node.lineno,
                                      function=function.name,
                                      modules=_modules(root, node,
                                                       relative.with_suffix("").parts))


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
    return provided | {w.replace("-", "_") for w in wanted} | BROUGHT_ALONG


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True, kw_only=True, slots=True)
class Rules:
    """What the allowed lazy loads are, for one tree."""

    optional: frozenset[str]
    at_help: frozenset[str]  # modules (all of them, dotted) that `edge --help` loads
    graph: grimp.ImportGraph
    ours: frozenset[str]

    def allowed(self, found: InnerImport) -> bool:
        """Whether ``found`` is a lazy load the guide allows."""
        return all(self._allowed(found.path, module) for module in found.modules)

    def _allowed(self, path: str, module: str) -> bool:
        top = module.split(".")[0]
        if top in self.optional:
            return True
        if path.startswith(AGENT) and top in AGENT_RUNTIMES:
            return True
        return self._loaded_at_help(path) and self._brings_a_package(module)

    def _loaded_at_help(self, path: str) -> bool:
        dotted = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        return dotted in self.at_help

    def _brings_a_package(self, module: str) -> bool:
        """Whether importing ``module`` at the top would load a package --help does not."""
        if module.split(".")[0] not in self.ours:
            return self._new_package(module.split(".")[0])
        if module not in self.graph.modules:
            return False
        reached = self.graph.find_upstream_modules(module) | {module}
        return any(self._new_package(m.split(".")[0]) for m in reached
                   if m.split(".")[0] not in self.ours)

    def _new_package(self, top: str) -> bool:
        return top not in sys.stdlib_module_names and top not in self.at_help


def rules(root: Path, packages: tuple[str, ...]) -> Rules:
    """The rules for the tree at ``root`` (imports ``edge.cli`` in a child to see --help)."""
    code = ("import sys, json; from edge.cli import main; main(['--help']); "
            "print('\\nLOADED', json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, check=True)
    loaded = json.loads(done.stdout.rsplit("LOADED", 1)[1])
    graph = grimp.build_graph(*packages, include_external_packages=True, cache_dir=None)
    return Rules(optional=frozenset(optional_packages(root / "pyproject.toml")),
                 at_help=frozenset(loaded), graph=graph, ours=frozenset(packages))
