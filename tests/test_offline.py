"""edge works offline and writes nothing outside its own folders (issue 27): with an empty
``$HOME`` and a fresh cache, a full ``edge optimize`` (ONNX Runtime, OpenVINO with NNCF, LiteRT
through onnx2tf) runs in a network namespace without a network, makes no network look-up
(``strace`` sees no connection and no name-service query) and leaves ``$HOME``, the working
directory and ``$TMPDIR`` as they were. Third-party telemetry is off (edge/core/offline.py).

Issue 39: the same for every catalog profile's ``edge optimize`` (one fresh cache for all: each
runtime converts once; the accelerators' converters in their toolchain environments, built
before, as ``edge toolchains install`` builds them), a profile whose toolchain is not built
refused with how to build it (building one is the only step that reaches the network), and
``edge deploy --inventory --engine ansible``: ansible-playbook over ssh to a real sshd started
inside the namespace, the only connections those to the device.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from edge.cli import Terminated, cli
from edge.core import offline
from edge.core.profile import catalog_ids
from edge.core.toolchain import build
from targets import declared_toolchains
from tests.support.cli import STEP, as_in_a_terminal, run_cli
from tests.support.hostile import OLD_BUNDLE, _bad_models
from tests.support.hostile_home import CLEARED
from tests.support.mediapipe import cache_dir

ROOT = Path(__file__).resolve().parents[1]
#: A connection or datagram to an internet address: a DNS query (glibc's resolver sends to the
#: name server of /etc/resolv.conf) or anything else. (Local sockets, such as nscd's for a
#: user name, are no network.)
NETWORK = re.compile(r"(connect|sendto|sendmsg)\(\d+, .*AF_INET6?\b")
#: A bundle of edge 0.1 (deploy and report read it as they read today's).
BUNDLE = OLD_BUNDLE


def _folders(tmp_path: Path) -> dict[str, Path]:
    names = ("home", "cache", "out", "cwd", "tmp")
    folders = {name: tmp_path / name for name in names}
    for path in folders.values():
        path.mkdir()
    return folders


def _env(folders: dict[str, Path]) -> dict[str, str]:
    """This environment without anything that points a framework away from ``$HOME``."""
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    return env | {"HOME": str(folders["home"]), "EDGE_CACHE_DIR": str(folders["cache"]),
                  "EDGE_LOCAL_DEVICE": str(folders["cache"] / "local-device"),
                  "TMPDIR": str(folders["tmp"]), "PYTHONPATH": str(ROOT)}


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _offline_argv(trace: Path) -> list[str]:
    """A command prefix: no network (a new network namespace), every connection traced."""
    for tool in ("unshare", "strace"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is needed to prove edge works offline; install it")
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.fail(f"unshare -rn (a network namespace) is refused: {probe.stderr.strip()}")
    return ["unshare", "-rn", "strace", "-f", "-qq", "--seccomp-bpf", "-o", str(trace),
            "-e", "trace=connect,sendto,sendmsg"]


def _run_offline(folders: dict[str, Path], *argv: str,
                 env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], str]:
    """``edge argv`` without a network, ``{out}`` being the output folder; its strace."""
    trace = folders["cwd"].parent / "strace.txt"
    command = [*_offline_argv(trace), sys.executable, "-m", "edge", *argv]
    command = [a.replace("{out}", str(folders["out"])) for a in command]
    done = subprocess.run(command, cwd=folders["cwd"], env=env or _env(folders),
                          capture_output=True, text=True, timeout=600)
    return done, trace.read_text()


def _assert_nothing_outside(folders: dict[str, Path], trace: str) -> None:
    for name in ("home", "cwd", "tmp"):
        assert _listing(folders[name]) == [], f"written in {name}: {_listing(folders[name])}"
    looked_up = [line for line in trace.splitlines() if NETWORK.search(line)]
    assert looked_up == [], looked_up[:5]


def test_a_full_optimize_needs_no_network_and_writes_only_its_cache_and_output(
        tmp_path: Path) -> None:
    folders = _folders(tmp_path)
    done, trace = _run_offline(folders, "optimize", "sample:digits", "--profile", "x86-64",
                               "-o", "{out}/digits.bundle")
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((folders["out"] / "digits.bundle" / "manifest.json").read_text())
    runtimes = {c["artifact"]["runtime"] for c in manifest["candidates"]
                if c.get("status") != "failed" and c.get("artifact")}
    assert {"onnxruntime", "openvino", "tflite"} <= runtimes, runtimes
    _assert_nothing_outside(folders, trace)
    assert (folders["cache"] / "frameworks" / "keras" / "keras.json").is_file()


@pytest.fixture(scope="module")
def toolchains() -> Path:
    """Every declared toolchain environment, built (from the registry) in the test data cache
    kept between runs, as ``edge toolchains install`` builds them; the offline runs read it."""
    root = cache_dir() / "toolchains"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGE_TOOLCHAIN_DIR", str(root))
        for toolchain in declared_toolchains().values():
            build(toolchain)
    return root


def test_every_catalog_profiles_optimize_needs_no_network(toolchains: Path,
                                                          tmp_path: Path) -> None:
    """Its accelerator's vendor toolchain included (Vela, rknn-toolkit2 and its simulator);
    profile after profile with one cache (each runtime converts once), each with its own empty
    ``$HOME``, working directory and ``$TMPDIR``."""
    cache, wrong = tmp_path / "cache", {}
    for profile in catalog_ids():
        (tmp_path / profile).mkdir()
        folders = _folders(tmp_path / profile)
        env = _env(folders) | {"EDGE_CACHE_DIR": str(cache), "EDGE_TOOLCHAIN_DIR": str(toolchains)}
        done, trace = _run_offline(folders, "optimize", "sample:digits", "--profile", profile,
                                   "-o", "{out}/digits.bundle", "--json", env=env)
        try:
            assert done.returncode == 0, done.stderr[-1500:]
            assert json.loads(done.stdout)["chosen"], done.stdout[-1500:]
            _assert_nothing_outside(folders, trace)
        except AssertionError as exc:
            wrong[profile] = str(exc)
    assert wrong == {}, wrong


def test_a_profile_whose_toolchain_is_not_built_is_refused_offline(tmp_path: Path) -> None:
    """Ethos-U's Vela environment is built only by ``edge toolchains install``: optimize for
    the Corstone-300 (its only runtime) says so in one line, reaches nothing and builds
    nothing (it once made 12 DNS look-ups and wrote ``$HOME/.rustup``)."""
    folders = _folders(tmp_path)
    empty = tmp_path / "toolchains"
    empty.mkdir()
    env = _env(folders) | {"EDGE_TOOLCHAIN_DIR": str(empty)}
    done, trace = _run_offline(folders, "optimize", "sample:digits", "--profile", "corstone-300",
                               "-o", "{out}/digits.bundle", env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if not STEP.match(line)]
    assert said == [
        "error: nothing for this profile's runtimes can be made here: ethos-u: its toolchain "
        "ethos-u-vela is not built: run edge toolchains install ethos-u-vela (it downloads its "
        "pinned packages, 19 MB of wheels, 102 MB installed; edge reaches the network only "
        "then)"]
    assert _listing(empty) == [] and _listing(folders["out"]) == []
    _assert_nothing_outside(folders, trace)


@pytest.mark.parametrize("argv", [("deploy", "{out}/tiny.bundle", "--runs", "5"),
                                  ("report", "{out}/tiny.bundle", "-o", "{out}/r.html")],
                         ids=["deploy", "report"])
def test_deploy_to_this_host_and_report_need_no_network(argv: tuple[str, ...],
                                                        tmp_path: Path) -> None:
    """The embedded local device's agent runs in a child; the report draws with matplotlib."""
    folders = _folders(tmp_path)
    shutil.copytree(BUNDLE, folders["out"] / "tiny.bundle")
    done, trace = _run_offline(folders, *argv)
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_nothing_outside(folders, trace)


