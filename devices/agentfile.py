"""The agent as ONE file: a deterministic zipapp of the ``devices.agent`` package.

Members in a fixed order with fixed timestamps and modes, stored uncompressed, so the same
sources give the same bytes (and sha256) on every build and machine. On the device it is
``<work>/agent/edge_agent-<sha12>.pyz``, run as ``python3 edge_agent-<sha12>.pyz CMD ...``;
inside, the package is ``edge_agent`` and ``__main__.py`` calls its ``cli.entry``. Every
registered runtime's agent module (``targets/<name>/agent.py``, found through the
``edge.targets`` entry points by ``devices.agent.runtimes``) rides along as
``edge_agent/runtime_<name>.py``, where the agent finds it on the device.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import zipfile
from pathlib import Path

from devices.agent.runtimes import PREFIX, plugins
from edge.core.cache import cache_root
from edge.core.errors import UsageError
from edge.core.files import write_atomic

__all__ = ["PACKAGE", "agent_bytes", "agent_file", "agent_name"]

#: The agent's sources: every ``*.py`` directly in this directory.
SOURCE = Path(__file__).with_name("agent")
#: The package name inside the zipapp.
PACKAGE = "edge_agent"
_MAIN = f"import sys\n\nfrom {PACKAGE}.cli import entry\n\nsys.exit(entry())\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip member can carry


def agent_bytes() -> bytes:
    """The zipapp's bytes (the same for the same sources)."""
    members = [("__main__.py", _MAIN.encode())]
    members += [(f"{PACKAGE}/{p.name}", p.read_bytes()) for p in sorted(SOURCE.glob("*.py"))]
    members += [(f"{PACKAGE}/{PREFIX}{name}.py", Path(module.__file__).read_bytes())
                for name, module in sorted(plugins().items())]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members:
            archive.writestr(_member(name), data)
    return buffer.getvalue()


def _member(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = 3  # unix, wherever it is built
    info.external_attr = 0o100644 << 16
    return info


def agent_name(data: bytes) -> str:
    """``edge_agent-<first 12 hex of its sha256>.pyz``."""
    return f"edge_agent-{hashlib.sha256(data).hexdigest()[:12]}.pyz"


def agent_file() -> Path:
    """The zipapp on this host, under the cache (else a private temp dir when the cache cannot
    be written), written atomically once per content: a concurrent writer never exposes a
    half-written file (fleet deploys prepare their devices in parallel threads)."""
    data = agent_bytes()
    for folder in _folders():
        path = folder / agent_name(data)
        try:
            if not (path.is_file() and path.read_bytes() == data):
                folder.mkdir(parents=True, exist_ok=True)
                write_atomic(path, data)
            return path
        except OSError:
            continue
    raise UsageError(f"cannot write edge's agent file under {cache_root()} nor the temporary "
                     "directory; set EDGE_CACHE_DIR to a writable directory")


def _folders() -> tuple[Path, ...]:
    return cache_root() / "agent", Path(tempfile.gettempdir()) / f"edge-agent-{os.getuid()}"
