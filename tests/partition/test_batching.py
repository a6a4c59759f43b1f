"""edge's eager batcher on MLServer's own adaptive batching (scenarios in
tests/partition/batching_probe.py, each in a child process): requests already queued form one
batch at once, a lone request does not wait for the max delay, and while request bodies are
still arriving a batch waits for them (up to the delay)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _scenario(name: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "tests.partition.batching_probe", name],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_queued_requests_form_one_batch_and_each_gets_its_row() -> None:
    got = _scenario("queued")
    assert got["eager"] and got["batches"] == [8] and got["seconds"] < 0.9
    assert got["rows"] == [[float(k)] for k in range(8)]


def test_a_lone_request_does_not_wait_for_the_delay() -> None:
    got = _scenario("lone")
    assert got["batches"] == [1] and got["seconds"] < 0.5


@pytest.mark.parametrize("reading,batches", [(0, [1, 1]), (1, [2])])
def test_a_batch_waits_only_while_bodies_are_arriving(reading: int, batches: list[int]) -> None:
    """With a body still being read the first request waits for the second (one batch of 2);
    with none it runs alone at once (two batches)."""
    assert _scenario(f"arriving-{reading}")["batches"] == batches
