"""``edge export mender``: a bundle's release as a Mender artifact (format v3, a module-image of
payload type ``edge-release``), written with Debian's ``mender-artifact`` tool, validated with
it, then renamed into place (a failure leaves no output).

The payload: the release's files under the names they take on the device (``model.tflite``,
and companions), edge's agent (``edge_agent-<sha12>.pyz``) and ``edge-release.json`` (the
release id, the candidate, each file's sha256). The meta-data carries the device-side settings
the update module reads: ``edge_work_dir``, ``edge_python``, ``edge_keep``. The update module
itself (devices/mender/edge_release.py) is installed on the device once, by ``edge export
mender-module``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from devices.agentfile import agent_file
from devices.mender import MODULE, MODULE_PATH, PAYLOAD_TYPE
from devices.release import DEFAULT_KEEP
from edge.core.bundle import is_bundle, read_bundle
from edge.core.errors import UsageError, first_line
from edge.core.files import staged, write_atomic
from edge.core.model import sha256_file
from edge.core.plugins import full_suffix
from edge.core.values import Artifact, Bundle, JsonValue

__all__ = ["MenderExport", "MenderRequest", "ModuleExport", "export_mender", "export_module"]

TOOL = "mender-artifact"
MANIFEST = "edge-release.json"
#: A Mender device type or artifact name as edge writes them: no spaces, quotes or options.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:-]{0,127}")
TOOL_TIMEOUT_S = 600


@dataclass(frozen=True, kw_only=True, slots=True)
class MenderRequest:
    """What to export: the bundle, the Mender device type, the output file, the settings."""

    bundle: Path
    device_type: str
    out: Path
    artifact_name: str | None = None  # default: <bundle name>-<release id 12>
    candidate: str | None = None  # default: the bundle's choice
    work_dir: str = "~/.edge"
    python: str = "python3"
    keep: int = DEFAULT_KEEP


@dataclass(frozen=True, kw_only=True, slots=True)
class MenderExport(JsonValue):
    """The artifact written."""

    out: str
    artifact_name: str
    device_type: str
    payload_type: str
    candidate: str
    release: str
    files: tuple[str, ...]
    size_bytes: int
    validated: bool
    module_path: str  # where the update module goes on the device


@dataclass(frozen=True, kw_only=True, slots=True)
class ModuleExport(JsonValue):
    """The update module written."""

    out: str
    payload_type: str
    module_path: str


def export_mender(request: MenderRequest) -> MenderExport:
    """Write, validate and rename into place the Mender artifact of the bundle's release."""
    out = _check_request(request)
    tool = _tool()
    bundle = _bundle(request.bundle)
    artifact = _artifact(bundle, request.candidate, request.bundle)
    release = artifact.release_id[:16]
    name = request.artifact_name or f"{request.bundle.name.removesuffix('.bundle')}-{release[:12]}"
    _check_name("--artifact-name", name)
    with tempfile.TemporaryDirectory(prefix=".edge-mender-", dir=out.parent) as scratch:
        payload = _payload(Path(scratch), request.bundle, artifact, bundle.chosen)
        meta = _meta_data(Path(scratch), request)
        with staged(out, suffix=".mender") as tmp:
            _write(tool, tmp, request.device_type, name, payload, meta)
            _validate(tool, tmp)
    return MenderExport(out=str(out), artifact_name=name, device_type=request.device_type,
                        payload_type=PAYLOAD_TYPE, candidate=artifact.candidate.id,
                        release=release, files=tuple(p.name for p in payload),
                        size_bytes=out.stat().st_size, validated=True, module_path=MODULE_PATH)


def export_module(out: Path) -> ModuleExport:
    """The update module, written to ``out`` (a file, or a folder to hold ``edge-release``)."""
    target = out / PAYLOAD_TYPE if out.is_dir() else out
    if not target.parent.is_dir():
        raise UsageError(f"-o {out}: folder {target.parent} does not exist")
    write_atomic(target, MODULE.read_bytes())
    target.chmod(0o755)
    return ModuleExport(out=str(target), payload_type=PAYLOAD_TYPE, module_path=MODULE_PATH)


