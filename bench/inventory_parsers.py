#!/usr/bin/env python
"""What reading an Ansible inventory with ansible-core would cost, against edge's own reader
(docs/fleet.md, "How the inventory is read (and why not with ansible-core)").

    python bench/inventory_parsers.py [--version 2.19.14] [--repeats 9] [--out FILE]

* installs ``ansible-core==VERSION`` with its dependencies into a temporary directory
  (``pip install --target``; never into this environment) and measures the size and file count
  of ``ansible/``, ``ansible_test/``, every other top-level entry and the whole directory
  (``__pycache__`` included, as pip writes it, and without it);
* times imports in fresh processes, interleaved (the order alternates every repeat), with
  ``HOME`` and the working directory pointed at a temporary directory and no ``ANSIBLE_*``
  variable: ansible-core's ``DataLoader`` + ``InventoryManager`` (the install on
  ``PYTHONPATH``), ``import yaml`` alone (this environment's PyYAML, the one edge uses), and
  edge's reader ``import devices.inventory`` without and with ``yaml``. Each time is measured
  inside the child around the import (interpreter start-up excluded); one untimed round first;
* records whether the ansible import created ``$HOME/.ansible``.

Writes JSON (default bench/results/inventory.json): medians and ranges in seconds, the samples,
the installed distributions, the sizes and, under "provenance", the commit and the machine. The
temporary install is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import provenance  # noqa: E402  (bench/ is this script's directory)

#: name -> (statement timed in the child, whether the ansible install is on PYTHONPATH)
IMPORTS = {
    "ansible-core DataLoader + InventoryManager": (
        "from ansible.parsing.dataloader import DataLoader; "
        "from ansible.inventory.manager import InventoryManager", True),
    "import yaml": ("import yaml", False),
    "edge's reader (devices.inventory)": ("import devices.inventory", False),
    "edge's reader + yaml": ("import devices.inventory, yaml", False),
}
CHILD = ("import time; t = time.perf_counter(); {statement}; "
         "print(repr(time.perf_counter() - t))")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="2.19.14", help="ansible-core version to install")
    ap.add_argument("--repeats", type=int, default=9, help="timed imports per case")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "inventory.json")
    return ap.parse_args(argv)


def log(text: str) -> None:
    print(f"[inventory {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- install and sizes


def install(version: str, target: Path) -> dict[str, Any]:
    """``pip install --target`` ansible-core; the pip command, its wall time, the dists."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "--target", str(target), f"ansible-core=={version}"]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    seconds = time.perf_counter() - start
    return {"command": " ".join(["pip", *command[3:-2], "DIR", command[-1]]),
            "seconds": round(seconds, 1), "distributions": distributions(target)}


def distributions(target: Path) -> dict[str, str]:
    """Installed distribution -> version, from the ``*.dist-info`` directories."""
    found = {}
    for info in sorted(target.glob("*.dist-info")):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        found[name] = version
    return found


def tree_size(path: Path) -> dict[str, Any]:
    """Bytes and files under ``path`` (a file counts itself), with and without __pycache__."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    plain = [p for p in files if "__pycache__" not in p.parts]
    return {"bytes": sum(p.stat().st_size for p in files), "files": len(files),
            "mb": _mb(files), "bytes_without_pycache": sum(p.stat().st_size for p in plain),
            "files_without_pycache": len(plain), "mb_without_pycache": _mb(plain)}


def _mb(files: list[Path]) -> float:
    return round(sum(p.stat().st_size for p in files) / 1e6, 2)


def sizes(target: Path) -> dict[str, Any]:
    """ansible/, ansible_test/, both, every other top-level entry, and the whole directory."""
    top = {entry.name: tree_size(entry) for entry in sorted(target.iterdir())}
    both = {key: top["ansible"][key] + top["ansible_test"][key]
            for key in ("bytes", "files", "bytes_without_pycache", "files_without_pycache")}
    both["mb"] = round(both["bytes"] / 1e6, 2)
    both["mb_without_pycache"] = round(both["bytes_without_pycache"] / 1e6, 2)
    return {"ansible": top["ansible"], "ansible_test": top["ansible_test"],
            "ansible_and_ansible_test": both, "whole_target": tree_size(target),
            "top_level": top}


# ---------------------------------------------------------------- import times


def child_env(target: Path, home: Path, with_ansible: bool) -> dict[str, str]:
    """This environment without ANSIBLE_* and PYTHON* variables; HOME at ``home``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "PYTHON"))}
    paths = [str(target)] if with_ansible else []
    env.update(HOME=str(home), PYTHONPATH=os.pathsep.join([*paths, str(ROOT)]))
    return env


