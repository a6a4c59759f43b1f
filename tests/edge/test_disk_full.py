"""A full disk is the user's to free, never a bug (issue 27): every output is staged beside its
destination and renamed in whole; ENOSPC or EDQUOT is one line naming the file system, the path,
the space needed and free (exit 2), and nothing is left half-written. On a real tmpfs."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

from edge.core import files
from edge.core.bundle import write_bundle
from edge.core.files import NoSpace, staged_dir, write_atomic
from edge.core.intake.common import cached_path, usable_entry
from tests.support.cli import run_cli
from tests.support.hostile import OLD_BUNDLE, tiny_model
from tests.support.hostile_disk import FILLER, ORT_ONLY, fill, full_disk

LINE = re.compile(r"error: no space left on (?P<mount>\S+) writing (?P<path>\S+): needs about "
                  r"(?P<need>[\d.]+) MB, (?P<free>[\d.]+) MB free")


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    tiny_model(tmp_path / "m.onnx")
    (tmp_path / "ort.yaml").write_text(ORT_ONLY)
    return tmp_path


def _argv(command: str, inputs: Path, out: Path) -> list[str]:
    model, profile = str(inputs / "m.onnx"), str(inputs / "ort.yaml")
    return {
        "optimize": ["optimize", model, "--profile", profile, "-o", str(out)],
        "deploy": ["deploy", model, "--profile", profile, "-o", str(out)],
        "report": ["report", str(OLD_BUNDLE), "-o", str(out)],
        "partition": ["partition", model, "--profile", "rpi4", "--cloud", "cloud-c7i", "-o",
                      str(out)],
        "serve-cloud": ["serve-cloud", model, "--export-repository", str(out)],
    }[command]


@pytest.mark.parametrize("command", ["optimize", "deploy", "report", "partition", "serve-cloud"])
@pytest.mark.parametrize("leave", [0, 8192])
def test_a_full_disk_is_one_line_naming_path_and_space(inputs: Path, command: str,
                                                       leave: int) -> None:
    with full_disk(leave) as mount:  # on leaving: the filler alone, no staging, no output
        out = mount / "deep" / "out"
        done = run_cli(*_argv(command, inputs, out))
        assert done.status == 2, done.stderr
        assert len(done.error_lines) == 1 and "internal error" not in done.stderr
        found = LINE.match(done.error_lines[0])
        assert found, done.error_lines[0]
        assert found["mount"] == str(mount) and found["path"] == str(out)
        assert float(found["need"]) > 0 and float(found["free"]) < 0.02


def test_an_earlier_output_survives_a_rewrite_on_a_full_disk(inputs: Path) -> None:
    with full_disk(100_000) as mount:
        report = mount / "r.html"
        report.write_text("the earlier report")
        fill(mount / "more", 0)  # the disk fills meanwhile
        done = run_cli(*_argv("report", inputs, report))
        assert done.status == 2 and report.read_text() == "the earlier report"
        report.unlink()
        (mount / "more").unlink()


def test_a_bundle_bigger_than_the_free_space_is_refused_before_a_byte(tmp_path: Path) -> None:
    big = tmp_path / "big.onnx"
    big.write_bytes(b"\0" * 300_000)
    with full_disk(100_000) as mount:
        with pytest.raises(NoSpace, match=r"needs about 0\.36\d MB, 0\.09\d MB free"):
            write_bundle(mount / "b", None, {"artifacts/big.onnx": big})  # type: ignore[arg-type]
        assert sorted(p.name for p in mount.iterdir()) == [FILLER]


def test_a_write_that_fills_the_disk_midway_removes_its_staging() -> None:
    with full_disk(8192) as mount:
        with pytest.raises(NoSpace, match=r"writing .*/out: needs about 0\.0[1-9]\d MB"):
            with staged_dir(mount / "out") as staging:
                (staging / "a.bin").write_bytes(b"\0" * 8192)
                (staging / "b.bin").write_bytes(b"\0" * 8192)
        with pytest.raises(NoSpace, match=r"needs about 0\.020 MB"):
            write_atomic(mount / "f.txt", "x" * 20_000)  # checked before a byte is written


def test_a_used_up_quota_is_the_same_line(tmp_path: Path) -> None:
    def over_quota(tmp: Path) -> None:
        raise OSError(errno.EDQUOT, "Disk quota exceeded", str(tmp))

    with pytest.raises(NoSpace, match="no space left on .* writing .*out.onnx"):
        write_atomic(tmp_path / "out.onnx", over_quota)
    assert list(tmp_path.iterdir()) == []


def test_a_stray_full_disk_is_one_line_not_an_internal_error(
        inputs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write no staged writer guards (a library's, the cache's) still names the file."""
    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "/somewhere/model.onnx")

    monkeypatch.setattr("edge.flows.partition.partition", full)  # outside any staged writer
    done = run_cli(*_argv("partition", inputs, inputs / "split"))
    assert done.status == 2, done.stderr
    assert done.error_lines[0].startswith("error: no space left on / writing "
                                          "/somewhere/model.onnx: needs about")


