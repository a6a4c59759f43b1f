#!/usr/bin/python
"""edge.fleet.release, the device half: drives edge's agent (the .pyz the action plugin pushed)
with the device's python, under its deploy lock. Python 3.8, stdlib only."""

DOCUMENTATION = r"""
---
module: release
short_description: Install, check, benchmark and activate an edge release on a device
description:
  - Installs the chosen artifact of an edge bundle with edge's on-device agent. Only the files
    the device lacks are sent, each checked by sha256 on the device.
  - The release is health-checked (loaded and run once) and benchmarked on the device, then
    C(current) is switched to it atomically; any failure before the switch leaves the current
    release as it was.
  - C(state=rolled_back) switches back to the previous release (or O(to)) after its health
    check; C(state=pruned) removes old releases beyond O(keep).
  - Each model has its own slot on the device (O(name)): its current release and rollback,
    beside the other models there, as C(edge deploy --name) keeps them.
  - With O(on_device), every faithful candidate the device has a runtime for is installed
    (not activated) and timed there in one interleaved benchmark; edge chooses among them on the
    controller as C(edge deploy --on-device) does, and that one is then installed as above.
  - With O(provision), the bundle's runtime is first installed into C(WORK/venv) on the device
    from wheels fetched on the controller (pip --no-index on the device: it needs no internet),
    and that venv's python runs edge's agent.
  - Every change holds the device's deploy lock: a concurrent C(edge deploy) fails at once.
  - The controller half (an action plugin) reads the bundle, so edge must be installed beside
    ansible-core (C(pip install edge[fleet])).
version_added: "0.1.0"
author: edge
options:
  state:
    description: What to make true on the device.
    type: str
    choices: [present, rolled_back, pruned]
    default: present
  bundle:
    description: The edge bundle directory on the controller (O(state=present)).
    type: path
  work_dir:
    description: edge's work directory on the device.
    type: str
    default: "~/.edge"
  python:
    description: The device python that runs edge's agent (default the module's own).
    type: str
  runs:
    description: Timed calls of the benchmark on the device.
    type: int
    default: 10
  warmup:
    description: Untimed calls before each timed block.
    type: int
    default: 2
  threads:
    description: Inference threads (0 all cores).
    type: int
    default: 0
  keep:
    description: Releases kept after a switch, or by O(state=pruned) (the active one and the
      rollback target are never removed).
    type: int
    default: 3
  to:
    description: The release to roll back to (O(state=rolled_back)); default the previous one.
    type: str
  name:
    description: The model's slot on the device (letters, digits, C(._-)). Default with
      O(state=present) the stem of the bundle's model file, as C(edge deploy); otherwise the
      work dir's own slot (the device's first model).
    type: str
  on_device:
    description: Time every faithful candidate of the bundle on the device and activate the one
      edge chooses from those timings (O(state=present)), as C(edge deploy --on-device);
      false installs the bundle's chosen candidate.
    type: bool
    version_added: "1.1.0"
    default: false
  provision:
    description: First install the runtime of the bundle's chosen candidate (or of the first
      faithful one that can be provisioned) and numpy into C(WORK/venv) from wheels fetched on
      the controller, and run edge's agent with that venv's python (O(state=present)).
    type: bool
    version_added: "1.1.0"
    default: false
  latency_budget_ms:
    description: With O(on_device), only candidates whose median latency on the device is
      within this many ms compete; none within it fails the task and activates nothing.
    type: float
    version_added: "1.1.0"
  latency_budget_name:
    description: How messages name O(latency_budget_ms).
    type: str
    version_added: "1.1.0"
    default: latency_budget_ms
  runtimes:
    description: With O(on_device), the runtimes in the order that breaks a tie between
      candidates as fast as each other (default the bundle's profile's order).
    type: list
    version_added: "1.1.0"
    elements: str
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Deploy the bundle's chosen artifact
  edge.fleet.release:
    bundle: /srv/bundles/digits-rpi4.bundle
    runs: 20

- name: Install its runtime first, time every candidate there, activate edge's choice
  edge.fleet.release:
    bundle: /srv/bundles/digits-rpi4.bundle
    provision: true
    on_device: true

- name: Roll back to the previous release
  edge.fleet.release:
    state: rolled_back

- name: Keep two releases
  edge.fleet.release:
    state: pruned
    keep: 2
"""

