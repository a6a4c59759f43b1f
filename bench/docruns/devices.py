"""The sessions of docs/commands/deploy.md, releases.md, rollback.md, bench.md and
devices-probe.md: the embedded local device (``device/`` in each work dir) and, for the SSH
examples, the test sshd of tests/support/sshd.py (a real OpenSSH server on 127.0.0.1 serving
the account ``edgeuser``, with a device Python venv)."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from . import files
from .models import DOCS_DIR
from .steps import (
    Ctx,
    Session,
    Show,
    Step,
    cut_between,
    fold,
    from_,
    json_lists,
    keep,
    keep_from,
    only,
)


@contextlib.contextmanager
def test_sshd(work: Path) -> Iterator[dict[str, str]]:
    """The test sshd, its client keys and known_hosts files copied into ``work``."""
    sys.path.insert(0, str(files.ROOT))
    from tests.support.sshd import running_device

    with running_device() as device:
        for source, name in ((device.identity, "id_ed25519"),
                             (device.wrong_identity, "wrong_id_ed25519"),
                             (device.known_hosts, "known_hosts"),
                             (device.changed_known_hosts, "changed_known_hosts")):
            shutil.copy(source, work / name)
        (work / "empty_known_hosts").write_text("")
        yield {"ssh": device.target, "python": device.python}


def chosen_release(ctx: Ctx, bundle: str, digits: int = 16) -> str:
    """The release id (sha256 prefix) of ``bundle``'s chosen artifact."""
    manifest = json.loads((ctx.work / bundle / "manifest.json").read_text())
    chosen = next(c for c in manifest["candidates"] if c["status"] == "chosen")
    return chosen["artifact"]["sha256"][:digits]


def artifact_file(ctx: Ctx, bundle: str, candidate: str) -> str:
    manifest = json.loads((ctx.work / bundle / "manifest.json").read_text())
    for entry in manifest["candidates"]:
        if "{target}-{precision}".format(**entry["candidate"]) == candidate:
            return f"{bundle}/{entry['artifact']['file']}"
    raise KeyError(candidate)


_RPI4 = "edge deploy sample:digits --profile rpi4 -o a.bundle --runs 5"
_NANO = "edge deploy sample:digits --profile jetson-nano -o b.bundle --runs 5"
#: Three deploys: rpi4's tflite-int8, jetson-nano's onnxruntime-int8, the first one again.
THREE_DEPLOYS = [Step(command=_RPI4), Step(command=_NANO),
                 Step(command="edge deploy a.bundle --runs 5")]


def _ssh(tail: str, *, python: bool = True, identity: str = "id_ed25519",
         show: Show | None = None, gap: bool = True) -> Step:
    """A deploy of demo.bundle to the test sshd (on a terminal: its `edge:` lines show)."""
    def command(ctx: Ctx) -> str:
        device = f"--device-python {ctx.python} " if python else ""
        return (f"edge deploy demo.bundle --host {ctx.ssh} --identity {identity} \\\n"
                f"      {device}{tail}")
    return Step(command=command, block=6, tty=True, gap=gap, show=show)


_TO_DEVICE2 = "EDGE_LOCAL_DEVICE=$PWD/device2 edge deploy"

DEPLOY = Session(name="deploy", docs=("docs/commands/deploy.md",),
                 workdir=DOCS_DIR / "deploy", files=lambda work: None, device=test_sshd, steps=[
    Step(command=_RPI4, block=0, tty=True),
    Step(command=_NANO, block=1, tty=True,
         show=keep_from("chosen:", "edge: connecting", "edge: deploying", "profile ")),
    Step(command="edge deploy a.bundle --runs 5", block=2, tty=True,
         show=keep_from("bundle:", "edge: connecting", "edge: deploying")),
    Step(command=f"{_TO_DEVICE2} sample:digits --profile x86-64 -o x86.bundle --runs 20",
         block=3, show=only("chosen:", "candidate  ", "release")),
    Step(command=f"{_TO_DEVICE2} x86.bundle --on-device --keep 2 --runs 20", block=3,
         show=from_("measured on the device")),
    Step(command="edge deploy b.bundle --json --runs 20 2>/dev/null", block=4,
         show=fold("metrics")),
    Step(command="edge deploy sample:digits --profile rpi4 --dry-run", block=5),
    Step(command="edge optimize sample:digits --profile rpi4 -o demo.bundle"),
    _ssh("--known-hosts empty_known_hosts", gap=False),
    Step(command="echo $?", block=6),
    _ssh("--known-hosts new_known_hosts \\\n      --trust-new-host --runs 20",
         show=keep_from("bundle:", "edge: ", "warning: ", "profile ")),
    _ssh("--known-hosts new_known_hosts --runs 20", show=only("edge: ", "warning: ")),
    _ssh("--known-hosts changed_known_hosts --trust-new-host", python=False),
    _ssh("--known-hosts known_hosts", python=False, identity="wrong_id_ed25519"),
    _ssh("--known-hosts known_hosts --device-python /usr/bin/nopython", python=False),
    _ssh("--known-hosts known_hosts --device-python /usr/bin/python3", python=False),
    Step(command="edge deploy sample:digits --profile rpi4 --host 'pi@bad host'", block=7),
    Step(command="edge deploy sample:digits --profile rpi4 --host pi@127.0.0.1:1 "
                 "--identity nokey", block=7),
    Step(command="edge deploy sample:digits --profile rpi4 --host pi@127.0.0.1:1 "
                 "--known-hosts nokh", block=7),
    Step(command="edge deploy sample:digits", block=7),
    Step(command="edge deploy sample:digits --profile rpi4 --host pi@127.0.0.1:1 -o ssh.bundle",
         block=8),
    Step(command="echo $?", block=8),
    Step(command="cd device && find .edge | sort", block=9),
    Step(command="readlink .edge/current", block=9),
])

