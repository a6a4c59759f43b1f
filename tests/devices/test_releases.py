"""The agent's release commands: verify, health, activate + history, rollback, releases, prune.

Run as the standalone script it is on a device (this python plays the device's)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devices.agent import cli
from devices.agentfile import agent_file

DIGITS = Path(__file__).parents[2] / "edge" / "samples" / "digits.onnx"
A, B, C, D = "a" * 16, "b" * 16, "c" * 16, "d" * 16


def _agent(*args: str) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, str(agent_file()), *args], capture_output=True,
                          text=True, check=False)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def _release(work: Path, release: str, content: bytes = b"model", name: str = "model.onnx"
             ) -> Path:
    folder = work / "releases" / release
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(content)
    return folder


def _current(work: Path) -> str:
    return os.readlink(work / "current")


def _history(work: Path) -> list[dict]:
    return json.loads((work / "history.json").read_text())["activations"]


def test_health_loads_and_runs_the_model_once() -> None:
    status, reply = _agent("health", "--model", str(DIGITS), "--threads", "1")
    assert status == 0, reply
    assert reply["healthy"] is True and reply["runtime"] == "onnxruntime"
    assert reply["load_ms"] > 0 and reply["run_ms"] > 0 and reply["runtime_version"]


def test_health_fails_clearly_on_a_broken_or_missing_model(tmp_path: Path) -> None:
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"\x08\x07not an onnx model at all")
    status, reply = _agent("health", "--model", str(broken))
    assert status == 3
    assert reply["error"].startswith("health check failed: onnxruntime cannot load")
    assert "\n" not in reply["error"]
    status, reply = _agent("health", "--model", str(tmp_path / "none.onnx"))
    assert status == 2 and "not found" in reply["error"]
    (tmp_path / "model.bin").write_bytes(b"x")
    status, reply = _agent("health", "--model", str(tmp_path / "model.bin"))
    assert status == 2 and "no runtime" in reply["error"]


def test_verify_names_the_files_to_send(tmp_path: Path) -> None:
    _release(tmp_path, A, b"main")
    (tmp_path / "releases" / A / "model.bin").write_bytes(b"stale weights")
    sha = {k: hashlib.sha256(v).hexdigest() for k, v in
           {"main": b"main", "bin": b"new weights", "xml": b"<xml/>"}.items()}
    status, reply = _agent("verify", str(tmp_path), A, "--file", f"model.onnx={sha['main']}",
                           "--file", f"model.bin={sha['bin']}",
                           "--file", f"model.xml={sha['xml']}")
    assert status == 0, reply
    assert reply["present"] == ["model.onnx"]
    assert reply["missing"] == ["model.bin", "model.xml"]  # wrong content counts as missing
    status, reply = _agent("verify", str(tmp_path), B, "--file", f"model.onnx={sha['main']}")
    assert status == 0 and reply["missing"] == ["model.onnx"]


@pytest.mark.parametrize("args", [
    ("verify", "W", "../" + A, "--file", "model.onnx=" + "0" * 64),
    ("verify", "W", A, "--file", "../model.onnx=" + "0" * 64),
    ("verify", "W", A, "--file", ".hidden=" + "0" * 64),
    ("verify", "W", A, "--file", "a/b=" + "0" * 64),
    ("verify", "W", A, "--file", "model.onnx=xyz"),
    ("verify", "W", A),
    ("activate", "W", A.upper()),
    ("activate", "W", "a;touch x"),
    ("activate", "W", A, "--artifact", "x y"),
    ("rollback", "W", "--to", "../../etc"),
    ("rollback", "W", "--to", ""),
    ("prune", "W", "--keep", "0"),
    ("install", "SRC", "DEST", "--sha256", "nothex"),
])
def test_malformed_requests_are_refused(tmp_path: Path, args: tuple[str, ...]) -> None:
    args = tuple(str(tmp_path) if a == "W" else a for a in args)
    status, reply = _agent(*args)
    assert status == 2 and "error" in reply and "\n" not in reply["error"]
    assert not (tmp_path / "current").exists() and not (tmp_path / "history.json").exists()


def test_activate_records_history_and_rollback_toggles(tmp_path: Path) -> None:
    for release in (A, B):
        _release(tmp_path, release)
    status, reply = _agent("activate", str(tmp_path), A, "--artifact", "tflite-int8")
    assert status == 0 and reply == {"active": A, "previous": None, "changed": True,
                                     "slot": "default", "others": [], "adopted": False}
    status, reply = _agent("activate", str(tmp_path), B, "--artifact", "onnxruntime-fp32")
    assert reply == {"active": B, "previous": A, "changed": True, "slot": "default",
                     "others": [], "adopted": False}
    status, reply = _agent("activate", str(tmp_path), B)  # again: no new history entry
    assert status == 0 and reply["changed"] is False
    history = _history(tmp_path)
    assert [(h["release"], h["artifact"], h["action"], h["previous"]) for h in history] == [
        (A, "tflite-int8", "deploy", None), (B, "onnxruntime-fp32", "deploy", A)]
    assert all(h["time"].endswith("Z") for h in history)

    status, reply = _agent("rollback", str(tmp_path))
    assert status == 0 and reply["active"] == A and reply["previous"] == B
    assert reply["artifact"] == "tflite-int8"
    assert _current(tmp_path) == f"releases/{A}"
    status, reply = _agent("rollback", str(tmp_path))  # previous is B again: a toggle
    assert status == 0 and _current(tmp_path) == f"releases/{B}"
    status, reply = _agent("rollback", str(tmp_path), "--to", A)
    assert status == 0 and _current(tmp_path) == f"releases/{A}"
    assert [h["action"] for h in _history(tmp_path)] == ["deploy", "deploy", "rollback",
                                                        "rollback", "rollback"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith((".current-", "history.json."))]


def test_rollback_refuses_unknown_incomplete_or_missing_previous(tmp_path: Path) -> None:
    _release(tmp_path, A)
    (tmp_path / "releases" / C).mkdir()  # incomplete: no model file
    assert _agent("activate", str(tmp_path), A)[0] == 0
    before = (tmp_path / "history.json").read_bytes()
    status, reply = _agent("rollback", str(tmp_path))
    assert status == 2 and "no previous release" in reply["error"]
    for target in (B, C):
        status, reply = _agent("rollback", str(tmp_path), "--to", target)
        assert status == 2 and "not installed" in reply["error"]
    assert _current(tmp_path) == f"releases/{A}"
    assert (tmp_path / "history.json").read_bytes() == before


def test_previous_skips_releases_no_longer_installed(tmp_path: Path) -> None:
    for release in (A, B, C):
        _release(tmp_path, release)
        assert _agent("activate", str(tmp_path), release)[0] == 0
    import shutil

    shutil.rmtree(tmp_path / "releases" / B)
    status, reply = _agent("releases", str(tmp_path))
    assert status == 0 and reply["active"] == C and reply["previous"] == A


def test_releases_lists_state_and_history(tmp_path: Path) -> None:
    _release(tmp_path, A, b"12345")
    _release(tmp_path, B, b"123")
    (tmp_path / "releases" / C).mkdir()
    (tmp_path / "releases" / "not-ours").mkdir()
    _agent("activate", str(tmp_path), A, "--artifact", "tflite-int8")
    _agent("activate", str(tmp_path), B, "--artifact", "tflite-fp32")
    status, reply = _agent("releases", str(tmp_path))
    assert status == 0
    assert reply["active"] == B and reply["previous"] == A
    by_id = {r["release"]: r for r in reply["releases"]}
    assert set(by_id) == {A, B, C}  # a directory that is not a release id is not ours
    assert reply["releases"][0]["release"] == B  # the active one first
    assert by_id[A]["previous"] and by_id[A]["artifact"] == "tflite-int8"
    assert by_id[A]["files"] == {"model.onnx": 5} and by_id[A]["size_bytes"] == 5
    assert by_id[A]["model"] == str(tmp_path / "releases" / A / "model.onnx")
    assert by_id[C]["complete"] is False and by_id[C]["model"] is None
    assert [h["release"] for h in reply["history"]] == [A, B]


def test_prune_keeps_n_and_always_active_and_previous(tmp_path: Path) -> None:
    now = time.time()
    for age, release in enumerate((D, C, B, A)):  # D newest on disk, A oldest
        folder = _release(tmp_path, release)
        os.utime(folder, (now - 1000 * (age + 1), now - 1000 * (age + 1)))
    _agent("activate", str(tmp_path), A)  # oldest on disk, but the previous one
    _agent("activate", str(tmp_path), B)  # active
    (tmp_path / "releases" / "keep-me").mkdir()
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    old, fresh = incoming / "x.partial", incoming / "y.partial"
    old.write_bytes(b"half")
    fresh.write_bytes(b"half")
    os.utime(old, (now - 7200, now - 7200))
    (tmp_path / ".current-999-dead").symlink_to(f"releases/{D}")
    status, reply = _agent("prune", str(tmp_path), "--keep", "1")
    assert status == 0, reply
    assert set(reply["kept"]) == {A, B} and set(reply["removed"]) == {C, D}
    assert reply["stale_removed"] == ["x.partial"]
    assert sorted(p.name for p in (tmp_path / "releases").iterdir()) == sorted([A, B, "keep-me"])
    assert fresh.exists() and not old.exists()
    assert not (tmp_path / ".current-999-dead").is_symlink()
    assert _current(tmp_path) == f"releases/{B}"
    status, reply = _agent("prune", str(tmp_path), "--keep", "3")
    assert status == 0 and reply["removed"] == []


def test_a_switch_that_dies_before_its_rename_changes_nothing(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys) -> None:
    for release in (A, B):
        _release(tmp_path, release)
    assert cli.main(["activate", str(tmp_path), A]) == 0
    history = (tmp_path / "history.json").read_bytes()
    real_replace = os.replace

    def crash(src, dst):
        if str(dst).endswith("current"):
            raise KeyboardInterrupt  # the process dies between symlink and rename
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["activate", str(tmp_path), B])
    monkeypatch.undo()
    assert _current(tmp_path) == f"releases/{A}"
    assert (tmp_path / "history.json").read_bytes() == history
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".current-")]
    assert cli.main(["activate", str(tmp_path), B]) == 0
    assert _current(tmp_path) == f"releases/{B}"


def test_a_corrupt_history_is_a_clear_error(tmp_path: Path) -> None:
    _release(tmp_path, A)
    (tmp_path / "history.json").write_text("{not json")
    status, reply = _agent("releases", str(tmp_path))
    assert status == 3 and "history.json" in reply["error"]
    status, reply = _agent("activate", str(tmp_path), A)
    assert status == 3 and not (tmp_path / "current").exists()


def _slot_current(work: Path, slot: str) -> str:
    return (work / "slots" / slot / "current").resolve().name


def test_three_slots_switch_and_roll_back_apart(tmp_path: Path) -> None:
    """Each model's slot has its own current release and history (the first model's: the work
    dir's own, as before slots); a rollback or a deploy in one leaves the others as they were;
    releases are shared by content."""
    for release in (A, B, C, D):
        _release(tmp_path, release)
    assert _agent("activate", str(tmp_path), A, "--slot", "digits")[0] == 0  # the first
    assert _agent("activate", str(tmp_path), B, "--slot", "face", "--artifact", "x")[0] == 0
    status, reply = _agent("activate", str(tmp_path), C, "--slot", "face")
    assert status == 0 and reply["previous"] == B and reply["others"] == ["digits"]
    status, reply = _agent("activate", str(tmp_path), A, "--slot", "kws")  # shared release
    assert status == 0 and sorted(reply["others"]) == ["digits", "face"]
    assert os.readlink(tmp_path / "slots" / "face" / "current") == f"../../releases/{C}"
    status, reply = _agent("rollback", str(tmp_path), "--slot", "face")
    assert status == 0 and reply["active"] == B and reply["slot"] == "face"
    assert (_current(tmp_path), _slot_current(tmp_path, "face"),
            _slot_current(tmp_path, "kws")) == (f"releases/{A}", B, A)
    status, reply = _agent("rollback", str(tmp_path), "--slot", "kws")
    assert status == 2 and "no previous release" in reply["error"]
    status, reply = _agent("releases", str(tmp_path), "--slot", "face")
    assert status == 0 and reply["active"] == B and reply["previous"] == C
    assert {s["slot"]: (s["active"], s["previous"]) for s in reply["slots"]} == {
        "digits": (A, None), "face": (B, C), "kws": (A, None)}
    by_id = {r["release"]: r for r in reply["releases"]}
    assert by_id[A]["current_in"] == ["digits", "kws"] and by_id[D]["current_in"] == []
    assert [h["release"] for h in reply["history"]] == [B, C, B]
    assert [h["release"] for h in _history(tmp_path)] == [A]  # the work dir's own
    status, reply = _agent("releases", str(tmp_path), "--slot", "default")  # its alias
    assert status == 0 and reply["active"] == A


def test_a_release_from_before_slots_becomes_the_first_slots_previous(tmp_path: Path) -> None:
    for release in (A, B, C):
        _release(tmp_path, release)
    (tmp_path / "current").symlink_to(f"releases/{A}")  # as edge left it before slots
    (tmp_path / "history.json").write_text(json.dumps({"version": 1, "activations": [
        {"release": A, "artifact": "x", "action": "deploy", "previous": None,
         "time": "2026-11-23T22:50:51Z"}]}))
    status, reply = _agent("releases", str(tmp_path))
    assert [s["slot"] for s in reply["slots"]] == ["default"]
    status, reply = _agent("activate", str(tmp_path), B, "--slot", "digits")
    assert status == 0 and reply["adopted"] is True and reply["previous"] == A
    assert _current(tmp_path) == f"releases/{B}"
    status, reply = _agent("activate", str(tmp_path), C, "--slot", "face")
    assert status == 0 and reply["adopted"] is False and reply["previous"] is None
    assert _slot_current(tmp_path, "face") == C and _current(tmp_path) == f"releases/{B}"
    status, reply = _agent("rollback", str(tmp_path), "--slot", "digits")
    assert status == 0 and reply["active"] == A and _slot_current(tmp_path, "face") == C


def test_prune_keeps_every_slots_current_and_previous(tmp_path: Path) -> None:
    now = time.time()
    for age, release in enumerate((A, B, C, D)):
        os.utime(_release(tmp_path, release), (now - 1000 * (age + 1),) * 2)
    _agent("activate", str(tmp_path), C, "--slot", "face")
    _agent("activate", str(tmp_path), D, "--slot", "face")  # C: face's previous
    _agent("activate", str(tmp_path), B, "--slot", "kws")
    (tmp_path / "slots" / "kws" / ".current-999-dead").symlink_to(f"../../releases/{A}")
    status, reply = _agent("prune", str(tmp_path), "--keep", "1")
    assert status == 0, reply
    assert set(reply["removed"]) == {A} and set(reply["kept"]) == {B, C, D}
    assert not (tmp_path / "slots" / "kws" / ".current-999-dead").is_symlink()


@pytest.mark.parametrize("slot", ["../x", ".hidden", "-x", "a/b", "x" * 65, ""])
def test_a_bad_slot_name_is_refused_and_changes_nothing(tmp_path: Path, slot: str) -> None:
    _release(tmp_path, A)
    status, reply = _agent("activate", str(tmp_path), A, f"--slot={slot}")
    assert status == 2 and "bad slot name" in reply["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["releases"]


def test_a_slot_that_is_a_link_is_never_written_through(tmp_path: Path) -> None:
    _release(tmp_path, A)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "slots").mkdir()
    (tmp_path / "slots" / "face").symlink_to(elsewhere)
    status, reply = _agent("activate", str(tmp_path), A, "--slot", "face")
    assert status == 3 and "is not a directory" in reply["error"]
    assert list(elsewhere.iterdir()) == []


def test_the_default_slot_named_or_not_is_never_taken_over(tmp_path: Path) -> None:
    """Once a slot was switched by a slot-aware edge (even as ``default``), a new model gets
    its own slot; a release already current there is claimed by the first name given."""
    for release in (A, B, C):
        _release(tmp_path, release)
    assert _agent("activate", str(tmp_path), A, "--slot", "default")[0] == 0
    status, reply = _agent("activate", str(tmp_path), B, "--slot", "face")
    assert status == 0 and reply["adopted"] is False and reply["others"] == ["default"]
    assert _current(tmp_path) == f"releases/{A}" and _slot_current(tmp_path, "face") == B
    fresh = tmp_path / "fresh"
    for release in (A, B):
        _release(fresh, release)
    (fresh / "current").symlink_to(f"releases/{A}")  # before slots, no history
    assert _agent("activate", str(fresh), A, "--slot", "digits")[1]["changed"] is False
    status, reply = _agent("activate", str(fresh), B, "--slot", "face")  # digits holds it
    assert status == 0 and reply["others"] == ["digits"] and _current(fresh) == f"releases/{A}"


def test_a_rollback_never_makes_or_takes_over_a_slot(tmp_path: Path) -> None:
    for release in (A, B):
        _release(tmp_path, release)
    (tmp_path / "current").symlink_to(f"releases/{A}")  # before slots
    before = sorted([p.name for p in tmp_path.iterdir()] + [".lock"])
    for slot in ("typo", "face"):
        status, reply = _agent("rollback", str(tmp_path), "--slot", slot, "--to", B)
        assert status == 2 and f"no model {slot} on this device (models: default)" in (
            reply["error"])
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    status, reply = _agent("activate", str(tmp_path), A, "--slot", "Face")
    assert status == 2 and "bad slot name" in reply["error"]


def _ansible_module():
    """edge.fleet.release's device half (it resolves a slot before the agent is there).

    Importing ansible.module_utils replaces ``sys.intern`` for the whole process (ansible-core's
    _patches), and torch.export in a later test of the same pytest worker then fails in
    dynamo's polyfills ("substitute_in_graph expects a function"): the original is put back."""
    import importlib.util

    path = Path(__file__).parents[2] / "devices" / "ansible" / "plugins" / "modules" / "release.py"
    spec = importlib.util.spec_from_file_location("edge_fleet_release_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    intern = sys.intern
    try:
        spec.loader.exec_module(module)
    finally:
        sys.intern = intern
    return module


def test_the_ansible_module_resolves_every_slot_as_the_agent_does(tmp_path: Path) -> None:
    """The module mirrors the agent's slot resolution (devices/agent/slots.py): on an empty
    work dir, one from before slots, one whose own slot is named or claimed by ``default``,
    with other slots beside, and with an unreadable history entry, both name the same
    directory and the same current release for every name."""
    from devices.agent import slots

    module = _ansible_module()
    layouts = {
        "empty": [],
        "before-slots": [("", A)],
        "named": [("digits", A), ("face", B)],
        "default-first": [("default", A), ("kws", C)],
    }
    for layout, switches in layouts.items():
        work = tmp_path / layout
        for release in (A, B, C):
            _release(work, release)
        for slot, release in switches:
            if slot:
                assert _agent("activate", str(work), release, "--slot", slot)[0] == 0
            else:
                (work / "current").symlink_to(f"releases/{release}")
        if layout == "named":  # an entry that names no release: neither reads its slot
            doc = json.loads((work / "history.json").read_text())
            doc["activations"].append({"release": "../x", "slot": "kws"})
            (work / "history.json").write_text(json.dumps(doc))
        for name in ("default", "digits", "face", "kws", "new"):
            agent_dir = slots.slot_dir(str(work), name)
            assert module.slot_dir(str(work), name) == agent_dir, (layout, name)
            assert module.active(str(work), name) == slots.active(agent_dir), (layout, name)


def test_a_timed_release_keeps_what_ran_it_and_lists_it(tmp_path: Path) -> None:
    """Issue 43: the agent's bench of a release's model writes what its runtime said ran it
    (and the versions) into the release's folder; ``releases`` lists it beside the files (not
    as one of them), and edge reads it back validated. A model outside a release keeps
    nothing."""
    from devices.release import _releases_report
    from devices.transport import LocalTransport
    from edge.cli.render import render_releases

    for sub in ("agent", "incoming"):  # a work dir as the agent prepares one
        (tmp_path / sub).mkdir()
    folder = _release(tmp_path, A, DIGITS.read_bytes())
    installed = (folder.stat().st_atime_ns, 1_600_000_000_000_000_000)
    os.utime(folder, ns=installed)
    status, reply = _agent("bench", str(folder / "model.onnx"), "--runs", "2", "--warmup", "0",
                           "--rounds", "1", "--threads", "1")
    assert status == 0, reply
    kept = json.loads((folder / "observed.json").read_text())
    assert kept["observed"] == reply["results"][0]["observed"]
    assert folder.stat().st_mtime_ns == installed[1]  # a bench is not an install
    assert kept["observed"]["versions"]["onnxruntime"] == kept["runtime_version"]
    loose = tmp_path / "loose.onnx"
    loose.write_bytes(DIGITS.read_bytes())
    assert _agent("bench", str(loose), "--runs", "1", "--warmup", "0", "--rounds", "1")[0] == 0
    assert not (tmp_path / "observed.json").exists()
    elsewhere = tmp_path / "user" / "releases" / B  # a release-like folder not in a work dir
    elsewhere.mkdir(parents=True)
    (elsewhere / "model.onnx").write_bytes(DIGITS.read_bytes())
    assert _agent("bench", str(elsewhere / "model.onnx"), "--runs", "1", "--warmup", "0",
                  "--rounds", "1")[0] == 0
    assert not (elsewhere / "observed.json").exists()

    _agent("activate", str(tmp_path), A, "--artifact", "onnxruntime-fp32")
    status, state = _agent("releases", str(tmp_path))
    listed = state["releases"][0]
    assert listed["files"] == {"model.onnx": DIGITS.stat().st_size}
    assert listed["observed"] == kept["observed"] and listed["observed_at"] == kept["time"]
    device = type("D", (), {"label": "local", "work": str(tmp_path),
                            "transport": LocalTransport()})()
    report = _releases_report(device, state, "default", ())  # type: ignore[arg-type]
    seen = report.releases[0].observed
    assert seen is not None and seen.observable and seen.share_of(unit="CPU") == 1.0
    assert "ran (last timed)" in render_releases(report)
    assert "CPU f32 100% of MACs" in render_releases(report)

    (folder / "observed.json").write_text(json.dumps({"observed": {"layers": [
        {"name": "x", "op": "Conv", "unit": "CPU", "precision": "f32", "macs": -1}]}}))
    state = _agent("releases", str(tmp_path))[1]
    lied = _releases_report(device, state, "default", ()).releases[0].observed  # type: ignore[arg-type]
    assert lied is not None and lied.why_not.startswith("the agent's reply was malformed")
    (folder / "observed.json").unlink()
    os.mkfifo(folder / "observed.json")  # never blocks the listing
    status, state = _agent("releases", str(tmp_path))
    assert status == 0 and state["releases"][0]["observed"] is None