RETURN = r"""
release:
  description: The release current on the device now.
  returned: always
  type: str
name:
  description: The model's slot on the device the task worked on.
  returned: always
  type: str
previous:
  description: The release current before this task.
  returned: always
  type: str
current:
  description: The release the device still runs after a failed install (it was not switched).
  returned: failed state=present
  type: str
candidate:
  description: The candidate (runtime and precision) the release holds.
  returned: state=present
  type: str
p50_ms:
  description: The median latency the device measured.
  returned: when the release was installed and benchmarked
  type: float
health:
  description: The health check (load_ms, run_ms, runtime).
  returned: when a release was health-checked
  type: dict
bench:
  description: The agent's benchmark reply (per-model results, device, metrics).
  returned: when the release was benchmarked
  type: dict
transfer:
  description: Files sent and reused (files_sent, bytes_sent, files_reused, bytes_reused).
  returned: state=present
  type: dict
compared:
  description: With O(on_device), each candidate timed on the device (candidate, bench), as
    C(edge deploy --on-device --json) reports them.
  returned: when candidates were timed on the device
  type: list
  elements: dict
reason:
  description: With O(on_device), why edge chose the candidate it activated.
  returned: when candidates were timed on the device
  type: str
contest:
  description: With O(on_device), the rounds and the spread behind the choice (none when one
    candidate was timed).
  returned: when candidates were timed on the device
  type: dict
python:
  description: With O(provision), the venv's python that ran edge's agent.
  returned: when the runtime was provisioned
  type: str
provision:
  description: What provisioning did (runtime, runtime_version, venv, files_sent,
    files_reused, installed).
  returned: when O(provision) is true
  type: dict
pruned:
  description: Releases removed.
  returned: always
  type: list
  elements: str
"""

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys

from ansible.module_utils.basic import AnsibleModule

ARGS = dict(
    state=dict(type="str", default="present", choices=["present", "rolled_back", "pruned"]),
    bundle=dict(type="path"),
    work_dir=dict(type="str", default="~/.edge"),
    python=dict(type="str"),
    runs=dict(type="int", default=10),
    warmup=dict(type="int", default=2),
    threads=dict(type="int", default=0),
    keep=dict(type="int", default=3),
    to=dict(type="str"),
    name=dict(type="str"),
    on_device=dict(type="bool", default=False),
    provision=dict(type="bool", default=False),
    latency_budget_ms=dict(type="float"),
    latency_budget_name=dict(type="str", default="latency_budget_ms"),
    runtimes=dict(type="list", elements="str"),
    _phase=dict(type="str", default="probe", choices=["probe", "apply", "measure", "more"]),
    _candidates=dict(type="list", elements="dict", default=[]),
    _bench=dict(type="list", elements="str", default=[]),
    _release=dict(type="str"),
    _artifact=dict(type="str"),
    _planned=dict(type="str", default=""),
    _main=dict(type="str"),
    _files=dict(type="list", elements="dict", default=[]),
    _agent_name=dict(type="str"),
    _agent_sha256=dict(type="str"),
    _agent_src=dict(type="str"),
)


class Failed(Exception):
    """A device step failed: the module fails with this message."""


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


HEX = frozenset("0123456789abcdef")
SLOT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._-")


def plain_slot(text):
    """A slot name as edge's agent takes one: lowercase letters, digits, ._-; <= 64."""
    return (isinstance(text, str) and 0 < len(text) <= 64 and set(text) <= SLOT_CHARS
            and text[0] not in ".-")


