"""The serving engine's seam: engines are named in one table and loaded only when serving."""

from __future__ import annotations

import subprocess
import sys

import pytest

from edge.core.errors import UsageError
from edge.flows.cloud.engine import DEFAULT_ENGINE, ENGINES, load_engine


def test_an_unknown_engine_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(UsageError, match=r"unknown serving engine 'triton'; use one of mlserver"):
        load_engine("triton")


def test_mlserver_is_the_default_and_loads_only_when_asked() -> None:
    """In a child: MLServer's gRPC messages must not join this process (tritonclient's)."""
    assert DEFAULT_ENGINE == "mlserver" and ENGINES == {"mlserver": "edge.flows.cloud.mlserver"}
    code = ("import sys; import edge.flows.serve_cloud; before = 'mlserver' in sys.modules; "
            "from edge.flows.cloud.engine import load_engine; engine = load_engine(); "
            "print(before, engine.name, callable(engine.serve), 'mlserver' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "mlserver", "True", "True"]
