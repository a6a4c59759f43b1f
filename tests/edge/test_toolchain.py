"""Toolchain environments (edge/core/toolchain.py, edge toolchains): built once from the same
package index as pip, pip check clean, never used half-built, runs bounded; their versions key
the conversion cache and go into the manifest. The real converter's test is
tests/targets/test_rknn.py; these use a one-distribution environment (six) to stay quick."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import ClassVar

import pytest

import targets
from edge.core.cache import cache_key
from edge.core.capabilities import Capabilities
from edge.core.toolchain import (
    RECORD,
    Toolchain,
    ToolchainError,
    build,
    built,
    location,
    run,
    unbuilt,
)
from edge.core.values import Artifact, Candidate
from targets import workdir_name
from targets.base import ConvertSettings, Runtime
from tests.support.cli import run_cli

TINY = Toolchain(name="tiny-six", requirements=("six==1.17.0",))
#: six is not installed: pip installs with --no-deps, so pip check must refuse it
UNCHECKED = Toolchain(name="tiny-unchecked", requirements=("python-dateutil==2.9.0.post0",))
ABSENT = Toolchain(name="tiny-absent", requirements=("edge-no-such-distribution==0.0.1",))


@pytest.fixture(scope="module")
def toolchain_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A toolchain root of this module's own, with TINY built there (after a stopped build
    left a half-built directory that the build must wipe)."""
    root = tmp_path_factory.mktemp("toolchains")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGE_TOOLCHAIN_DIR", str(root))
        half = location(TINY)
        (half / "bin").mkdir(parents=True)
        (half / "bin" / "python").symlink_to("/bin/false")
        (half / "left-by-a-stopped-build").write_text("")
        assert built(TINY) is None  # no record: never used
        build(TINY)
        yield root


