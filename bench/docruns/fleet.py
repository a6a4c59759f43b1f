"""The session of docs/fleet.md's staged rollouts: 8 emulated devices (tests/support/
fleet_devices.py: network namespaces, one real sshd each, a cgroup of 1 CPU and 1 GB), every
one reached through a device python that fails the agent's health check while the device's
``~/.edge-fault`` exists (the fault is switched on and off by unshown steps), the built-in
engine and the ansible one (``edge deploy --engine ansible``, and ``ansible-playbook`` with the
edge.fleet collection). Needs root, iproute2 and OpenSSH's sshd, as the fleet tests do."""

from __future__ import annotations

import contextlib
import shutil
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from . import files
from .models import DOCS_DIR
from .steps import Ctx, Session, Step, keep, on_page

_PAGE = "docs/fleet.md"
_fleet = on_page(_PAGE)
_FLAGS = "--inventory hosts.yml --known-hosts known_hosts --no-on-device"
_STAGED = f"{_FLAGS} --runs 10 --warmup 2 --threads 1 --forks 8 --canary 1 --batch 3"
_PLAIN = f"{_FLAGS} --runs 3 --warmup 1 --forks 8"
_PLAYBOOK = ("ansible-playbook -i hosts.yml edge.fleet.staged_rollout "
             "-e rollout_bundle=$PWD/v2.bundle -e rollout_runs=3 -e rollout_warmup=1")


def _wrapper(python: str) -> str:
    """The device python: the agent's health check fails while ~/.edge-fault exists."""
    return textwrap.dedent(f"""\
        #!/bin/sh
        for arg in "$@"; do
          if [ "$arg" = health ] && [ -e "$HOME/.edge-fault" ]; then
            echo '{{"error": "injected fault: the model does not load"}}'; exit 3
          fi
        done
        exec {python} "$@"
        """)


@contextlib.contextmanager
def emulated_fleet(work: Path) -> Iterator[dict[str, str]]:
    """8 emulated devices; hosts.yml and known_hosts in ``work``; each device's home by name,
    and the environment ``ansible-playbook`` needs (the collection, the known hosts)."""
    sys.path.insert(0, str(files.ROOT))
    from tests.support.fleet_devices import running_fleet

    with running_fleet(8) as fleet:
        host_vars = {}
        for device in fleet.devices:
            wrapper = device.home / "python"
            wrapper.write_text(_wrapper(fleet.python))
            wrapper.chmod(0o755)
            host_vars[device.name] = {"ansible_python_interpreter": str(wrapper)}
        fleet.write_inventory(work / "hosts.yml", host_vars=host_vars)
        shutil.copy(fleet.known_hosts, work / "known_hosts")
        collections = work / "collections" / "ansible_collections" / "edge"
        collections.mkdir(parents=True)
        (collections / "fleet").symlink_to(files.ROOT / "devices" / "ansible")
        yield {**{d.name: str(d.home) for d in fleet.devices}, "ansible": _ansible_env(work)}


def _ansible_env(work: Path) -> str:
    """``export`` of ansible-playbook's settings: the collection, ssh with the known hosts."""
    control = work / "cp"  # ssh's control sockets: a path well under 108 bytes
    control.mkdir()
    ssh = (f"-o ControlMaster=auto -o ControlPersist=120s -o UserKnownHostsFile="
           f"{work / 'known_hosts'} -o StrictHostKeyChecking=yes")
    return (f"export ANSIBLE_COLLECTIONS_PATH={work / 'collections'} ANSIBLE_PIPELINING=True "
            f"ANSIBLE_FORKS=8 ANSIBLE_NOCOLOR=1 ANSIBLE_SSH_CONTROL_PATH_DIR={control} "
            f"ANSIBLE_SSH_ARGS='{ssh}'")


def _fault(device: str, on: bool) -> Step:
    """Switch the fault of ``device`` on or off (an unshown step)."""
    def command(ctx: Ctx) -> str:
        path = f"{getattr(ctx, device)}/.edge-fault"
        return f"touch {path}" if on else f"rm -f {path}"
    return Step(command=command)


def _previous(tail: str = "") -> Step:
    """Every device on v1.bundle's release, the one before v2's (unshown)."""
    return Step(command=f"edge deploy v1.bundle {_PLAIN}{tail} > /dev/null")


