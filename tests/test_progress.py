"""Progress: bars on a terminal's stderr, a plain line per step when piped, none under --json."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devices.ssh import SSHTransport, parse_host
from edge.core import progress
from tests.support.cli import run_edge
from tests.support.sshd import SSHDevice

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BAR = "━"


@dataclass(frozen=True, slots=True)
class Terminal:
    """An edge run whose stderr was a terminal: exit status, stdout, and the terminal's text."""

    status: int
    stdout: str
    raw: str  # every byte written to the terminal, escape sequences included

    @property
    def lines(self) -> list[str]:
        """Every line and redrawn frame, escape sequences removed."""
        return [line for line in re.split(r"[\r\n]+", _ANSI.sub("", self.raw)) if line.strip()]


def on_terminal(*args: str, timeout: float = 300) -> Terminal:
    """``python -m edge ARGS`` with stderr on a pseudo-terminal and stdout on a pipe."""
    master, slave = os.openpty()
    env = dict(os.environ, COLUMNS="140", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "edge", *args], stdout=subprocess.PIPE,
                            stderr=slave, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    stdout: list[bytes] = []
    reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()))  # type: ignore
    reader.start()
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                proc.kill()
                raise AssertionError(f"edge {' '.join(args)} hung")
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        proc.wait(timeout)
        reader.join(timeout)
    return Terminal(proc.returncode, stdout[0].decode(), b"".join(chunks).decode("utf-8"))


@pytest.fixture(scope="module")
def ort_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This host's kind of machine with onnxruntime only: quick to convert, timed on the host."""
    path = tmp_path_factory.mktemp("profile") / "ort-only.yaml"
    path.write_text("extends: x86-64\nid: ort-only\nruntimes: [onnxruntime]\n")
    return path


@pytest.fixture(scope="module")
def optimized(ort_profile: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Terminal, Path]:
    out = tmp_path_factory.mktemp("tty") / "digits.bundle"
    return on_terminal("optimize", "sample:digits", "--profile", str(ort_profile),
                       "-o", str(out)), out


def test_optimize_on_a_terminal_shows_bars(optimized: tuple[Terminal, Path]) -> None:
    run, _ = optimized
    assert run.status == 0, run.raw
    text = "\n".join(run.lines)
    assert BAR in run.raw and re.search(r"\b\d{1,3}%", text)
    for candidate in ("original", "onnxruntime-int8", "onnxruntime-int8-dynamic",
                      "onnxruntime-fp32"):
        assert re.search(rf"converting \d/5 {candidate}\b", text), text
        assert f"{candidate}: verifying on" in text
    assert "onnxruntime-int8: calibrating on" in text
    assert "original: your own file, nothing to convert" in text
    assert re.search(r"timing round 5/5 onnxruntime", text)
    # log lines print whole above the bars, in the usual 'edge: ' style
    assert "edge: converting and verifying onnxruntime-int8" in run.lines
    assert run.raw.rfind("\x1b[?25h") > run.raw.rfind("\x1b[?25l")  # the cursor shown again
    assert "bundle:" in run.stdout and "\x1b" not in run.stdout and BAR not in run.stdout


def test_json_on_a_terminal_shows_no_progress(ort_profile: Path, tmp_path: Path) -> None:
    run = on_terminal("optimize", "sample:digits", "--profile", str(ort_profile),
                      "-o", str(tmp_path / "b"), "--json")
    assert run.status == 0, run.raw
    assert json.loads(run.stdout)["chosen"]
    assert BAR not in run.raw and "\x1b[" not in run.raw
    assert "converting" not in run.raw and "edge:" not in run.raw


def test_piped_stderr_shows_one_plain_line_per_step(ort_profile: Path, tmp_path: Path) -> None:
    """Without a terminal (a CI log, nohup) no bars and no escapes, but one line per step as it
    starts, with the time since the command began; stdout is untouched."""
    result = run_edge("optimize", "sample:digits", "--profile", str(ort_profile),
                      "-o", str(tmp_path / "b"))
    assert result.status == 0, result.stderr
    raw = "\n".join((*result.steps, result.stderr))
    assert BAR not in raw and "\x1b[" not in raw and "\r" not in raw
    steps = list(result.steps)
    assert all(re.fullmatch(r"edge: \[\d+:[0-5]\d\] \S.*", line) for line in steps), steps
    assert not [line for line in result.stderr.splitlines() if line.startswith("edge: [")]
    text = "\n".join(steps)
    assert "onnxruntime-int8: calibrating on" in text and "onnxruntime-fp32: verifying on" in text
    described = [line.split("] ", 1)[1] for line in steps]
    repeated = {d for d in described if described.count(d) > 1}
    assert repeated <= {"timing"}, repeated  # a step once, not once per redraw
    assert "bundle:" in result.stdout and "edge: [" not in result.stdout


def test_json_off_a_terminal_shows_no_step_lines(ort_profile: Path, tmp_path: Path) -> None:
    result = run_edge("optimize", "sample:digits", "--profile", str(ort_profile),
                      "-o", str(tmp_path / "b"), "--json")
    assert result.status == 0, result.stderr
    assert not result.steps and "edge: [" not in result.stderr
    assert json.loads(result.stdout)["chosen"]


