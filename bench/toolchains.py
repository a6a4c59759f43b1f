"""What a toolchain environment costs a new machine: its wheels (size, download time), its build
from an empty pip cache (time, size on disk), and a conversion in it (the shipped digits CNN).

    python bench/toolchains.py [NAME]   # rknn-toolkit2 by default: bench/results/toolchains.json;
                                        # another: bench/results/toolchains-NAME.json

Everything runs in a temporary directory (``EDGE_TOOLCHAIN_DIR`` and pip's cache both fresh), so
the numbers are those of a machine that has never built it; docs/commands/toolchains.md cites
them, and each ``Toolchain``'s declared sizes (``wheels_mb``, ``installed_mb``: what a plan that
skips it says it would cost) are checked against them by tests/edge/test_toolchain.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.provenance import record  # noqa: E402
from edge.core.toolchain import Toolchain, build, disk_bytes  # noqa: E402
from targets import declared_toolchains  # noqa: E402

OUT = ROOT / "bench" / "results" / "toolchains.json"


def wheels(toolchain: Toolchain, folder: Path) -> dict[str, float]:
    """Download the pinned wheels alone: their total size and how long it took."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir",
                    "--only-binary=:all:", "-d", str(folder), *toolchain.requirements],
                   check=True)
    files = list(folder.glob("*.whl"))
    return {"wheels": len(files), "wheel_bytes": sum(f.stat().st_size for f in files),
            "download_seconds": round(time.monotonic() - started, 1)}


def built(toolchain: Toolchain) -> dict[str, float]:
    """Build the environment as edge does, timed; its size on disk."""
    started = time.monotonic()
    env = build(toolchain)
    return {"build_seconds": round(time.monotonic() - started, 1),
            "installed_bytes": disk_bytes(env.path), "distributions": len(env.installed)}


def converted(name: str, workdir: Path) -> dict[str, float]:
    """Seconds of each precision's conversion of the digits CNN (rknn-toolkit2 only)."""
    if name != "rknn-toolkit2":
        return {}
    import numpy as np

    from edge.core.model import inspect_model
    from edge.core.values import Dataset
    from targets.rknn.convert import RKNNConverter

    model = inspect_model(ROOT / "edge" / "samples" / "digits.onnx")
    calib = np.load(ROOT / "edge" / "samples" / "digits_calib.npy")[:8]
    data = Dataset(feeds=tuple({model.inputs[0].name: calib[i:i + 1]} for i in range(8)))
    times = {}
    for precision in ("fp16", "int8"):
        started = time.monotonic()
        RKNNConverter("rk3588").convert(model, precision, calib=data, workdir=workdir)
        times[f"convert_{precision}_seconds"] = round(time.monotonic() - started, 1)
    return times


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "rknn-toolkit2"
    toolchain = declared_toolchains()[name]
    with tempfile.TemporaryDirectory(prefix="edge-bench-toolchain-") as tmp:
        os.environ["EDGE_TOOLCHAIN_DIR"] = str(Path(tmp) / "toolchains")
        os.environ["PIP_CACHE_DIR"] = str(Path(tmp) / "pip-cache")
        result = {"toolchain": name, "requirements": list(toolchain.requirements),
                  **wheels(toolchain, Path(tmp) / "wheels"), **built(toolchain),
                  **converted(name, Path(tmp) / "convert")}
    result["provenance"] = record("bench/toolchains.py", argv)
    out = OUT if name == "rknn-toolkit2" else OUT.with_name(f"toolchains-{name}.json")
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "provenance"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