RELEASES = Session(name="releases", docs=("docs/commands/releases.md",),
                   workdir=DOCS_DIR / "releases", files=lambda work: None, steps=[
    *THREE_DEPLOYS,
    Step(command="edge releases", block=0),
    Step(command="edge releases --json", block=0, show=json_lists(releases=(1, 0),
                                                                   history=(1, 1))),
    Step(command="edge bench b.bundle --candidate onnxruntime-fp32 --runs 5", block=1,
         show=only("release")),
    Step(command="edge releases", block=1),
    Step(command="edge releases --prune 2", block=1),
    Step(command="edge releases --prune 1", block=1),
    Step(command="edge releases --prune 0", block=1),
    Step(command="edge deploy b.bundle --name kws --runs 5", block=2,
         show=only("warning", "release")),
    Step(command="edge releases", block=2),
    Step(command="edge rollback", block=2),
    Step(command="edge releases --name kws", block=2),
])

_EMPTY = "EDGE_LOCAL_DEVICE=$PWD/empty edge"
ROLLBACK = Session(name="rollback", docs=("docs/commands/rollback.md",),
                   workdir=DOCS_DIR / "rollback", files=lambda work: None, steps=[
    *THREE_DEPLOYS,
    Step(command="edge rollback", block=0),
    Step(command=lambda c: f"edge rollback --to {chosen_release(c, 'a.bundle', 6)}", block=0),
    Step(command=lambda c: f"edge rollback --to {chosen_release(c, 'a.bundle', 6)}", block=0),
    Step(command="edge rollback --to abcd", block=0),
    Step(command="edge rollback --to xyz", block=0),
    Step(command="edge rollback --json", block=0),
    Step(command=f"{_EMPTY} rollback", block=1),
    Step(command=f"{_EMPTY} releases", block=1),
])


def _bench_files(work: Path) -> None:
    (work / "nothing.bin").write_bytes(b"\0" * 16)


_BASE = ("python -c \"import json; d = json.load(open('base.json')); d['bench']['p50_ms'] = "
         "0.010; d['bench']['round_ms'] = [0.010] * 5; json.dump(d, open('base.json', 'w'))\"")
_A = "edge bench a.bundle --runs 20"

BENCH = Session(name="bench", docs=("docs/commands/bench.md",), workdir=DOCS_DIR / "bench",
                files=_bench_files, steps=[
    # --exhaustive: a bundle to bench several candidates of (not only those that could win)
    Step(command="edge optimize sample:digits --profile x86-64 --exhaustive -o d.bundle"),
    Step(command="edge optimize sample:digits --profile pixel-8 -o p8.bundle"),
    Step(command="edge optimize sample:digits --profile jetson-nano -o b.bundle"),
    Step(command="edge deploy sample:digits --profile rpi4 -o a.bundle --runs 20"),
    Step(command="edge bench d.bundle --candidate onnxruntime-int8", block=0),
    Step(command=lambda c: f"edge bench {artifact_file(c, 'd.bundle', 'tflite-int8')} --runs 200",
         block=1, show=keep(lambda i, line: i == 0 or line.startswith(
             ("candidate", "release", "latency")))),
    Step(command="edge bench d.bundle --candidate openvino-fp32 --runs 20 --threads 1 --json",
         block=1, show=cut_between('"runs":', "  },")),
    Step(command="edge bench d.bundle --candidate tflite-fp16", block=2),
    Step(command="edge bench p8.bundle", block=2),
    Step(command="edge bench nothing.bin", block=2),
    Step(command=f"{_A} --baseline last", block=3),
    Step(command="echo $?", block=3),
    Step(command=f"{_A} --baseline last", block=3),
    Step(command="echo $?", block=3),
    Step(command=f"{_A} --json > base.json", block=4),
    Step(command=_BASE, block=4),
    Step(command=f"{_A} --baseline base.json", block=4),
    Step(command="echo $?", block=4),
    Step(command=f"{_A} --baseline base.json --max-regression 400 --json 2>/dev/null | tail -10",
         block=4),
    Step(command="edge bench b.bundle --runs 20 --baseline base.json", block=5),
    Step(command="EDGE_CACHE_DIR=$PWD/empty-cache edge bench a.bundle --runs 5 --baseline last",
         block=5),
])

_P = "edge devices probe"
PROBE = Session(name="probe", docs=("docs/commands/devices-probe.md",),
                workdir=DOCS_DIR / "probe", files=lambda work: None, device=test_sshd, steps=[
    Step(command=f"{_P} local --id docs-laptop -o docs-laptop.yaml", block=0),
    Step(command="edge profiles validate docs-laptop.yaml", block=0),
    Step(command=f"{_P} local --id docs-laptop -o docs-laptop.yaml", block=1),
    Step(command=f"{_P} local --id Docs_Laptop", block=1),
    Step(command=f"{_P} 'pi@bad host'", block=1),
    Step(command=f"{_P} pi@127.0.0.1:1 -o nowhere.yaml", block=1),
    Step(command="echo $?", block=1),
    Step(command=lambda c: (f"{_P} {c.ssh} --identity id_ed25519 --known-hosts known_hosts \\\n"
                            f"      --device-python {c.python} -o test-device.yaml"),
         block=2, show=keep(lambda i, line: i < 5 or line.startswith(
             ("id:", "access:", "  transport", "  user", "  host", "  port", "  python",
              "wrote")))),
    Step(command="edge deploy sample:digits --profile test-device.yaml --dry-run", block=2),
])
