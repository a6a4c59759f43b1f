"""Write the reference answers the inventory tests compare against, with ansible-core itself.

    pip install 'ansible-core==2.19.14'   # into a scratch venv: edge does not depend on it
    python tests/devices/inventories/regenerate.py

For each inventory file here, ``ansible-inventory -i FILE --list`` goes to ``FILE.json``
(groups, children and every host's merged vars), and for each --limit pattern in
``limits.json``, the hosts ``ansible all -i nested.yml --limit PATTERN --list-hosts`` selects.
Only the yaml and ini inventory plugins are enabled, as edge reads only those formats.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = ("nested.yml", "groups.ini", "shapes.yml", "shapes.ini", "hosts", "inventory")
LIMITS = ("all", "cameras", "outdoor", "sensor-a", "sensor-a,lonely", "sensors:outdoor",
          "cameras,!outdoor", "!cameras", "cameras,&sensors", "cam0*", "sens*", "~cam0[12]",
          "~am0", " cameras , !cam0? , sensor-a ", "*", "cam*:&sensors")


def _run(*argv: str, home: str, check: bool = True) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": home, "ANSIBLE_INVENTORY_ENABLED": "yaml,ini",
           "ANSIBLE_CONFIG": str(Path(home) / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    tool = Path(sys.executable).parent / argv[0]
    done = subprocess.run([str(tool if tool.exists() else shutil.which(argv[0])), *argv[1:]],
                          env=env, cwd=HERE, capture_output=True, text=True, check=check)
    return done.stdout if done.returncode == 0 else ""  # no host matched


def _listed(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines()[1:] if line.strip()]


def main() -> None:
    with tempfile.TemporaryDirectory() as home:
        (Path(home) / "ansible.cfg").write_text("")  # no user or system settings
        version = _run("ansible", "--version", home=home).splitlines()[0]
        for name in FILES:
            data = json.loads(_run("ansible-inventory", "-i", name, "--list", home=home))
            data["_generated_by"] = version
            (HERE / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        limits = {p: _listed(_run("ansible", "all", "-i", "nested.yml", "--limit", p,
                                  "--list-hosts", home=home, check=False)) for p in LIMITS}
    (HERE / "limits.json").write_text(json.dumps({"_generated_by": version, "nested.yml": limits},
                                                 indent=1) + "\n")


if __name__ == "__main__":
    main()