def _check_request(request: MenderRequest) -> Path:
    """Bad input refused before any work; the output path, absolute."""
    _check_name("--device-type", request.device_type)
    if request.keep < 1:
        raise UsageError("--keep must be >= 1")
    for option, value in (("--work-dir", request.work_dir), ("--device-python", request.python)):
        if not value or any(c.isspace() or c in "\"'`$;&|<>\\" for c in value):
            raise UsageError(f"{option} {value!r}: give a plain path (no spaces or quotes)")
    out = request.out.absolute()
    if out.is_dir():
        raise UsageError(f"-o {request.out}: is a folder; give the artifact's file name "
                         "(release.mender)")
    if not out.parent.is_dir():
        raise UsageError(f"-o {request.out}: folder {out.parent} does not exist")
    if not os.access(out.parent, os.W_OK):
        raise UsageError(f"-o {request.out}: cannot write in {out.parent}")
    return out


def _check_name(option: str, value: str) -> None:
    if not _NAME.fullmatch(value):
        raise UsageError(f"{option} {value!r}: letters, digits and '._+:-' only (at most 128, "
                         "starting with a letter or digit)")


def _tool() -> str:
    """The mender-artifact program (missing: one line naming Debian's package)."""
    found = shutil.which(TOOL)
    if found is None:
        raise UsageError(f"edge export mender needs the {TOOL} tool: install Debian's package "
                         f"{TOOL} (apt-get install {TOOL})")
    return found


def _bundle(path: Path) -> Bundle:
    if not is_bundle(path):
        raise UsageError(f"{path}: not an edge bundle (no manifest.json); give the folder "
                         "edge optimize wrote")
    return read_bundle(path)


def _artifact(bundle: Bundle, candidate: str | None, path: Path) -> Artifact:
    """The artifact to ship: ``candidate``'s, else the bundle's choice."""
    wanted = candidate or bundle.chosen
    found = next((r for r in bundle.candidates if r.candidate.id == wanted), None)
    if found is None or found.artifact is None:
        have = [r.candidate.id for r in bundle.candidates if r.artifact is not None]
        why = "has no chosen candidate" if wanted is None else f"has no artifact of {wanted!r}"
        raise UsageError(f"{path}: {why} (artifacts: {', '.join(have) or 'none'}); give "
                         "--candidate")
    return found.artifact


def _payload(scratch: Path, bundle_dir: Path, artifact: Artifact,
             chosen: str | None) -> list[Path]:
    """The payload files in ``scratch``/files: the release's, the agent, edge-release.json."""
    folder = scratch / "files"
    folder.mkdir()
    stored = [(c.file, c.sha256) for c in artifact.companions] + [(artifact.file,
                                                                    artifact.sha256)]
    files: dict[str, str] = {}
    for name, sha in stored:
        device_name = f"model{full_suffix(name)}"
        shutil.copyfile(bundle_dir / name, folder / device_name)
        files[device_name] = sha
    agent = agent_file()
    shutil.copyfile(agent, folder / agent.name)
    manifest = {"format": 1, "release": artifact.release_id[:16],
                "candidate": artifact.candidate.id, "chosen": chosen, "runtime": artifact.runtime,
                "model": f"model{full_suffix(artifact.file)}", "files": files,
                "companions": [f"model{full_suffix(c.file)}" for c in artifact.companions],
                "agent": {"file": agent.name, "sha256": sha256_file(agent)}}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return [folder / MANIFEST, folder / agent.name, *(folder / n for n in sorted(files))]


def _meta_data(scratch: Path, request: MenderRequest) -> Path:
    """The payload's meta-data: the settings the update module reads on the device."""
    path = scratch / "meta-data.json"
    path.write_text(json.dumps({"edge_work_dir": request.work_dir, "edge_python": request.python,
                                "edge_keep": request.keep}), encoding="utf-8")
    return path


def _write(tool: str, out: Path, device_type: str, name: str, payload: list[Path],
           meta: Path) -> None:
    command = [tool, "write", "module-image", "--type", PAYLOAD_TYPE, "--device-type",
               device_type, "--artifact-name", name, "--meta-data", str(meta),
               "--output-path", str(out)]
    for path in payload:
        command += ["--file", str(path)]
    _run(command, "writing the artifact")


def _validate(tool: str, path: Path) -> None:
    _run([tool, "validate", str(path)], "validating the artifact")


def _run(command: list[str], what: str) -> str:
    """Run the tool; its output, or a UsageError naming its last line."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"{TOOL} failed {what}: {first_line(exc)}") from None
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise UsageError(f"{TOOL} failed {what} (exit {done.returncode}): "
                         f"{(lines or ['no output'])[-1].strip()}")
    return done.stdout
