"""Where a benchmark's numbers come from: the commit, the command and the machine.

Every script that writes a JSON under bench/results puts ``record(...)`` under its
``"provenance"`` key; tests/test_doc_figures.py fails when a JSON cited in docs/ lacks it::

    {"script": "bench/split_link.py", "command": "python bench/split_link.py --rounds 3",
     "git_sha": "<40 hex digits>", "git_dirty": ["edge/core/plan.py"],
     "when": "2026-11-23T10:00:00Z",
     "machine": {"cpu": "...", "flags": ["avx2", ...], "cores": 2, "memory_gb": 23.5,
                 "arch": "x86_64", "kernel": "6.1.0", "python": "3.11.7"}}

``git_dirty`` lists tracked files that differed from the commit when the JSON was written (bench
results excluded): numbers from a dirty tree belong to the commit plus those changes.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def record(script: str, argv: list[str] | None = None) -> dict[str, Any]:
    """Provenance of a run of ``script`` (a path relative to the repository) with ``argv``."""
    args = sys.argv[1:] if argv is None else argv
    return {"script": script, "command": " ".join(["python", script, *args]),
            "git_sha": git_sha(), "git_dirty": git_dirty(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine()}


def git_sha() -> str:
    """The commit checked out (40 hex digits), or "unknown" outside a git checkout."""
    return _git("rev-parse", "HEAD").strip() or "unknown"


def git_dirty() -> list[str]:
    """Tracked files that differ from the commit (bench/results left out)."""
    changed = _git("status", "--porcelain", "--untracked-files=no").splitlines()
    paths = [line[3:].split(" -> ")[-1] for line in changed if len(line) > 3]
    return sorted(p for p in paths if not p.startswith("bench/results/"))


def machine() -> dict[str, Any]:
    """The CPU (model name and flags), cores, memory, kernel and Python of this machine."""
    info = _cpuinfo()
    return {"cpu": info.get("model name") or platform.processor() or platform.machine(),
            "flags": sorted(info.get("flags", "").split()), "cores": os.cpu_count(),
            "memory_gb": _memory_gb(), "arch": platform.machine(),
            "kernel": platform.release(), "python": platform.python_version()}


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty elsewhere)."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return fields
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _memory_gb() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
    return round(pages * size / 2**30, 1)


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""
