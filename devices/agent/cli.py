"""The agent's command line: one command per call, one JSON document on stdout.

    python3 edge_agent.pyz probe
    python3 edge_agent.pyz install SRC DEST --sha256 HEX
    python3 edge_agent.pyz verify WORK_DIR RELEASE --file NAME=HEX [--file NAME=HEX ...]
    python3 edge_agent.pyz health --model MODEL [--threads N]
    python3 edge_agent.pyz activate WORK_DIR RELEASE [--artifact NAME] [--slot NAME]
    python3 edge_agent.pyz rollback WORK_DIR [--to RELEASE] [--slot NAME]
    python3 edge_agent.pyz releases WORK_DIR [--slot NAME]
    python3 edge_agent.pyz prune WORK_DIR [--keep N]
    python3 edge_agent.pyz hold WORK_DIR --by TEXT [--what TEXT]   (until stdin closes)
    python3 edge_agent.pyz space WORK_DIR
    python3 edge_agent.pyz bench MODEL [MODEL ...] [--runs N] [--warmup N] [--threads N]
                                 [--rounds N] [--idle-s S] [--budget-s S] [--min-rounds N]
                                 [--no-observe]
    python3 edge_agent.pyz corun --jobs JSON [--seconds S] [--max-wait-s S] [--no-alone]
    python3 edge_agent.pyz activate-pack WORK_DIR --set SLOT=RELEASE[:ARTIFACT] [--set ...]
    python3 edge_agent.pyz profile --model MODEL.onnx [--threads N] [--runs N]   (onnxruntime)
    python3 edge_agent.pyz perf --model MODEL.xml [--threads N] [--runs N]       (openvino)

The runtimes' own commands (profile, perf) come from their agent modules (``runtimes``).

Exit status: 0 ok, 2 bad request, 3 runtime missing or failed. Errors are JSON {"error": ...}.
"""

import argparse
import json

from . import bench, corun, hold, info, releases, runtimes
from .errors import AgentError


def main(argv=None):
    """Parse the command line, run one command, print its JSON; the exit status."""
    args = parser().parse_args(argv)
    try:
        result = args.func(args)
    except AgentError as exc:
        print(json.dumps({"error": str(exc)}))
        return exc.status
    print(json.dumps(result))
    return 0


def entry():
    """``main`` as the program: never a traceback to the host, always JSON."""
    try:
        return main()
    except Exception as exc:  # noqa: BLE001 - last resort
        print(json.dumps({"error": f"agent crashed: {type(exc).__name__}: {exc}"}))
        return 3


def parser():
    """Every command and its options."""
    top = argparse.ArgumentParser(prog="edge_agent")
    sub = top.add_subparsers(required=True)
    _command(sub, "probe", info.cmd_probe)
    _command(sub, "install", releases.cmd_install, "src", "dest").add_argument(
        "--sha256", required=True)
    _command(sub, "verify", releases.cmd_verify, "work_dir", "release").add_argument(
        "--file", action="append", default=[], metavar="NAME=SHA256")
    activate = _command(sub, "activate", releases.cmd_activate, "work_dir", "release")
    activate.add_argument("--artifact", default=None)
    rollback = _command(sub, "rollback", releases.cmd_rollback, "work_dir")
    rollback.add_argument("--to", default=None)
    listed = _command(sub, "releases", releases.cmd_releases, "work_dir")
    for command in (activate, rollback, listed):
        command.add_argument("--slot", default=None, help="the model's slot [default]")
    _command(sub, "prune", releases.cmd_prune, "work_dir").add_argument("--keep", type=int,
                                                                        default=3)
    held = _command(sub, "hold", hold.cmd_hold, "work_dir")
    held.add_argument("--by", required=True, help="who takes the lock (user@host pid N)")
    held.add_argument("--what", default="deploy", help="what holds it (deploy, rollback)")
    _command(sub, "space", hold.cmd_space, "work_dir")
    health = _command(sub, "health", bench.cmd_health)
    health.add_argument("--model", required=True)
    health.add_argument("--threads", type=int, default=0)
    _bench(_command(sub, "bench", bench.cmd_bench))
    _corun(sub)
    _command(sub, "activate-pack", releases.cmd_activate_pack, "work_dir").add_argument(
        "--set", action="append", default=[], metavar="SLOT=RELEASE[:ARTIFACT]")
    for name, func, runs, threads in _runtime_commands():
        command = _command(sub, name, func)
        command.add_argument("--model", required=True)
        command.add_argument("--threads", type=int, default=threads)
        command.add_argument("--runs", type=int, default=runs)
    return top


def _runtime_commands():
    """The commands the runtimes add (``COMMANDS`` of their agent modules: profile, perf)."""
    return [c for plugin in runtimes.plugins().values() for c in plugin.COMMANDS]


def _command(sub, name, func, *positional):
    command = sub.add_parser(name)
    for arg in positional:
        command.add_argument(arg)
    command.set_defaults(func=func)
    return command


def _bench(command):
    command.add_argument("models", nargs="+", metavar="MODEL")
    command.add_argument("--runs", type=int, default=50, help="timed calls of each model")
    command.add_argument("--warmup", type=int, default=5, help="untimed calls before a block")
    command.add_argument("--threads", type=int, default=0, help="0: all cores")
    command.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    command.add_argument("--idle-s", type=float, default=0.02, help="idle gap before a block")
    command.add_argument("--budget-s", type=float, default=None, help="fewer rounds if over")
    command.add_argument("--min-rounds", type=int, default=1, help="fewest rounds in budget")
    command.add_argument("--no-observe", action="store_true",
                         help="do not read what ran each layer (observe.py) after the rounds")



def _corun(sub):
    command = _command(sub, "corun", corun.cmd_corun)
    command.add_argument("--jobs", required=True, help="JSON list of the models and their plan")
    command.add_argument("--seconds", type=float, default=5.0, help="of each phase")
    command.add_argument("--max-wait-s", type=float, default=1.0, help="a frame older: dropped")
    command.add_argument("--warmup", type=int, default=5, help="untimed calls after loading")
    command.add_argument("--no-alone", dest="alone", action="store_false",
                         help="only together, not each model alone first")
    one = _command(sub, "corun-one", corun.cmd_corun_one)
    one.add_argument("--model", required=True)
    one.add_argument("--threads", type=int, default=0)
    one.add_argument("--cores", default=None)
    one.add_argument("--unit", default="cpu")
    one.add_argument("--warmup", type=int, default=5)
