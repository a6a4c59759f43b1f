"""Running a session: each command in bash, as typed into one terminal session.

A command runs in a fresh ``bash -c`` that starts where the last one left off: in its working
directory, with its exported variables (``export X=...``, ``cd DIR && ...`` carry over) and
``$?`` set to its exit status (so ``echo $?`` works). stdout and stderr are merged as a
terminal shows them, without the plain step lines (``edge: [m:ss] ...``) the CLI prints when
stderr is not a terminal: a terminal shows those as bars that are gone when the command ends. A
``tty`` step runs on a pseudo-terminal (``script``, ``TERM=dumb``: the
CLI then prints its ``edge: ...`` progress lines, but draws no bars). A ``background`` step is
a server: started, its output read until its marker line, left running (and drained) until a
``stop`` step or the end of the session.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .files import ROOT
from .steps import Ctx, Session, Step, text

TIMEOUT = 1800
SERVER_START = 120
#: Variables bash sets by itself: not part of the state carried to the next command.
BASH_OWN = ("_", "SHLVL", "PWD", "OLDPWD")

sys.path.insert(0, str(ROOT))
from edge.core.progress import STEP_LINE as STEP  # noqa: E402 - the CLI's plain step lines


@dataclass(slots=True)
class Shell:
    """The state one command leaves to the next."""

    cwd: Path
    env: dict[str, str]
    status: int = 0
    state: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="edge-docs-sh-")))
    servers: list[subprocess.Popen[str]] = field(default_factory=list)

    def wrapped(self, command: str) -> str:
        """``command`` preceded by ``$?`` and followed (even on ``exit``) by saving the state."""
        save = (f"__s=$?; pwd > {self.state}/cwd; env -0 > {self.state}/env; "
                "exit $__s")
        return f"trap {shlex.quote(save)} EXIT\n(exit {self.status})\n{command}\n"

    def absorb(self, status: int) -> None:
        """Take over the directory and environment the last command left."""
        self.status = status
        cwd, env = self.state / "cwd", self.state / "env"
        if cwd.is_file():
            self.cwd = Path(cwd.read_text().strip())
        if env.is_file():
            pairs = (item.split("=", 1) for item in env.read_text().split("\0") if "=" in item)
            self.env = {k: v for k, v in pairs if k not in BASH_OWN}
        for path in (cwd, env):
            path.unlink(missing_ok=True)

    def close(self) -> None:
        while self.servers:
            stop_server(self.servers.pop())
        shutil.rmtree(self.state, ignore_errors=True)


def base_env(session: Session, cache: Path) -> dict[str, str]:
    """This environment, with the session's cache and local device, this venv first on PATH."""
    env = dict(os.environ, EDGE_CACHE_DIR=str(cache),
               EDGE_LOCAL_DEVICE=str(session.workdir / "device"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONUNBUFFERED="1")
    for name in ("EDGE_CLOUD_TOKEN", "TERM", "COLUMNS"):
        env.pop(name, None)
    return env


def run_session(session: Session, cache: Path) -> dict[str, Any]:
    """Every step of ``session`` in a fresh work dir; the recorded steps."""
    work = session.workdir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    session.files(work)
    shell = Shell(cwd=work, env=base_env(session, cache))
    steps = []
    try:
        with session.device(work) as facts:
            ctx = Ctx(work, dict(facts))
            for step in session.steps:
                steps.append(run_step(step, ctx, shell, session))
    finally:
        shell.close()
    return {"docs": list(session.docs), "workdir": str(work), "steps": steps}


def run_step(step: Step, ctx: Ctx, shell: Shell, session: Session) -> dict[str, Any]:
    command = text(step.command, ctx)
    print(f"[{session.name}] $ {command}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    if step.stop:
        stop_server(shell.servers.pop())
        status, output = None, ""
    elif step.background:
        status, output = None, start_server(command, step, shell)
    else:
        status, output = run_command(command, step, shell)
    return {"command": command, "doc": step.doc or session.docs[0], "block": step.block,
            "terminal": step.tty, "status": status,
            "seconds": round(time.perf_counter() - started, 1), "output": output}


def run_command(command: str, step: Step, shell: Shell) -> tuple[int, str]:
    argv = ["bash", "-c", shell.wrapped(command)]
    env = dict(shell.env)
    if step.tty:  # script(1) gives it a terminal; -e: its exit status
        argv, env["TERM"] = ["script", "-qec", shlex.join(argv), "/dev/null"], "dumb"
    done = subprocess.run(argv, cwd=step.cwd or shell.cwd, env=env, text=True,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=TIMEOUT, check=False)
    cwd = shell.cwd
    shell.absorb(done.returncode)
    if step.cwd is not None:
        shell.cwd = cwd
    output = done.stdout.replace("\r\n", "\n").replace("\r", "\n") if step.tty else \
        "".join(line for line in done.stdout.splitlines(keepends=True) if not STEP.match(line))
    return done.returncode, output.rstrip("\n")


def start_server(command: str, step: Step, shell: Shell) -> str:
    """Start ``command`` (``cmd &`` or a server that runs until stopped); its output up to the
    line containing ``step.background``."""
    proc = subprocess.Popen(["bash", "-c", command.removesuffix("&").strip()], cwd=shell.cwd,
                            env=shell.env, text=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    shell.servers.append(proc)
    assert proc.stdout is not None and step.background is not None
    lines: list[str] = []
    deadline = time.monotonic() + SERVER_START
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if step.background in line:
            break
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # never let it block
    return "\n".join(lines)


def stop_server(proc: subprocess.Popen[str]) -> None:
    """SIGTERM the server's process group (it was started as its own session), then wait."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
