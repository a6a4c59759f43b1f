"""Runtimes as plug-ins: one folder per runtime (``targets/<runtime>/``), each declaring a
``targets.base.Runtime`` as ``RUNTIME`` in its ``__init__``: found by its folder, so a new
runtime is a new folder and no other edit; another package adds one under the ``edge.targets``
entry point group. This is the one registry: reading it imports each folder's ``__init__`` (no
TensorFlow, OpenVINO or torch); a target's classes are imported when used."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys
from collections.abc import Iterator, Mapping
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge.core.cache import cache_key
from edge.core.errors import UsageError, first_line
from edge.core.plugins import GROUP, declared

if TYPE_CHECKING:
    from edge.core.toolchain import Toolchain
    from targets.base import ConvertSettings, Runtime, Target

__all__ = ["GROUP", "REGISTRY", "TOOLCHAIN_GROUP", "artifact_suffixes", "declared_toolchains",
           "get_target", "load_object", "runtime", "runtime_for_format", "runtime_for_suffix",
           "runtimes", "source_files", "target_for_suffix", "workdir_name"]

#: Converter environments a plug-in offers before its target is registered (a registered
#: target declares its own in ``caps.toolchain``): ``name = "module:TOOLCHAIN"``.
TOOLCHAIN_GROUP = "edge.toolchains"


def runtimes() -> dict[str, Runtime]:
    """Runtime name -> its declaration: every folder here that declares ``RUNTIME``, then the
    ``edge.targets`` entry points of other packages (edge.core.plugins), by name."""
    found = declared()
    if not found:
        raise UsageError(f"no runtime is registered (no targets/ folder declares one, no {GROUP} "
                         "entry point): reinstall edge (pip install -e . in a checkout)")
    return found


def runtime(name: str) -> Runtime:
    """The runtime registered under ``name``."""
    try:
        return runtimes()[name]
    except KeyError:
        raise UsageError(f"unknown runtime '{name}': choose one of "
                         f"{', '.join(runtimes())}") from None


def runtime_for_suffix(suffix: str) -> Runtime | None:
    """The runtime whose agent loader and profiler open files with this suffix, or None: the one
    suffix -> runtime map, owned by the runtimes' declarations."""
    return next((r for r in runtimes().values() if suffix.lower() in r.suffixes), None)


class _Registry(Mapping[str, str]):
    """Target name -> "module:Class" of every registered runtime's targets (read lazily)."""

    def _all(self) -> dict[str, str]:
        return {name: spec for r in runtimes().values() for name, spec in r.targets}

    def __getitem__(self, name: str) -> str:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


#: target name -> "module:Class"; the class implements targets.base.Target.
REGISTRY: Mapping[str, str] = _Registry()


def load_object(spec: str) -> Any:
    """The object a "module:name" spec names, its module imported now."""
    module_name, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def declared_toolchains() -> dict[str, Toolchain]:
    """Every toolchain edge manages, by name: the registered targets' and the
    ``edge.toolchains`` entry points'."""
    found = {t.caps.toolchain.name: t.caps.toolchain for t in _importable() if t.caps.toolchain}
    for entry in entry_points(group=TOOLCHAIN_GROUP):
        found.setdefault(entry.name, _toolchain(entry))
    return dict(sorted(found.items()))


def _toolchain(entry: EntryPoint) -> Any:
    """What a toolchain entry point names; one that does not load is one error line."""
    try:
        return entry.load()
    except Exception as exc:  # noqa: BLE001 - another package's code: any error, one line
        raise UsageError(f"the edge plug-in {entry.group}:{entry.name} ({entry.value}) does not "
                         f"load: {first_line(exc)}") from None


def get_target(name: str) -> Target:
    """Instantiate the target registered under ``name``."""
    try:
        spec = REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown target '{name}': choose one of {', '.join(REGISTRY)}") from None
    return load_object(spec)()


def _importable() -> list[Target]:
    """Every registered target whose module imports here."""
    found = []
    for name in REGISTRY:
        try:
            found.append(get_target(name))
        except ImportError:
            continue
    return found


def target_for_suffix(suffix: str) -> Target | None:
    """The target that owns artifacts with this suffix (one that converts on its own, not
    through another's run: ``.tflite`` is TFLite's, not NNAPI's; a compound suffix such as
    ``.vela.tflite`` has one owner), or None."""
    owners = [t for t in _importable() if t.caps.suffix == suffix]
    own = [t for t in owners if t.caps.converts_with is None and t.caps.reads == ".onnx"]
    return next(iter(own or owners), None)


def runtime_for_format(origin_format: str) -> str | None:
    """The target that runs a model file of this format as it is (``Capabilities.formats``)."""
    return next((t.name for t in _importable() if origin_format in t.caps.formats), None)


def artifact_suffixes() -> tuple[str, ...]:
    """The suffixes of the artifacts the registered targets make."""
    return tuple(dict.fromkeys(t.caps.suffix for t in _importable()))


def workdir_name(name: str, settings: ConvertSettings) -> str:
    """The cache directory name of a target's conversions with these settings.

    Targets that share a converter run (``converts_with``) share the directory; its key holds
    the settings and, of every target sharing it, the recipe version, the converters' versions
    and a digest of its module's source: a recipe change, a converter upgrade or an edit of the
    target's code never reuses an old artifact.
    """
    shared = get_target(name).caps.converts_with or name
    group = [t for t in _importable() if t.name == shared or t.caps.converts_with == shared]
    key = cache_key(settings.digest(), *((t.name, t.caps.recipe, _source_digest(t))
                                         for t in sorted(group, key=lambda t: t.name)),
                    recipe=max(t.caps.recipe for t in group),
                    converters=["numpy", *(d for t in group for d in t.caps.converters)],
                    toolchain={f"{t.name}:{d}": v for t in group if t.caps.toolchain
                               for d, v in t.caps.toolchain.versions().items()})
    return f"{shared}-{settings.digest()}-{key}"


def _source_digest(target: Target) -> str:
    """sha256 (16 hex) of the module that defines the target's class and of the ``targets``
    modules it imports from (e.g. the TFLite target's onnx2tf run and runner)."""
    digest = hashlib.sha256()
    for source in source_files(target):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def source_files(target: Target) -> list[Path]:
    """The source files a target's conversions depend on, sorted: its module's and those of
    the ``targets`` modules whose classes or functions that module imports."""
    module = sys.modules[type(target).__module__]
    names = {module.__name__} | {
        value.__module__ for value in vars(module).values()
        if (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__.startswith("targets.")}
    files = (inspect.getsourcefile(sys.modules[name]) for name in names)
    return sorted(Path(f) for f in files if f)
