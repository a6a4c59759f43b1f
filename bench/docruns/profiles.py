"""One session for docs/profiles.md and the pages of `edge profiles list|show|validate|schema`."""

from __future__ import annotations

from pathlib import Path

from . import files
from .models import DOCS_DIR
from .steps import Session, head_tail, json_lists, keep, on_page, only, sections

KITCHEN_PI = "extends: my-pi.yaml\naccess:\n  host: kitchen-pi.local\n"
LAB_PI = "extends: rpi4\naccess:\n  host: 127.0.0.1\n  port: 1\n"
SHOWN = ("compute", "memory", "runtimes", "access")


def _files(work: Path) -> None:
    files.digits(work)
    files.write(work, {"my-pi.yaml": files.MY_PI, "kitchen-pi.yaml": KITCHEN_PI,
                       "lab-pi.yaml": LAB_PI, **files.BAD_PROFILES})


_G = on_page("docs/profiles.md")
_L = on_page("docs/commands/profiles-list.md")
_SC = on_page("docs/commands/profiles-schema.md")
_SH = on_page("docs/commands/profiles-show.md")
_V = on_page("docs/commands/profiles-validate.md")
_BAD = " ".join(name for name in files.BAD_PROFILES if name != "b.yaml")
_LISTED = ("pixel-8", "rpi4 ", "rpi5", "x86-64")
_BENCH = only("measured", "candidate", "latency", "power")
_POWER = only("power")

GUIDE = [
    _G(command="edge optimize sample:digits --profile my-pi.yaml -o mypi.bundle"),
    _G(command="edge profiles validate my-pi.yaml", block=0),
    _G(command="edge profiles show my-pi.yaml", block=0, show=sections(*SHOWN, first_lines=4)),
    _G(command="edge deploy model.onnx --profile my-pi.yaml --host kitchen-pi.local --dry-run",
       block=0),
    _G(command="edge deploy mypi.bundle --profile kitchen-pi.yaml --dry-run", block=1),
    _G(command="edge deploy mypi.bundle --profile lab-pi.yaml      # access: {host: 127.0.0.1, "
               "port: 1}", block=1, tty=True),
    _G(command="edge deploy mypi.bundle --dry-run", block=2),
    _G(command="edge bench mypi.bundle --runs 5", block=3, show=_BENCH),
    _G(command="edge bench mypi.bundle --profile my-pi.yaml --runs 5", block=3, show=_POWER),
    _G(command="cat broken.yaml", block=4),
    _G(command=f"edge profiles validate {_BAD}", block=4),
    _G(command="echo $?", block=4),
    _G(command="edge profiles validate broken.yaml --json", block=5),
]

COMMANDS = [
    _L(command="edge profiles list", block=0,
       show=keep(lambda i, line: i < 5 or line.startswith(_LISTED))),
    _L(command="edge profiles list --json", block=0, gap=True,
       show=json_lists(profiles=(1, 0))),
    _SC(command="edge profiles schema > profile.schema.json", block=0),
    _SC(command="edge profiles schema | head -5", block=0),
    _SH(command="edge profiles show rpi4", block=0, show=sections(*SHOWN, first_lines=4)),
    _SH(command="edge profiles show rpi9", block=1),
    _V(command="edge profiles validate profiles/*.yaml", block=0, cwd=files.ROOT,
       show=head_tail(1, 1)),
    _V(command="edge profiles validate my-pi.yaml broken.yaml", block=0, gap=True),
    _V(command="echo $?", block=0),
]

SESSION = Session(name="profiles", docs=(
    "docs/profiles.md", "docs/commands/profiles-list.md", "docs/commands/profiles-schema.md",
    "docs/commands/profiles-show.md", "docs/commands/profiles-validate.md"),
    workdir=DOCS_DIR / "profiles", files=_files, steps=[*GUIDE, *COMMANDS])
