"""Nothing edge writes into the ansible engine's documents is templated, and the controller
half of the collection never waits on a FIFO (issue 39).

The inventory ``--engine ansible`` writes (edge.flows.fleet_ansible) is read by a real
ansible-playbook whose play prints every var edge sets; each free-text field holds
``{{ lookup('pipe', 'touch MARKER') }}``. Written as edge writes it, every var prints as the text
it is and no marker appears; the same inventory written as plain YAML (the control) makes
ansible run the command: the test can fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from devices.inventory_vars import FleetHost
from edge.core.profile import load_profile
from edge.flows.fleet import FleetJob
from edge.flows.fleet_ansible import _env, _write
from edge.flows.fleet_values import FleetRequest

pytest.importorskip("ansible_runner")

#: The vars of one host that carry free text (the others are validated numbers and names).
FIELDS = ("rollout_bundle", "rollout_work_dir", "ansible_python_interpreter",
          "ansible_ssh_private_key_file")
PLAY = [{"name": "print what edge set", "hosts": "edge", "gather_facts": False,
         "connection": "local",
         "tasks": [{"name": f"show {f}", "ansible.builtin.debug": {"msg": f"{f}=[{{{{ {f} }}}}]"}}
                   for f in FIELDS]}]


def _planted(tmp_path: Path, field: str) -> str:
    return f"/x{{{{ lookup('pipe', 'touch {tmp_path}/ran-{field}') }}}}"


def _written(tmp_path: Path) -> tuple[Path, Path, FleetRequest]:
    """edge's playbook folder with one host whose free-text fields are all template bombs."""
    folder = tmp_path / "run"
    folder.mkdir()
    request = FleetRequest(source=tmp_path / "m.onnx", inventory=tmp_path / "hosts.yml")
    job = FleetJob(host=FleetHost(name="dev1", address="192.0.2.1"),
                   profile=load_profile("rpi4"), user="pi", port=22,
                   identity=Path(_planted(tmp_path, "ansible_ssh_private_key_file")),
                   python=_planted(tmp_path, "ansible_python_interpreter"),
                   work_dir=_planted(tmp_path, "rollout_work_dir"), threads=1)
    bundle = Path(_planted(tmp_path, "rollout_bundle"))
    _, hosts = _write(folder, request, [job], {"rpi4": (None, bundle)})  # type: ignore[dict-item]
    play = folder / "show.yml"
    play.write_text(yaml.safe_dump(PLAY, sort_keys=False))
    return play, hosts, request


def _playbook(play: Path, hosts: Path, request: FleetRequest) -> str:
    """ansible-playbook with edge's settings and an empty ``$HOME``, which stays empty."""
    home = play.parent.parent / "home"
    home.mkdir()
    env = {**_env(play.parent, request), "HOME": str(home)}
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i",
                           str(hosts), str(play)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert list(home.iterdir()) == [], "ansible wrote in $HOME"
    return done.stdout + done.stderr


def test_every_string_edge_writes_for_ansible_is_printed_not_run(tmp_path: Path) -> None:
    play, hosts, request = _written(tmp_path)
    out = _playbook(play, hosts, request)
    assert list(tmp_path.glob("ran-*")) == [], out
    for field in FIELDS:
        assert f"{field}=[{_planted(tmp_path, field)}]" in out, out


def test_the_same_inventory_as_plain_yaml_would_run_the_command(tmp_path: Path) -> None:
    play, hosts, request = _written(tmp_path)
    plain = yaml.safe_load(hosts.read_text().replace("!unsafe ", ""))
    hosts.write_text(yaml.safe_dump(plain, sort_keys=False))
    _playbook(play, hosts, request)
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == sorted(f"ran-{f}" for f in FIELDS)


def test_an_unsafe_python_still_runs_modules(tmp_path: Path) -> None:
    """Marked text is still the value: a module runs with the python edge wrote."""
    folder = tmp_path / "run"
    folder.mkdir()
    request = FleetRequest(source=tmp_path / "m.onnx", inventory=tmp_path / "hosts.yml")
    job = FleetJob(host=FleetHost(name="dev1", address="localhost"), profile=load_profile("rpi4"),
                   user="pi", port=22, identity=None, python=sys.executable,
                   work_dir=str(tmp_path / "work dir"), threads=1)
    _, hosts = _write(folder, request, [job], {"rpi4": (None, tmp_path)})  # type: ignore[dict-item]
    assert "!unsafe" in hosts.read_text()
    play = folder / "run.yml"
    play.write_text(yaml.safe_dump([{
        "hosts": "edge", "gather_facts": False, "connection": "local",
        "tasks": [{"ansible.builtin.command": {"argv": ["mkdir", "-p", "{{ rollout_work_dir }}"]}}],
    }]))
    out = _playbook(play, hosts, request)
    assert (tmp_path / "work dir").is_dir(), out


#: The action plugin's plan of a bundle, in a child: importing ansible patches ``sys.intern``
#: for the whole process, which torch.export (in a later test of the same worker) cannot trace.
_PLAN = """
import sys
from ansible.errors import AnsibleActionFail
from devices.ansible.plugins.action.release import _edge_plan
try:
    _edge_plan(sys.argv[1])
except AnsibleActionFail as exc:
    print("refused:", exc)
"""


def test_the_action_plugin_refuses_a_fifo_in_the_bundle_at_once(tmp_path: Path) -> None:
    """Issue 39: the controller half read a manifest that is a FIFO and waited for ever."""
    bundle = tmp_path / "b.bundle"
    bundle.mkdir()
    os.mkfifo(bundle / "manifest.json")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", _PLAN, str(bundle)], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("refused:") and "not a regular file" in done.stdout, done.stdout