def test_a_keras_intake_keeps_keras_and_matplotlib_files_in_the_cache(tmp_path: Path) -> None:
    """The TensorFlow child of the Keras intake imports Keras and matplotlib (refused here)."""
    model = tmp_path / "m.keras"
    _bad_models()["garbage.keras"](model)
    folders = _folders(tmp_path)
    done, trace = _run_offline(folders, "optimize", str(model), "--profile", "x86-64",
                               "-o", "{out}/m.bundle")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    _assert_nothing_outside(folders, trace)


def test_ctrl_c_during_optimize_is_one_line(tmp_path: Path) -> None:
    """Interrupted after OpenVINO converted: exit 130, one ``error:`` line, no traceback
    (OpenVINO's telemetry process, forked with edge's SIGTERM handler, once printed one when
    it was stopped)."""
    folders = _folders(tmp_path)
    log = tmp_path / "stderr.txt"
    with open(log, "w") as handle:
        child = _start_optimize(folders, handle)
        _wait_for(folders["cache"], "convert/*/openvino-*/*.xml", child, log)
        child.send_signal(signal.SIGINT)
        status = child.wait(timeout=120)
    stderr = log.read_text()
    assert status == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert [line for line in stderr.splitlines() if line.startswith("error:")] == [
        "error: interrupted"]
    assert _listing(folders["home"]) == []


@pytest.mark.exclusive  # how fast edge reacts: a busy worker beside it delays it
def test_ctrl_c_while_onnx2tf_converts_ends_at_once(tmp_path: Path) -> None:
    """A Ctrl-C while edge waits for onnx2tf ends edge within seconds, and onnx2tf with it: the
    wait polls, so a signal the kernel hands to another thread is still seen (a blocking
    wait4 saw it only when onnx2tf exited, ~30 s later here, up to its time limit)."""
    folders = _folders(tmp_path)
    log = tmp_path / "stderr.txt"
    with open(log, "w") as handle:
        child = _start_optimize(folders, handle)
        converter = _wait_for_onnx2tf(child, log)
        time.sleep(1)
        child.send_signal(signal.SIGINT)
        start = time.monotonic()
        status = child.wait(timeout=120)
    took = time.monotonic() - start  # 0.3 s here; ~15 s when edge waited for onnx2tf
    assert took < 10, f"edge stopped {took:.1f} s after the Ctrl-C: it waited for onnx2tf"
    assert status == 130, log.read_text()[-3000:]
    assert not Path(f"/proc/{converter}").exists() or _zombie(converter)