def time_import(statement: str, env: dict[str, str], cwd: Path) -> float:
    """Seconds the statement took in a fresh interpreter (start-up excluded)."""
    done = subprocess.run([sys.executable, "-c", CHILD.format(statement=statement)], env=env,
                          cwd=cwd, capture_output=True, text=True, check=True, timeout=120)
    return float(done.stdout.strip().splitlines()[-1])


def import_times(target: Path, scratch: Path, repeats: int) -> dict[str, list[float]]:
    """Every case ``repeats`` times in fresh processes, interleaved, after one untimed round."""
    home = scratch / "home"
    home.mkdir()
    samples: dict[str, list[float]] = {name: [] for name in IMPORTS}
    for index in range(repeats + 1):
        names = list(IMPORTS) if index % 2 == 0 else list(IMPORTS)[::-1]
        for name in names:
            statement, with_ansible = IMPORTS[name]
            seconds = time_import(statement, child_env(target, home, with_ansible), scratch)
            if index:
                samples[name].append(seconds)
        log(f"round {index}/{repeats}" + (" (untimed)" if not index else ""))
    return samples


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def side_effects(target: Path, scratch: Path) -> dict[str, Any]:
    """What importing ansible-core's inventory code left in a fresh, empty HOME."""
    home = scratch / "fresh-home"
    home.mkdir()
    statement, _ = IMPORTS["ansible-core DataLoader + InventoryManager"]
    time_import(statement, child_env(target, home, True), scratch)
    created = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    return {"home_entries_created": created,
            "created_home_ansible_tmp": (home / ".ansible" / "tmp").is_dir()}


# ---------------------------------------------------------------- main


def measure(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="edge-bench-ansible-") as tmp:
        scratch = Path(tmp)
        target = scratch / "target"
        log(f"pip install --target {target} ansible-core=={args.version}")
        installed = install(args.version, target)
        log(f"installed {installed['distributions']} in {installed['seconds']} s")
        measured = {"install": installed, "sizes": sizes(target),
                    "side_effects": side_effects(target, scratch)}
        samples = import_times(target, scratch, args.repeats)
    measured["imports"] = {name: {"statement": IMPORTS[name][0], "seconds": summary(values),
                                  "samples": values} for name, values in samples.items()}
    return measured


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.perf_counter()
    document = {"ansible_core": args.version, "repeats": args.repeats,
                "python": sys.version.split()[0], "loadavg_at_start": os.getloadavg(),
                **measure(args), "loadavg_at_end": os.getloadavg(),
                "wall_s": round(time.perf_counter() - started, 1),
                "provenance": provenance.record("bench/inventory_parsers.py", argv)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print_report(document)
    log(f"wrote {args.out} ({document['wall_s']} s)")
    return 0


def print_report(document: dict[str, Any]) -> None:
    for name in ("ansible", "ansible_test", "ansible_and_ansible_test", "whole_target"):
        size = document["sizes"][name]
        print(f"{name:26} {size['mb']:7.2f} MB {size['files']:6,} files "
              f"({size['mb_without_pycache']:.2f} MB, {size['files_without_pycache']:,} "
              "files without __pycache__)")
    for name, record in document["imports"].items():
        s = record["seconds"]
        print(f"{name:44} median {s['median']:.4f} s  ({s['min']:.4f}-{s['max']:.4f})")
    print(json.dumps(document["side_effects"]))


if __name__ == "__main__":
    sys.exit(main())