def top(work):
    """The work dir's own slot as the agent's ``slots.top`` reads it: (state, model name)."""
    try:
        with open(os.path.join(work, "history.json"), encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        data = {}
    except (OSError, ValueError) as exc:
        raise Failed(f"cannot read {work}/history.json: {exc}") from None
    entries = data.get("activations", []) if isinstance(data, dict) else []
    history = [e for e in entries if isinstance(e, dict) and isinstance(e.get("release"), str)
               and 0 < len(e["release"]) <= 64 and set(e["release"]) <= HEX]
    if any("slot" in e for e in history):
        name = next((e["slot"] for e in reversed(history) if "slot" in e), None)
        return "named", name if plain_slot(name) else None
    used = bool(history) or os.path.islink(os.path.join(work, "current"))
    return ("old" if used else "empty"), None


def slot_dir(work, name):
    """Where a model's slot keeps ``current``, as the agent's ``slots.slot_dir`` says."""
    if not name or name == "default":
        return work
    if not plain_slot(name):
        raise Failed(f"bad slot name {name!r}: lowercase letters, digits and ._-")
    named = os.path.join(work, "slots", name)
    state, held = top(work)
    if name == held or (state != "named" and not os.path.lexists(named)):
        return work
    return named


def slot_args(params):
    """The agent's ``--slot NAME`` when the task names a slot."""
    return ["--slot", params["name"]] if params["name"] else []


def active(work, name=None):
    """The release the slot's ``current`` points to, or None."""
    try:
        target = os.readlink(os.path.join(slot_dir(work, name), "current"))
    except OSError:
        return None
    head, release = os.path.split(target.rstrip("/"))
    if os.path.basename(head) != "releases" or not release or not set(release) <= HEX:
        return None
    return release


def has(path, sha):
    return os.path.isfile(path) and not os.path.islink(path) and sha256_file(path) == sha


class Agent:
    """edge's agent on this device: one command per call, one JSON reply."""

    def __init__(self, python, path, work):
        self.python, self.path, self.work = python, path, work
        self.holder = None

    def call(self, *args):
        done = subprocess.run([self.python, self.path, *args], capture_output=True, text=True,
                              check=False)
        lines = done.stdout.strip().splitlines()
        try:
            reply = json.loads(lines[-1])
        except (IndexError, ValueError):
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise Failed(f"agent {args[0]} failed (exit {done.returncode}): {tail}") from None
        if done.returncode != 0 or "error" in reply:
            raise Failed(str(reply.get("error", f"agent {args[0]} failed")))
        return reply

    def lock(self, what):
        """Take the device's deploy lock (busy: Failed, naming the holder)."""
        by = f"ansible@{socket.gethostname()} pid {os.getpid()}"
        self.holder = subprocess.Popen(
            [self.python, self.path, "hold", self.work, "--by", by, "--what", what],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.holder.stdout.readline()
        try:
            reply = json.loads(line)
        except ValueError:
            reply = {"error": "the agent could not take the deploy lock "
                     f"({line.strip() or 'no answer'})"}
        if "error" in reply:
            self.unlock()
            raise Failed(str(reply["error"]))

    def unlock(self):
        if self.holder is not None:
            self.holder.stdin.close()
            self.holder.wait()
            self.holder = None


def place(src, sha, dest, incoming):
    """Copy an upload into incoming/ (beside its destination), check it, rename it there."""
    tmp = os.path.join(incoming, f"{os.path.basename(dest)}.{os.urandom(4).hex()}.partial")
    shutil.copyfile(src, tmp)
    if sha256_file(tmp) != sha:
        os.unlink(tmp)
        raise Failed(f"checksum mismatch for {os.path.basename(dest)}")
    os.replace(tmp, dest)


def lacking(work, release, files):
    """The names of a release's files the device lacks (or holds with another sha256)."""
    folder = os.path.join(work, "releases", release or "none")
    return [f["name"] for f in files if not has(os.path.join(folder, f["name"]), f["sha256"])]


def probe(params, work):
    """What the device holds: its current release, the agent, the release files it lacks."""
    missing = lacking(work, params["_release"], params["_files"])
    each = {c["release"]: lacking(work, c["release"], c["files"]) for c in params["_candidates"]}
    agent = os.path.join(work, "agent", params["_agent_name"] or "none")
    name = params["name"]
    folder = slot_dir(work, name)
    # the work dir's own slot not yet recorded as this model's: the apply must claim it
    claimed = folder != work or not name or name == "default" or top(work) == ("named", name)
    return dict(work=work, current=active(work, name), missing=missing, claimed=claimed,
                candidates_missing=each, agent_present=os.path.isfile(agent), changed=False)


def prepare(params, work):
    """Work dirs made and the agent in place (sent by the controller when missing)."""
    for sub in ("agent", "incoming", "releases"):
        os.makedirs(os.path.join(work, sub), exist_ok=True)
    path = os.path.join(work, "agent", params["_agent_name"])
    if params["_agent_src"]:
        place(params["_agent_src"], params["_agent_sha256"], path, os.path.join(work, "incoming"))
    return Agent(params["python"] or sys.executable, path, work)


def install(agent, release, files):
    """A release's files sent installed (each sha256-checked by the agent), the others found
    in place; how many were sent."""
    folder = os.path.join(agent.work, "releases", release)
    sent = 0
    for entry in files:
        dest = os.path.join(folder, entry["name"])
        if entry.get("src"):
            name = f"{entry['sha256'][:16]}.{os.urandom(4).hex()}.partial"
            tmp = os.path.join(agent.work, "incoming", name)
            shutil.copyfile(entry["src"], tmp)
            agent.call("install", tmp, dest, "--sha256", entry["sha256"])
            sent += 1
        elif not os.path.isfile(dest):
            raise Failed(f"release {release}: {entry['name']} is gone from the device since "
                         "it was probed (another deploy pruned it?): run the task again")
    return sent


def deploy(params, agent):
    """Install the files sent, health-check, benchmark, activate, prune."""
    release, work = params["_release"], agent.work
    folder = os.path.join(work, "releases", release)
    sent = install(agent, release, params["_files"])
    reused = len(params["_files"]) - sent
    model = os.path.join(folder, params["_main"])
    checked = health(agent, model, release)
    bench = agent.call("bench", model, "--runs", str(params["runs"]), "--warmup",
                       str(params["warmup"]), "--threads", str(params["threads"]))
    entry = bench["results"][0]
    if "error" in entry:
        raise Failed(f"release {release} could not be benchmarked: {entry['error']}")
    check_planned(release, dict(entry.get("observed") or {}, planned=params["_planned"] or ""))
    previous = agent.call("activate", work, release, "--artifact", params["_artifact"],
                          *slot_args(params))
    return dict(release=release, name=previous.get("slot"), previous=previous.get("previous"),
                candidate=params["_artifact"], health=checked, bench=bench,
                p50_ms=entry.get("p50_ms"), transfer=dict(files_sent=sent, files_reused=reused),
                pruned=prune(agent, params["keep"]), changed=True)


#: What must not compute a candidate planned int8 / fp32 (edge.core.observed's rule).
WRONG = {"int8": {"f64", "f32", "bf16", "f16"}, "fp32": {"bf16", "f16"}}


def check_planned(release, observed, share=0.1):
    """Failed when more than ``share`` of the work (MACs, else layers) ran away from the unit
    the artifact was made for, or (of the MACs) in float where int8 was planned or below f32
    where fp32 was (edge.core.observed.Observed.fell_back's rule)."""
    layers, unit = observed.get("layers") or [], observed.get("made_for")
    macs, wrong = any(x.get("macs") for x in layers), WRONG.get(observed.get("planned"), ())
    weights = [((x.get("macs") or 0) if macs else 1, x) for x in layers]
    total = sum(w for w, _ in weights)
    away = sum(w for w, x in weights if unit and x.get("unit") != unit)
    low = sum(w for w, x in weights if macs and x.get("precision") in wrong)
    if not observed.get("why_not") and total and max(away, low) / total > share:
        raise Failed(f"release {release} fell back: {max(away, low) / total:.0%} of its work "
                     "ran off its plan's unit or precision; the host keeps its current release")


def model_of(work, candidate):
    return os.path.join(work, "releases", candidate["release"], candidate["main"])


def measure(params, agent):
    """Every candidate the device has a runtime for installed (not activated) and timed in
    one interleaved bench, or one after another when they cannot run together."""
    have = set(agent.call("probe").get("runtimes") or {})
    usable = [c for c in params["_candidates"] if c["runtime"] in have]
    if not usable:
        need = ", ".join(sorted({c["runtime"] for c in params["_candidates"]}))
        raise Failed(f"the device has no runtime for this bundle (needs one of {need}; has "
                     f"{', '.join(sorted(have)) or 'none'}): install one into the device's "
                     "python, e.g. pip install ai-edge-litert, onnxruntime or openvino")
    installed, dropped, sent = [], [], 0
    for candidate in usable:
        try:
            sent += install(agent, candidate["release"], candidate["files"])
        except Failed as exc:  # this candidate does not reach the device; others compete
            dropped.append([candidate["artifact"], str(exc)])
            continue
        installed.append(candidate)
    if not installed:
        raise Failed(dropped[0][1])
    benches, how = timed(params, agent, installed, dropped)
    return dict(benches=benches, how=how, dropped=dropped, sent=sent, changed=sent > 0)


def timed(params, agent, candidates, dropped):
    """The bench replies ([{ids, reply}]) and how the candidates were timed; each that
    failed alone added to ``dropped``."""
    try:
        return [bench(params, agent, candidates)], "in one interleaved bench"
    except Failed:
        if len(candidates) < 2:
            raise
    benches = []
    for candidate in candidates:
        try:
            benches.append(bench(params, agent, [candidate]))
        except Failed as exc:  # it fails alone too: it drops out
            dropped.append([candidate["artifact"], str(exc)])
    if not benches:
        raise Failed("no candidate could be benchmarked on the device")
    return benches, "one after another (not together: they failed in one bench)"


def bench(params, agent, candidates):
    """One agent bench of ``candidates`` with the controller's options."""
    models = [model_of(agent.work, c) for c in candidates]
    reply = agent.call("bench", *models, *params["_bench"], "--threads", str(params["threads"]))
    return dict(ids=[c["artifact"] for c in candidates], reply=reply)


def health(agent, model, release):
    try:
        return agent.call("health", "--model", model)
    except Failed as exc:
        raise Failed(f"release {release} failed its health check and was not activated; the "
                     f"current release is unchanged ({exc})") from None


def prune(agent, keep):
    try:
        return agent.call("prune", agent.work, "--keep", str(keep))["removed"]
    except Failed:  # the release is current already: a prune left undone is no failure
        return []


def rollback(params, agent, check):
    """Back to the previous release (or ``to``), after its health check."""
    state = agent.call("releases", agent.work, *slot_args(params))
    used = [x["slot"] for x in state.get("slots", ()) if x.get("active")]
    if not params["name"] and len(used) > 1:
        raise Failed(f"the device holds {len(used)} models ({', '.join(used)}): give name")
    now, target = state.get("active"), params["to"] or state.get("previous")
    if target is None:
        raise Failed(f"no previous release to roll back to (active: {now or 'none'})")
    found = [r for r in state["releases"] if r["release"].startswith(target) and r["complete"]]
    if len(found) != 1:
        raise Failed(f"release {target} is not installed (or is ambiguous)")
    target = found[0]["release"]
    result = dict(release=target, previous=now, changed=target != now, pruned=[],
                  name=state.get("slot"))
    if check or target == now:
        return result
    result["health"] = health(agent, found[0]["model"], target)
    agent.call("rollback", agent.work, "--to", target, *slot_args(params))
    return result


def pruned(params, agent, check):
    """Old releases beyond ``keep`` removed (never the active one or the rollback target)."""
    if check:
        state = agent.call("releases", agent.work, *slot_args(params))
        keep = {r for s in state.get("slots", ()) for r in (s.get("active"), s.get("previous"))}
        keep = (keep | {state.get("active"), state.get("previous")}) - {None}
        names = [r["release"] for r in state["releases"]]
        extra = [n for n in names if n not in keep]
        gone = extra[max(0, params["keep"] - len(keep)):]
        return dict(release=state.get("active"), previous=state.get("active"),
                    pruned=gone, changed=bool(gone), name=state.get("slot"))
    removed = agent.call("prune", agent.work, "--keep", str(params["keep"]))["removed"]
    now = active(agent.work, params["name"])
    return dict(release=now, previous=now, pruned=removed, changed=bool(removed),
                name=params["name"] or "default")


def apply(params, work, check):
    """One state made true under the deploy lock (check mode: only said)."""
    agent = prepare(params, work) if not check else Agent(
        params["python"] or sys.executable,
        os.path.join(work, "agent", params["_agent_name"]), work)
    what = "measurement" if params["_phase"] in ("measure", "more") else {
        "present": "deploy", "rolled_back": "rollback", "pruned": "prune"}[params["state"]]
    if not check:
        agent.lock(what)
    try:
        if params["_phase"] == "measure":
            return measure(params, agent)
        if params["_phase"] == "more":
            return dict(benches=[bench(params, agent, params["_candidates"])], changed=False)
        if params["state"] == "present":
            return deploy(params, agent)
        if params["state"] == "rolled_back":
            return rollback(params, agent, check)
        return pruned(params, agent, check)
    finally:
        agent.unlock()


def main():
    module = AnsibleModule(argument_spec=ARGS, supports_check_mode=True)
    params = module.params
    work = os.path.expanduser(params["work_dir"])
    try:
        if params["_phase"] == "probe":
            module.exit_json(**probe(params, work))
        module.exit_json(**apply(params, work, module.check_mode))
    except (Failed, OSError) as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