# A Ctrl-C caught inside code a C extension ran with PyRun_String (TensorFlow's import does).
_INNER_INTERRUPT = """
import ctypes
run = ctypes.pythonapi.PyRun_String
run.restype, run.argtypes = ctypes.py_object, [ctypes.c_char_p, ctypes.c_int, ctypes.py_object,
                                               ctypes.py_object]
try:
    run(b"raise KeyboardInterrupt", 257, {}, {})
except KeyboardInterrupt:
    pass
"""


@pytest.mark.parametrize(("forget", "status"), [(True, 130), (False, -signal.SIGINT)])
def test_python_m_edge_exits_with_edges_status_after_an_inner_interrupt(
        tmp_path: Path, forget: bool, status: int) -> None:
    """CPython's ``-m`` runner exits by SIGINT (-2) once a Ctrl-C passed through PyRun_String,
    whatever status the program chose (False: the quirk itself); ``python -m edge`` resets that,
    so it exits with edge's own status (130 after ``error: interrupted``), as ``edge`` does."""
    probe = tmp_path / "probe"
    probe.mkdir()
    call = "forget_inner_interrupts()" if forget else "pass"
    (probe / "__main__.py").write_text(
        f"from edge.cli import forget_inner_interrupts\n{_INNER_INTERRUPT}\n{call}\n"
        "raise SystemExit(130)\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    done = subprocess.run([sys.executable, "-m", "probe"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == status, done.stderr[-2000:]


def _start_optimize(folders: dict[str, Path], stderr: IO[str]) -> subprocess.Popen[bytes]:
    """``edge optimize sample:digits`` for x86-64 in a child, with ``folders``' HOME and cache,
    its SIGINT as a terminal's foreground process has it (a pytest-xdist worker's child once
    ignored the Ctrl-C: edge finished, exit 0)."""
    return subprocess.Popen(
        [sys.executable, "-m", "edge", "optimize", "sample:digits", "--profile", "x86-64",
         "-o", str(folders["out"] / "d.bundle")],
        cwd=folders["cwd"], env=_env(folders), stdout=subprocess.DEVNULL, stderr=stderr,
        preexec_fn=as_in_a_terminal)


def _wait_for_onnx2tf(child: subprocess.Popen[bytes], log: Path) -> int:
    """The pid of the onnx2tf process edge started, once it runs."""
    deadline = time.monotonic() + 300
    while True:
        assert child.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "optimize never started onnx2tf"
        for proc in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError):
                if b"onnx2tf" in (proc / "cmdline").read_bytes() and \
                        _parent(proc) == child.pid:
                    return int(proc.name)
        time.sleep(0.2)


def _parent(proc: Path) -> int:
    return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])


def _zombie(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    return True


def _wait_for(root: Path, pattern: str, child: subprocess.Popen[bytes], log: Path) -> None:
    """Until OpenVINO's conversion (and NNCF's quantization) has written its cache entry."""
    deadline = time.monotonic() + 300
    while not any(root.glob(pattern)):
        assert child.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "optimize never reached its conversion"
        time.sleep(0.1)


def test_openvino_and_nncf_run_their_telemetry_stubs() -> None:
    """OpenVINO's converter and NNCF fall back to their no-op telemetry (a fresh process)."""
    code = ("from edge.core import offline; offline.apply()\n"
            "import nncf.telemetry.wrapper as w\n"
            "from openvino.tools.ovc import telemetry_utils as t\n"
            "print(t.tm.__name__, type(w.telemetry).__name__)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["openvino.tools.ovc.telemetry_stub", "MagicMock"]


def test_frameworks_folders_are_absolute_and_inside_the_cache(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.chdir(tmp_path)
    env = offline.environment(Path("relative-cache"))
    for name in offline.HOMES:
        assert Path(env[name]).is_absolute()
        assert Path(env[name]).is_relative_to(tmp_path / "relative-cache")
    assert env["ORT_DISABLE_TELEMETRY"] == "1"


@pytest.mark.parametrize(("stop", "status", "line"), [(KeyboardInterrupt, 130, "interrupted"),
                                                     (Terminated, 143, "terminated")])
def test_a_framework_error_caused_by_ctrl_c_is_an_interruption(
        stop: type[KeyboardInterrupt], status: int, line: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """pybind11 turns a Ctrl-C inside a module's init into ``ImportError: initialization
    failed`` (``import openvino`` after a Ctrl-C): not an internal error."""
    def interrupted_import(**kwargs: object) -> None:
        try:
            raise stop()
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc

    monkeypatch.setattr(cli, "main", interrupted_import)
    result = run_cli("inspect", "m.onnx")
    assert (result.status, result.error_lines) == (status, [f"error: {line}"])