@pytest.fixture
def declared(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test toolchains declared beside the real ones, as a plug-in declares them: entry
    points of the ``edge.toolchains`` group."""
    real = targets.entry_points
    extra = [EntryPoint(t.name, f"tests.edge.test_toolchain:{_constant(t)}",
                        targets.TOOLCHAIN_GROUP) for t in (TINY, UNCHECKED, ABSENT)]

    def with_tests(*, group: str) -> list[EntryPoint]:
        return [*real(group=group), *(extra if group == targets.TOOLCHAIN_GROUP else [])]

    monkeypatch.setattr(targets, "entry_points", with_tests)


def _constant(toolchain: Toolchain) -> str:
    return next(k for k, v in globals().items() if v is toolchain)


# ---------------------------------------------------------------- the declaration
def test_a_toolchain_pins_every_requirement() -> None:
    with pytest.raises(ValueError, match="pinned"):
        Toolchain(name="loose", requirements=("six>=1",))
    with pytest.raises(ValueError, match="not requirements"):
        Toolchain(name="x", requirements=("six==1.17.0",), records=("numpy",))


@pytest.mark.parametrize("name,measured", [("rknn-toolkit2", "toolchains.json"),
                                           ("ethos-u-vela", "toolchains-ethos-u-vela.json")])
def test_what_a_plan_says_a_toolchain_costs_is_what_it_was_measured_to_cost(
        name: str, measured: str) -> None:
    """A skipped candidate names the download and the disk its toolchain would take: the
    declared figures are bench/toolchains.py's, for the same pins."""
    toolchain = targets.declared_toolchains()[name]
    bench = json.loads((Path(__file__).parents[2] / "bench" / "results" / measured).read_text())
    assert bench["requirements"] == list(toolchain.requirements)
    assert toolchain.wheels_mb == round(bench["wheel_bytes"] / 1e6)
    assert toolchain.installed_mb == round(bench["installed_bytes"] / 1e6)
    said = unbuilt(replace(toolchain, name=f"{name}-absent-here")) or ""
    size = {"rknn-toolkit2": "1.98 GB of wheels, 3.97 GB installed",
            "ethos-u-vela": "19 MB of wheels, 102 MB installed"}[name]
    assert f"it downloads its pinned packages, {size}; edge reaches the network" in said


def test_the_environment_is_keyed_by_requirements_and_python() -> None:
    other = Toolchain(name="tiny-six", requirements=("six==1.16.0",))
    assert TINY.key != other.key
    assert TINY.dirname.startswith("tiny-six-py3")
    assert TINY.versions() == {"python": TINY.versions()["python"], "toolchain": TINY.key,
                               "six": "1.17.0"}


# ---------------------------------------------------------------- building and running
def test_a_built_environment_is_recorded_and_isolated(toolchain_dir: Path) -> None:
    env = built(TINY)
    assert env is not None and env.path == toolchain_dir / TINY.dirname
    assert (env.path / RECORD).is_file()
    assert not (env.path / "left-by-a-stopped-build").exists()
    assert env.installed["six"] == "1.17.0"
    out = run(TINY, ["-c", "import six, sys; print(six.__version__, sys.prefix)"],
              timeout_s=60)
    assert out.split() == ["1.17.0", str(env.path)]
    with pytest.raises(ToolchainError, match="No module named 'numpy'"):
        run(TINY, ["-c", "import numpy"], timeout_s=60)  # edge's packages do not leak in


def test_building_again_reuses_the_environment(toolchain_dir: Path) -> None:
    first = built(TINY)
    assert first is not None
    assert build(TINY) == first


def test_a_run_over_its_time_limit_is_killed_with_what_it_started(toolchain_dir: Path,
                                                                   tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = ("import subprocess, sys, time; "
              "p = subprocess.Popen(['sleep', '300']); "
              f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(300)")
    started = time.monotonic()
    with pytest.raises(ToolchainError) as caught:
        run(TINY, ["-c", script], timeout_s=3, what="tiny conversion")
    assert time.monotonic() - started < 60
    assert str(caught.value) == "tiny conversion: still running after its 3 s limit; stopped"
    assert _gone(int(pid_file.read_text()))


def _gone(pid: int) -> bool:
    """Whether the process ended (a zombie counts: it no longer runs)."""
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def test_running_an_environment_that_is_not_built_says_how_to_build_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_TOOLCHAIN_DIR", str(tmp_path))
    with pytest.raises(ToolchainError, match="edge toolchains install tiny-six"):
        run(TINY, ["-c", "pass"], timeout_s=10)


# ---------------------------------------------------------------- failures, through the CLI
@pytest.mark.parametrize(("toolchain", "why"), [
    (ABSENT, "pip install failed (exit 1): No matching distribution found for "
             "edge-no-such-distribution==0.0.1"),
    (UNCHECKED, "pip check failed (exit 1): python-dateutil 2.9.0.post0 requires six, which "
                "is not installed."),
])
def test_a_failed_build_is_one_error_line_and_leaves_nothing(
        toolchain: Toolchain, why: str, declared: None, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_TOOLCHAIN_DIR", str(tmp_path))
    result = run_cli("toolchains", "install", toolchain.name)
    assert result.status == 2, result.stderr
    assert result.error_lines == [f"error: toolchain {toolchain.name}: {why}"], result.stderr
    assert "Traceback" not in result.stderr
    assert not location(toolchain).exists() and built(toolchain) is None


def test_an_unknown_toolchain_names_the_declared_ones() -> None:
    result = run_cli("toolchains", "install", "nope")
    assert result.status == 2
    assert result.error_lines == ["error: unknown toolchain 'nope': choose one of "
                                  "ethos-u-vela, rknn-toolkit2"]


# ---------------------------------------------------------------- the CLI
def test_list_shows_each_declared_toolchain_and_its_state(toolchain_dir: Path,
                                                         declared: None) -> None:
    result = run_cli("toolchains", "list", "--json")
    assert result.status == 0, result.stderr
    listed = {t["name"]: t for t in result.json()["toolchains"]}
    assert {"rknn-toolkit2", "tiny-six"} <= set(listed)
    tiny = listed["tiny-six"]
    assert tiny["built"] and tiny["path"] == str(toolchain_dir / TINY.dirname)
    assert tiny["size_bytes"] > 1_000_000  # pip is in it
    assert tiny["versions"] == TINY.versions() and tiny["installed"]["six"] == "1.17.0"
    assert listed["tiny-absent"]["built"] is False
    text = run_cli("toolchains", "list")
    assert text.status == 0 and "tiny-six" in text.stdout and "not built" in text.stdout


def test_install_dry_run_says_what_it_would_build_and_builds_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_TOOLCHAIN_DIR", str(tmp_path))
    result = run_cli("toolchains", "install", "rknn-toolkit2", "--dry-run", "--json")
    assert result.status == 0, result.stderr
    (state,) = result.json()["toolchains"]
    assert state["action"] == "would build" and state["built"] is False
    assert "rknn-toolkit2==2.5.0" in state["requirements"]
    assert state["path"].startswith(str(tmp_path))
    assert list(tmp_path.iterdir()) == []
    text = run_cli("toolchains", "install", "rknn-toolkit2", "--dry-run")
    assert text.stdout.startswith("would build rknn-toolkit2 in ")
    assert "  torch==1.13.1" in text.stdout.splitlines()


def test_install_of_a_built_toolchain_builds_nothing(toolchain_dir: Path,
                                                     declared: None) -> None:
    before = built(TINY)
    result = run_cli("toolchains", "install", "tiny-six", "--json")
    assert result.status == 0, result.stderr
    assert result.json()["toolchains"][0]["action"] == "already built"
    assert built(TINY) == before


def test_remove_deletes_even_a_half_built_environment(tmp_path: Path, declared: None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_TOOLCHAIN_DIR", str(tmp_path))
    (location(UNCHECKED) / "lib").mkdir(parents=True)
    result = run_cli("toolchains", "remove", "tiny-unchecked", "tiny-absent", "--json")
    assert result.status == 0, result.stderr
    assert [t["action"] for t in result.json()["toolchains"]] == ["removed", "absent"]
    assert not location(UNCHECKED).exists()


# ---------------------------------------------------------------- what edge records
class _ToolchainTarget:
    """A registered target whose converter runs in TINY (for the cache key only)."""

    name: ClassVar[str] = "tiny-target"
    caps: ClassVar[Capabilities] = Capabilities(runtime="onnxruntime", precisions=("fp32",),
                                                suffix=".onnx", toolchain=TINY)


class _OtherPins(_ToolchainTarget):
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="onnxruntime", precisions=("fp32",), suffix=".onnx",
        toolchain=Toolchain(name="tiny-six", requirements=("six==1.16.0",)))


def test_the_toolchain_versions_key_the_conversion_cache(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    assert cache_key("m", recipe=1) == cache_key("m", recipe=1, toolchain={})  # keys kept
    assert cache_key("m", recipe=1) != cache_key("m", recipe=1, toolchain=TINY.versions())
    names, real = [], targets.runtimes()
    for cls in (_ToolchainTarget, _OtherPins):
        tiny = Runtime(name="tiny", targets=(("tiny-target",
                                              f"tests.edge.test_toolchain:{cls.__name__}"),),
                       suffixes=(".tiny",), agent=None, profiler=None, provision=None,
                       label="tiny", colour="#000000")
        monkeypatch.setattr(targets, "runtimes", lambda tiny=tiny: real | {"tiny": tiny})
        names.append(workdir_name("tiny-target", ConvertSettings()))
    assert names[0] != names[1]


def test_an_artifact_records_its_toolchain_and_old_manifests_keep_their_keys() -> None:
    plain = Artifact(candidate=Candidate(target="onnxruntime", precision="fp32"),
                     file="artifacts/a.onnx", sha256="0" * 64, size_bytes=1,
                     runtime="onnxruntime")
    assert "toolchain" not in plain.to_json()
    recorded = replace(plain, toolchain=TINY.versions())
    assert recorded.to_json()["toolchain"]["six"] == "1.17.0"
    assert Artifact.from_json(recorded.to_json()) == recorded


def test_edge_s_python_path_does_not_reach_the_toolchain(toolchain_dir: Path) -> None:
    """run() drops PYTHONPATH (and the like) for the child only."""
    os.environ["PYTHONPATH"] = "/nowhere"
    try:
        out = run(TINY, ["-c", "import os; print(os.environ.get('PYTHONPATH'))"], timeout_s=60)
    finally:
        del os.environ["PYTHONPATH"]
    assert out.strip() == "None"


@pytest.mark.parametrize("profile, candidate, toolchain", [
    ("imx93", "ethos-u-int8", "ethos-u-vela"), ("rock5b", "rknn-int8", "rknn-toolkit2"),
])
def test_a_plan_skips_what_needs_an_unbuilt_toolchain_and_builds_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile: str, candidate: str,
        toolchain: str) -> None:
    """Issue 39: building a toolchain downloads packages, so only `edge toolchains install`
    does it; a plan needing an unbuilt one skips that candidate and says how to build it."""
    monkeypatch.setenv("EDGE_TOOLCHAIN_DIR", str(tmp_path / "toolchains"))
    result = run_cli("optimize", "sample:digits", "--profile", profile, "--dry-run", "--json")
    assert result.status == 0, result.stderr
    rows = {r["candidate"]: r for r in result.json()["plan"]}
    assert rows[candidate]["keep"] is False
    assert f"edge toolchains install {toolchain}" in rows[candidate]["reason"]
    assert not (tmp_path / "toolchains").exists()


def _fake_env(path: Path) -> None:
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").symlink_to(sys.executable)


@pytest.mark.parametrize("record", ["list", "fifo", "huge", "link", "wrong-types", "deep",
                                    "nan-seconds", "a-folder"])
def test_a_record_edge_did_not_write_is_not_built_and_never_hangs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: str, declared: None) -> None:
    """Issue 39: a toolchain record that is a JSON list, a FIFO, 3 GB, a link or of other
    types reads as "not built" at once (it was exit 4, a hang or 3 GB read)."""
    monkeypatch.setenv("EDGE_TOOLCHAIN_DIR", str(tmp_path / "root"))
    path = location(TINY)
    _fake_env(path)
    good = {"key": TINY.key, "python": "3.11.7", "installed": {}, "seconds": 1.0,
            "built_at": "2026-11-29T00:00:00Z"}
    target = path / RECORD
    if record == "list":
        target.write_text(json.dumps([good]))
    elif record == "fifo":
        os.mkfifo(target)
    elif record == "huge":
        with target.open("wb") as handle:
            handle.truncate(3 << 30)  # sparse: 3 GB that take no disk
    elif record == "link":
        (tmp_path / "elsewhere.json").write_text(json.dumps(good))
        target.symlink_to(tmp_path / "elsewhere.json")
    elif record == "wrong-types":
        target.write_text(json.dumps(good | {"installed": ["six"], "seconds": "1"}))
    elif record == "nan-seconds":
        target.write_text(json.dumps(good | {"seconds": float("nan")}))
    elif record == "a-folder":
        target.mkdir()
    else:
        target.write_text("[" * 100_000 + "]" * 100_000)
    assert built(TINY) is None
    result = run_cli("toolchains", "list", "--json")
    assert result.status == 0, result.stderr
    assert {t["name"]: t["built"] for t in result.json()["toolchains"]}["tiny-six"] is False


def test_a_linked_environment_is_not_used_and_remove_leaves_its_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, declared: None) -> None:
    monkeypatch.setenv("EDGE_TOOLCHAIN_DIR", str(tmp_path / "root"))
    outside = tmp_path / "outside"
    _fake_env(outside)
    (outside / RECORD).write_text(json.dumps({
        "key": TINY.key, "python": "3.11.7", "installed": {}, "seconds": 1.0,
        "built_at": "2026-11-29T00:00:00Z"}))
    location(TINY).parent.mkdir(parents=True)
    location(TINY).symlink_to(outside, target_is_directory=True)
    assert built(TINY) is None  # never followed out of the cache
    result = run_cli("toolchains", "remove", "tiny-six", "--json")
    assert result.status == 0, result.stderr
    assert not location(TINY).is_symlink()
    assert (outside / RECORD).is_file() and (outside / "bin" / "python").is_symlink()



def test_a_lock_that_is_a_fifo_is_one_line_not_a_hang(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, declared: None) -> None:
    """Review of issue 39: opening a FIFO lock waited for a writer for ever."""
    monkeypatch.setenv("EDGE_TOOLCHAIN_DIR", str(tmp_path / "root"))
    location(TINY).parent.mkdir(parents=True)
    os.mkfifo(location(TINY).with_name(f"{location(TINY).name}.lock"))
    _fake_env(location(TINY))
    result = run_cli("toolchains", "remove", "tiny-six")
    assert result.status == 2 and "not a regular file" in result.stderr, result.stderr