#: v1.bundle's profile: this host's, ONNX Runtime only (another artifact, another release).
ORT = "extends: x86-64\nid: x86-64\nruntimes: [onnxruntime]\n"
PIS = """\
all:
  vars:
    ansible_user: pi
    edge_profile: rpi4
  hosts:
    pi1: {ansible_host: 192.168.1.21}
    pi2: {ansible_host: 192.168.1.22}
    pi3: {ansible_host: 192.168.1.23}
"""


def _files(work: Path) -> None:
    files.digits(work, "digits.onnx", "digits_calib.npy", "digits_eval.npz")
    files.write(work, {"pis.yml": PIS, "ort.yaml": ORT})


_RECAP = keep(lambda _, line: line.startswith((
    "PLAY ", "TASK [edge.fleet.rollout : Install", "TASK [edge.fleet.rollout : Roll",
    "TASK [edge.fleet.rollout : Halt", "fatal:", "changed:", "dev", "NO MORE HOSTS", "(exit")))


def _status(command: str) -> str:
    return f'{command}; echo "(exit status $?)"'


SESSION = Session(name="fleet", docs=(_PAGE,), workdir=DOCS_DIR / "fleet",
                  files=_files, device=emulated_fleet, steps=[
    Step(command="edge optimize sample:digits --profile x86-64 -o v2.bundle > /dev/null"),
    Step(command="edge optimize sample:digits --profile ort.yaml -o v1.bundle > /dev/null"),
    _previous(),
    # the built-in engine, staged: dev4 (batch 2) fails its health check
    _fleet(command=f"edge deploy v2.bundle {_STAGED} --dry-run", block=0),
    _fault("dev4", True),
    _fleet(command=_status(f"edge deploy v2.bundle {_STAGED}"), block=1),
    _fault("dev4", False),
    _fleet(command=_status(f"edge deploy v2.bundle {_STAGED}"), block=2),
    # ansible-playbook with the collection: dev2 fails in the second batch
    _previous(),
    Step(command=lambda ctx: ctx.ansible),
    _fault("dev2", True),
    _fleet(command=_status(_PLAYBOOK), block=3, show=_RECAP),
    _fault("dev2", False),
    _fleet(command=_status(_PLAYBOOK), block=4, show=keep(
        lambda _, line: line.startswith(("PLAY RECAP", "dev", "(exit")))),
    _previous(" --limit dev0"),  # dev0 back on the other release: check mode shows the change
    _fleet(command=_status(f"{_PLAYBOOK} --check --diff --limit dev0"), block=5,
           show=keep(lambda _, line: line.startswith(("TASK [edge.fleet.rollout : Install",
                                                      "---", "+++", "@@", "-", "+")))),
    Step(command="unset ANSIBLE_COLLECTIONS_PATH ANSIBLE_PIPELINING ANSIBLE_FORKS "
                 "ANSIBLE_NOCOLOR ANSIBLE_SSH_CONTROL_PATH_DIR ANSIBLE_SSH_ARGS"),
    # what the ansible engine would run, provisioning and choosing on the device
    _fleet(command="edge deploy digits.onnx --inventory pis.yml --engine ansible --provision "
                   "--on-device --canary 1 --dry-run", block=6),
    # both engines, not staged, the same fault
    _previous(),
    _fault("dev2", True),
    _fleet(command=_status(f"edge deploy v2.bundle {_PLAIN}"), block=7),
    _fleet(command=_status(f"edge deploy v2.bundle {_PLAIN} --engine ansible"), block=7,
           gap=True),
    # staged with the ansible engine
    _previous(),
    _fleet(command=_status(f"edge deploy v2.bundle {_STAGED} --engine ansible --dry-run"),
           block=8),
    _fleet(command=_status(f"edge deploy v2.bundle {_STAGED} --engine ansible"), block=8,
           gap=True),
    _fleet(command=_status(f"edge deploy v2.bundle {_STAGED} --max-fail 1 --engine ansible"),
           block=8, gap=True),
    _fault("dev2", False),
    _fleet(command=_status(f"edge deploy v2.bundle {_STAGED} --engine ansible"), block=8,
           gap=True),
])

#: Console blocks of docs/fleet.md this session shows, ahead of the Mender section's.
BLOCKS = 1 + max(step.block for step in SESSION.steps if step.block is not None)