def test_a_full_cache_is_one_line_naming_it(inputs: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with full_disk(0) as mount:
        monkeypatch.setenv("EDGE_CACHE_DIR", str(mount / "cache"))
        done = run_cli(*_argv("optimize", inputs, inputs / "out"))
        assert done.status == 2, done.stderr
        assert len(done.error_lines) == 1 and str(mount) in done.error_lines[0]
        assert not (inputs / "out").exists()
        files.shutil.rmtree(mount / "cache", ignore_errors=True)


# ---------------------------------------------------------------- the cache (review of issue 27)


def _entries(cache: Path) -> list[Path]:
    """The files under ``cache`` but its (empty) lock files."""
    return [p for p in cache.rglob("*") if p.is_file() and p.name != ".lock"] \
        if cache.is_dir() else []


def _make_room(mount: Path) -> None:
    """Free the tmpfs (the filler shrinks to nothing: full_disk still finds it alone)."""
    (mount / FILLER).write_bytes(b"")


def test_a_full_cache_during_a_pytorch_intake_is_one_line_then_heals(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a 0-byte reference under its final name, then 'not a valid ONNX model' on every
    later run. Now: one line naming the entry, nothing in the cache, the next run works."""
    torch = pytest.importorskip("torch")
    torch.jit.save(torch.jit.script(torch.nn.Linear(64, 64)), str(tmp_path / "m.pt"))
    argv = ["inspect", str(tmp_path / "m.pt"), "--shape", "input=1,64"]
    with full_disk(8192) as mount:
        cache = mount / "cache"
        monkeypatch.setenv("EDGE_CACHE_DIR", str(cache))
        done = run_cli(*argv)
        assert done.status == 2 and len(done.error_lines) == 1, done.stderr
        found = LINE.match(done.error_lines[0])
        assert found and found["mount"] == str(mount), done.error_lines[0]
        assert found["path"].startswith(str(cache / "reference" / "m.torch-"))
        assert _entries(cache) == []  # no empty, torn or scratch file
        _make_room(mount)
        again = run_cli(*argv)
        assert again.status == 0, again.stderr
        (entry,) = _entries(cache)
        assert entry.stat().st_size > 64 * 64 * 4
        files.shutil.rmtree(cache)


def test_a_broken_cached_reference_is_made_again(tmp_path: Path) -> None:
    """An entry an older edge left empty or torn is absent to this one: removed, made again
    (the corpus' ``disk cache-`` cases run the CLI on such entries)."""
    model = tiny_model(tmp_path / "m.onnx")
    entry = cached_path(model, tmp_path / "reference", "onnx", {"x": (1, 4)}, {})
    entry.parent.mkdir()
    for broken in (b"", model.read_bytes()[:30], b"\x00" * 100):
        entry.write_bytes(broken)
        assert not usable_entry(entry) and not entry.exists()
    entry.write_bytes(model.read_bytes())
    assert usable_entry(entry)


@pytest.mark.parametrize(("runtime", "precision"), [("onnxruntime", "fp16"),
                                                    ("onnxruntime", "fp32"),
                                                    ("openvino", "fp32")])
def test_a_full_cache_during_a_conversion_is_one_line_then_heals(
        tmp_path: Path, runtime: str, precision: str) -> None:
    """A conversion's output under cache/convert on a full disk: NoSpace naming the artifact
    (exit 2 through the CLI), nothing left there; with room again the same call converts."""
    from edge.core.data import synthetic_dataset
    from edge.core.model import inspect_model
    from targets import get_target

    target = get_target(runtime)
    if target.missing():
        pytest.skip(target.missing() or "")
    model = inspect_model(tiny_model(tmp_path / "m.onnx"))
    calib = synthetic_dataset(model, count=4)
    with full_disk(0) as mount:
        workdir = mount / "cache" / "convert" / "key" / runtime
        with pytest.raises(NoSpace) as caught:
            target.convert(model, precision, calib=calib, workdir=workdir)
        line = str(caught.value)
        assert line.startswith(f"no space left on {mount} writing {workdir}/"), line
        assert _entries(mount / "cache") == [] and "\n" not in line
        _make_room(mount)
        out, _ = target.convert(model, precision, calib=calib, workdir=workdir)
        assert out.is_file() and out.stat().st_size > 0
        files.shutil.rmtree(mount / "cache")


def test_a_broken_pruning_cache_entry_is_made_again(tmp_path: Path) -> None:
    """A pruned model or record an older run left torn is not trusted: None, made again."""
    from edge.flows.prune import _cached

    model, record = tmp_path / "pruned.onnx", tmp_path / "pruning.json"
    model.write_bytes(b"")
    record.write_text('{"ratio": 0.')
    assert _cached(model, record) is None
    tiny_model(model)
    assert _cached(model, record) is None  # the record is still torn


def test_an_optimize_whose_conversion_meets_a_full_cache_names_the_entry_then_heals(
        inputs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the CLI: exit 2, the line names the ORT artifact under cache/convert; the same
    command succeeds once there is room, with no human step in between."""
    with full_disk(0) as mount:
        monkeypatch.setenv("EDGE_CACHE_DIR", str(mount / "cache"))
        argv = _argv("optimize", inputs, inputs / "out")
        done = run_cli(*argv)
        assert done.status == 2 and len(done.error_lines) == 1, done.stderr
        found = LINE.match(done.error_lines[0])
        assert found and found["mount"] == str(mount), done.error_lines[0]
        assert found["path"].startswith(str(mount / "cache" / "convert")), found["path"]
        assert _entries(mount / "cache") == [] and not (inputs / "out").exists()
        _make_room(mount)
        assert run_cli(*argv).status == 0
        files.shutil.rmtree(mount / "cache")


def test_a_kept_result_is_one_whole_line_or_none() -> None:
    """results/*.jsonl: a line after a torn one starts a line of its own; an append the disk
    cannot take is cut back (the file as it was) and is one NoSpace line."""
    from edge.core.results import _append

    with full_disk(4096) as mount:
        kept = mount / "r.jsonl"
        kept.write_text('{"a": 1}\n{"torn')
        _append(kept, '{"b": 2}\n')
        assert kept.read_text().splitlines() == ['{"a": 1}', '{"torn', '{"b": 2}']
        before = kept.read_bytes()
        fill(mount / "more", 0)
        with pytest.raises(NoSpace, match=f"writing {kept}: needs about"):
            _append(kept, "x" * 20000 + "\n")
        assert kept.read_bytes() == before
        kept.unlink()
        (mount / "more").unlink()
