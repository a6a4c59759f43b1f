"""Bundle directories: manifest.json plus artifacts stored by content hash, written atomically."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from edge.core.documents import read_json, write_json
from edge.core.errors import UsageError
from edge.core.files import check_space, inside, staged_dir
from edge.core.model import sha256_file
from edge.core.plugins import declared, full_suffix
from edge.core.profile import known_runtimes
from edge.core.values import Artifact, BenchResult, Bundle, StoredFile

__all__ = ["FORMAT", "LOAD", "MANIFEST", "check_writable", "chosen_load_line", "is_bundle",
           "load_line", "read_bundle", "version_drift", "write_bundle"]

MANIFEST = "manifest.json"
#: How an artifact's note that says how to load it, outside edge, begins.
LOAD = "load: "
FORMAT = 1
#: A part of an artifact's path inside its bundle: plain ASCII, never a dot or dash first.
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
#: Bytes allowed for manifest.json when checking the free space before a bundle is written.
MANIFEST_ROOM = 64 * 1024


def is_bundle(path: Path) -> bool:
    """Whether ``path`` is a bundle directory."""
    return path.is_dir() and (path / MANIFEST).is_file()


def chosen_load_line(bundle: Bundle) -> str | None:
    """The chosen artifact's note on how to load it as edge verified it ("load: ..."), if any."""
    return load_line(bundle, bundle.chosen)


def load_line(bundle: Bundle, candidate: str | None) -> str | None:
    """``candidate``'s artifact note on how to load it as edge verified it, if any (a deploy
    that measured on the device may activate another candidate than the bundle's choice)."""
    found = next((r for r in bundle.candidates if r.candidate.id == candidate), None)
    notes = found.artifact.notes if found is not None and found.artifact is not None else ()
    return next((n for n in notes if n.startswith(LOAD)), None)


def version_drift(bundle: Bundle, candidate: str | None, ran: BenchResult) -> str | None:
    """When the runtime, plugin or driver versions that ran ``candidate`` (``ran``, on a
    device) differ from those edge verified it with (its manifest timing, through the same
    loader): one line saying so; None when they agree or either is unknown."""
    found = next((r for r in bundle.candidates if r.candidate.id == candidate), None)
    verified = found.bench if found is not None else None
    if verified is None or verified.source not in (None, "host"):
        return None
    changed = [f"{name} {was} (the device runs {now})"
               for name, (was, now) in _versions(verified, ran).items() if was != now]
    if not changed:
        return None
    return (f"verified with {'; '.join(changed)} on {verified.where}: its outputs were not "
            "verified with these versions (edge optimize --eval on the device's profile, or "
            "provision the verified versions)")


#: Observed "versions" that name hardware, not a version (a host and a device always differ).
NOT_VERSIONS = frozenset({"vulkan device"})
#: Versions of a piece of hardware: compared only where both name the same one (another
#: vendor's GPU has its own driver, not a drifted one).
OF_HARDWARE = {"vulkan driver": "vulkan device", "vulkan api": "vulkan device"}


def _same_hardware(name: str, old: Mapping[str, str], new: Mapping[str, str]) -> bool:
    """Whether version ``name`` is of the same hardware in both (always, when it is of none)."""
    device = OF_HARDWARE.get(name)
    return device is None or old.get(device) == new.get(device)


def _versions(verified: BenchResult, ran: BenchResult) -> dict[str, tuple[str, str]]:
    """Each version both timings name: the runtime's, and those their observations name."""
    was, now = verified.device.get("runtime_version"), ran.device.get("runtime_version")
    found = {ran.runtime: (str(was), str(now))} if was and now else {}
    old = verified.observed.versions if verified.observed is not None else {}
    new = ran.observed.versions if ran.observed is not None else {}
    found.update({k: (old[k], new[k]) for k in old.keys() & new.keys() - NOT_VERSIONS
                  if k not in found and _same_hardware(k, old, new)})
    return found


def check_writable(out: Path) -> None:
    """Refuse, before any work, an output path that cannot become a bundle."""
    if out.exists() and not is_bundle(out):
        raise UsageError(f"-o {out}: exists and is not an edge bundle; choose another path")
    parent = out.resolve().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UsageError(f"-o {out}: cannot write under {parent}")