def test_fleet_shows_a_hosts_bar_and_counts_failures(optimized: tuple[Terminal, Path],
                                                     tmp_path: Path) -> None:
    _, bundle = optimized
    with socket.socket() as sock:  # a port nothing listens on: every host is refused at once
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[devs]\n" + "".join(
        f"d{i} ansible_host=127.0.0.1 ansible_port={port} ansible_user=pi\n" for i in range(3)))
    run = on_terminal("deploy", str(bundle), "--inventory", str(inventory))
    assert run.status == 3, run.raw
    text = "\n".join(run.lines)
    assert "hosts 3/3 done, 3 failed" in text
    assert re.search(r"d\d: connecting to ssh://", text)
    assert any(line.startswith("edge: d0: FAILED in ") for line in run.lines)
    assert "0 ok, 3 failed" in run.stdout and BAR not in run.stdout


# ============================================================================ the module itself


@pytest.fixture
def shown() -> Iterator[io.StringIO]:
    """Bars on (as on a terminal) into a buffer; off again afterwards."""
    buffer = io.StringIO()
    progress.enable(buffer, terminal=True)
    try:
        yield buffer
    finally:
        progress.disable()


def test_no_redraw_while_something_is_timed(shown: io.StringIO) -> None:
    """The bars are redrawn by a thread of this process: inside ``hold`` (a timed block on this
    host) it must not draw, or the drawing would be measured as the model's time."""
    import time

    with progress.step("timing", total=3) as bar:
        time.sleep(0.5)
        assert shown.tell() > 0, "the display is not being redrawn at all"
        with progress.hold():
            bar.advance()
            before = shown.tell()
            time.sleep(3 / progress.REFRESH_PER_SECOND)
            assert shown.tell() == before, "redrawn inside a timed block"
        time.sleep(3 / progress.REFRESH_PER_SECOND)
        assert shown.tell() > before, "redraws did not resume after the timed block"
    with progress.hold():  # nothing shown: a no-op
        pass


def test_threads_share_one_display_and_log_lines_stay_whole(shown: io.StringIO) -> None:
    logger = logging.getLogger("edge.test-progress")
    handler = progress.LogHandler(shown)
    handler.setFormatter(logging.Formatter("edge: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            with progress.step(f"worker {index}", total=200) as bar:
                for count in range(200):
                    bar.advance()
                    if count % 40 == 0:
                        logger.warning("thread %d line %d", index, count)
                with progress.transfer(f"upload {index}", 10_000) as upload:
                    for sent in range(0, 10_001, 2_500):
                        upload.sent(sent, 10_000)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        logger.removeHandler(handler)
    assert not errors and not any(t.is_alive() for t in threads)
    assert progress._state.live is None  # the display stopped with the last step
    lines = re.split(r"[\r\n]+", _ANSI.sub("", shown.getvalue()))
    logged = [line for line in lines if "line" in line and "thread" in line]
    expected = {f"edge: thread {i} line {c}" for i in range(16) for c in range(0, 200, 40)}
    assert set(logged) == expected and len(logged) == len(expected)
    assert BAR in shown.getvalue() and "worker 15" in shown.getvalue()


def test_off_by_default_prints_nothing_and_loads_no_rich() -> None:
    code = ("import sys, logging\n"
            "from edge.core import progress\n"
            "with progress.step('a', total=3) as bar:\n"
            "    bar.advance(); bar.update('b')\n"
            "    with progress.transfer('c', 10) as up: up.sent(5, 10)\n"
            "assert not progress.enabled() and 'rich' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_log_lines_are_plain_when_no_bar_is_shown(shown: io.StringIO) -> None:
    handler = progress.LogHandler(shown)
    handler.setFormatter(logging.Formatter("edge: %(message)s"))
    handler.emit(logging.makeLogRecord({"msg": "connecting to %s", "args": ("x",)}))
    assert shown.getvalue() == "edge: connecting to x\n"


def test_upload_over_ssh_shows_a_bytes_bar(shown: io.StringIO, ssh_device: SSHDevice,
                                           tmp_path: Path) -> None:
    payload = tmp_path / "payload.bin"
    payload.write_bytes(os.urandom(3_000_000))
    with SSHTransport(parse_host(ssh_device.target), identity=ssh_device.identity,
                      known_hosts=ssh_device.known_hosts) as transport:
        remote = f"{transport.home()}/progress-payload.bin"
        transport.put(payload, remote)
    try:
        assert (ssh_device.home / "progress-payload.bin").read_bytes() == payload.read_bytes()
    finally:
        (ssh_device.home / "progress-payload.bin").unlink(missing_ok=True)
    text = _ANSI.sub("", shown.getvalue())
    assert "uploading payload.bin" in text
    assert "3.0/3.0 MB" in text and re.search(r"[\d.]+ [kMG]?B/s", text), text
