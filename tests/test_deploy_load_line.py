"""Review of issue 29: deploy's output says how to load the artifact it deployed, which a choice
measured on the device can make another than the bundle's (whose load line the summary shows)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from edge.core.bundle import load_line
from edge.core.values import Bundle
from tests.support.cli import run_cli

pytestmark = pytest.mark.slow


def test_the_deploy_block_names_the_deployed_artifacts_load_line(tmp_path: Path) -> None:
    from edge.cli.render import render_deploy_outcome
    from edge.flows.deploy import DeployRequest, run_deploy_outcome

    out = tmp_path / "b"
    made = run_cli("optimize", "sample:digits", "--profile", "x86-64", "-o", str(out))
    assert made.status == 0, made.stderr
    bundle = Bundle.from_json(json.loads((out / "manifest.json").read_text()))
    lines = {r.candidate.id: load_line(bundle, r.candidate.id) for r in bundle.candidates
             if r.status in ("chosen", "passed")}
    assert len({line for line in lines.values() if line}) >= 2, lines  # OpenVINO IRs
    outcome, _, _ = run_deploy_outcome(DeployRequest(source=out, measure_on_device=False))
    assert outcome.report.candidate == bundle.chosen
    other = next(k for k, line in lines.items() if line and line != lines[bundle.chosen])
    moved = replace(outcome, report=replace(outcome.report, candidate=other))
    text = render_deploy_outcome(moved, bundle)
    assert "to load it" in text and str(lines[other]) in text
    assert not lines[bundle.chosen] or str(lines[bundle.chosen]) not in text
    plain = render_deploy_outcome(outcome, bundle)
    assert ("to load it" in plain) == bool(lines[bundle.chosen])