def write_bundle(out: Path, bundle: Bundle, files: Mapping[str, Path]) -> Path:
    """Write the bundle to ``out`` all at once: a reader sees the old bundle or the new one.

    ``files`` maps each artifact's bundle-relative name to the file to store there. Their size
    is checked against the free space first; a disk that fills anyway leaves nothing behind.
    """
    out = out.resolve()
    check_writable(out)
    size = sum(src.stat().st_size for src in files.values()) + MANIFEST_ROOM
    check_space(out, size)
    with staged_dir(out, size) as staging:
        for name, src in files.items():
            dst = staging / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)  # a copy: editing the bundle never touches the cache
        write_json("manifest", staging / MANIFEST, bundle)
    return out


def read_bundle(path: Path) -> Bundle:
    """Read and check a bundle: manifest format and every artifact's sha256."""
    bundle: Bundle = read_json("manifest", path / MANIFEST)
    _check_consistent(bundle, path / MANIFEST)
    for result in bundle.candidates:
        if result.artifact is not None:
            runtime = result.artifact.runtime
            _check_artifact(path, result.artifact, runtime)
            for companion in result.artifact.companions:
                _check_artifact(path, companion, runtime)
            _check_companions(path / MANIFEST, result.artifact)
    return bundle


def _check_consistent(bundle: Bundle, manifest: Path) -> None:
    """The chosen candidate is one of the bundle's, with an artifact on a runtime edge knows."""
    if bundle.chosen is not None:
        chosen = bundle.chosen_result()
        if chosen is None or chosen.artifact is None:
            raise UsageError(f"{manifest}: chosen {bundle.chosen!r} is not a candidate with an "
                             "artifact in this manifest; re-run edge optimize")
    for result in bundle.candidates:
        if result.artifact is not None and result.artifact.runtime not in known_runtimes():
            raise UsageError(f"{manifest}: runtime {result.artifact.runtime!r} of "
                             f"{result.candidate.id} is not one edge knows "
                             f"({', '.join(known_runtimes())})")


def _check_artifact(root: Path, stored: Artifact | StoredFile, runtime: str) -> None:
    """The file is in the bundle, of a plain name, the size and sha256 the manifest says."""
    name = stored.file
    file = inside(root, name, root / MANIFEST)
    _check_name(root / MANIFEST, name)
    if isinstance(stored, Artifact):
        _check_suffix(root / MANIFEST, name, runtime)
    if not file.is_file():
        raise UsageError(f"{root}: artifact {name} is missing; re-run edge optimize")
    if file.stat().st_size != stored.size_bytes or sha256_file(file) != stored.sha256:
        raise UsageError(f"{root}: artifact {name} does not match its size and sha256; re-run "
                         "edge optimize")


def _check_name(manifest: Path, name: str) -> None:
    """Every part of an artifact's path is a plain ASCII name (letters, digits, ``._-``, not
    starting with a dot or dash, at most 128 characters) with a suffix: a file name the
    device, its shell and its logs take as it is, never an option, a command or a look-alike."""
    parts = name.split("/")
    if not all(PLAIN_NAME.fullmatch(part) for part in parts) or not Path(name).suffix:
        raise UsageError(f"{manifest}: artifact file name {name!r} is not a plain name with a "
                         "suffix (letters, digits, '._-', at most 128 characters a part); "
                         "re-run edge optimize")


def _check_suffix(manifest: Path, name: str, runtime: str) -> None:
    """The main file's suffix is one its runtime loads (any runtime's, for one that declares
    none of its own)."""
    known = runtime_suffixes()
    allowed = known.get(runtime) or tuple(s for found in known.values() for s in found)
    if allowed and full_suffix(name) not in allowed:
        raise UsageError(f"{manifest}: artifact {name!r} of runtime {runtime} has suffix "
                         f"{full_suffix(name)!r}, not one that runtime loads "
                         f"({', '.join(allowed)}); re-run edge optimize")


def _check_companions(manifest: Path, artifact: Artifact) -> None:
    """Each file of an artifact lands on the device as ``model<suffix>``: no two may share one."""
    names = [artifact.file, *(c.file for c in artifact.companions)]
    suffixes = [full_suffix(name) for name in names]
    if len(set(suffixes)) != len(suffixes):
        raise UsageError(f"{manifest}: the files of artifact {artifact.file!r} share a suffix "
                         f"({', '.join(suffixes)}); re-run edge optimize")


@functools.cache
def runtime_suffixes() -> dict[str, tuple[str, ...]]:
    """Runtime name -> the suffixes its loader opens, as each runtime plug-in declares them
    (edge.core.plugins: this layer never imports a runtime's converter or framework)."""
    with contextlib.suppress(UsageError):  # a broken plug-in declares nothing here
        return {name: tuple(r.suffixes) for name, r in declared().items()}
    return {}
