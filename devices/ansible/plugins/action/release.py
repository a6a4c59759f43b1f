"""edge.fleet.release, the controller half: reads the bundle with edge (installed beside
ansible-core), asks the device what it lacks, sends only that (and edge's agent when it is not
there), then lets the module install, check, benchmark and switch on the device.

``provision``: first edge's provisioning installs the bundle's runtime into WORK/venv over this
task's connection, and that venv's python runs the agent. ``on_device``: the module installs
and times every faithful candidate, edge chooses among the timings here (as ``edge deploy
--on-device``; more rounds of the contenders are more module calls) and the module installs
that one as above (plugin_utils/edge_choice.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

try:  # edge beside ansible-core: without it, _edge_plan says how to install it
    from ..plugin_utils.connection_transport import ConnectionTransport, label_of
    from ..plugin_utils.edge_choice import (
        bench_options,
        candidates,
        choose,
        device_benches,
        provision,
        round_ms,
    )
except ImportError:
    pass

MODULE = "edge.fleet.release"
_INTERNAL = ("_phase", "_release", "_artifact", "_planned", "_main", "_files",
             "_agent_name", "_agent_sha256", "_agent_src", "_candidates", "_bench")


def _edge_plan(bundle: str) -> dict[str, Any]:
    """The bundle's chosen artifact: release id, candidate, files (local path, sha256, name)."""
    try:
        from devices.release import release_files, slot_of_bundle
        from edge.core.bundle import read_bundle
        from edge.core.errors import EdgeError, first_line
        from edge.core.files import only_regular_files
    except ImportError as exc:
        raise AnsibleActionFail(f"edge is not installed beside ansible-core ({exc}): "
                                "pip install 'edge[fleet]' into ansible's python") from None
    root = Path(bundle).expanduser()
    try:
        only_regular_files(root, "bundle")  # a FIFO in it would block its reader for ever
        bundle_read = read_bundle(root)
        chosen = bundle_read.chosen_result()
    except (EdgeError, OSError) as exc:
        raise AnsibleActionFail(f"bundle {bundle}: {first_line(exc)}") from None
    if chosen is None or chosen.artifact is None:
        raise AnsibleActionFail(f"bundle {bundle} has no chosen candidate (none kept fidelity)")
    files = release_files(root, chosen.artifact)
    return {"release": chosen.artifact.release_id[:16], "artifact": chosen.artifact.candidate.id,
            "planned": chosen.artifact.planned, "main": files[-1][2],
            "files": [(str(p), sha, name) for p, sha, name in files],
            "name": slot_of_bundle(bundle_read), "root": root, "bundle": bundle_read}


def _agent() -> tuple[Path, str]:
    """edge's agent .pyz on this host and its sha256."""
    import hashlib

    from devices.agentfile import agent_file

    path = agent_file()
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


class ActionModule(ActionBase):
    """Probe, send what is missing, apply (check mode: probe and say)."""

    TRANSFERS_FILES = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = {k: v for k, v in self._task.args.items() if k not in _INTERNAL}
        state = args.get("state", "present")
        try:
            if state == "present":
                result.update(self._present(args, task_vars or {}))
            else:
                result.update(self._other(args, task_vars or {}))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def _module(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)

    def _present(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        if not args.get("bundle"):
            raise AnsibleActionFail("state=present needs bundle: the edge bundle directory")
        plan = _edge_plan(str(args["bundle"]))
        agent, agent_sha = _agent()
        args = {**args, "bundle": None, "name": _name(args.get("name")) or plan["name"],
                "_agent_name": agent.name, "_agent_sha256": agent_sha}
        extra = self._provisioned(args, plan, task_vars) if args.get("provision") else {}
        args["python"] = extra.get("python", args.get("python"))
        if args.get("on_device"):
            return {**extra, **self._fastest(args, plan, agent, task_vars)}
        return {**extra, **self._chosen({**args, **_release_args(plan)}, plan["files"], agent,
                                        task_vars)}

    def _chosen(self, args: dict[str, Any], files: list[tuple[str, str, str]], agent: Path,
                task_vars: dict[str, Any]) -> dict[str, Any]:
        """The bundle's chosen candidate (``args``' release; ``files`` here: path, sha256,
        name): what the device lacks sent, then applied, unless it is current already."""
        release = args["_release"]
        probe = self._module({**args, "_phase": "probe"}, task_vars)
        if probe.get("failed"):
            return probe
        done = (probe["current"] == release and not probe["missing"]
                and probe.get("claimed", True))
        if done or self._task.check_mode:
            return {"release": release if not done else probe["current"],
                    "previous": probe["current"], "name": args["name"],
                    "candidate": args["_artifact"], "changed": not done,
                    "diff": _diff(probe["current"], release), "would_send": probe["missing"],
                    "pruned": []}
        args["_files"] = [self._send(local, sha, name, probe["missing"])
                          for local, sha, name in files]
        return self._apply(self._with_agent(args, agent, probe), probe, task_vars)

    def _apply(self, args: dict[str, Any], probe: dict[str, Any],
               task_vars: dict[str, Any]) -> dict[str, Any]:
        """The module installs ``args``' release, checks, benchmarks and switches to it."""
        applied = self._module({**args, "_phase": "apply"}, task_vars)
        if applied.get("failed"):  # it fails before the switch: still on the release it ran
            return {**applied, "current": probe["current"]}
        applied["ansible_facts"] = {"edge_release": _facts(applied)}
        applied["diff"] = (_diff(probe["current"], args["_release"]) if applied.get("changed")
                           else {})
        return applied

    def _with_agent(self, args: dict[str, Any], agent: Path,
                    probe: dict[str, Any]) -> dict[str, Any]:
        """``args`` with edge's agent sent along when the device lacks it."""
        if probe["agent_present"]:
            return args
        sent = self._send(str(agent), args["_agent_sha256"], agent.name, [agent.name])
        return {**args, "_agent_src": sent["src"]}

    def _provisioned(self, args: dict[str, Any], plan: dict[str, Any],
                     task_vars: dict[str, Any]) -> dict[str, Any]:
        """The bundle's runtime in WORK/venv (check mode: only said); that venv's python."""
        if self._task.check_mode:
            return {"provision": {"would_install": True}}
        transport = ConnectionTransport(self, self._label(task_vars))
        return provision(transport, plan["bundle"], python=str(args.get("python") or "python3"),
                         work_dir=str(args.get("work_dir") or "~/.edge"))

    def _fastest(self, args: dict[str, Any], plan: dict[str, Any], agent: Path,
                 task_vars: dict[str, Any]) -> dict[str, Any]:
        """Every faithful candidate sent and timed on the device; edge's choice applied."""
        every = candidates(plan["root"], plan["bundle"])
        args = {**args, "_candidates": [_wired(c) for c in every]}
        probe = self._module({**args, "_phase": "probe"}, task_vars)
        if probe.get("failed"):
            return probe
        if self._task.check_mode:
            return {"changed": True, "release": probe["current"], "previous": probe["current"],
                    "name": args["name"], "would_measure": [c["artifact"] for c in every],
                    "pruned": []}
        lacking = probe["candidates_missing"]
        args["_candidates"] = [_wired(c, [self._send(local, sha, name, lacking[c["release"]])
                                         for local, sha, name in c["files"]]) for c in every]
        args = self._with_agent(args, agent, probe)
        measured = self._module({**args, "_phase": "measure",
                                 "_bench": bench_options(args["runs"], args["warmup"])},
                                task_vars)
        if measured.get("failed"):
            return {**measured, "current": probe["current"]}
        return self._activate({**args, "_agent_src": None}, plan, every, measured, probe,
                              task_vars)

    def _activate(self, args: dict[str, Any], plan: dict[str, Any],
                  every: list[dict[str, Any]], measured: dict[str, Any],
                  probe: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        """edge's choice among the device's timings, installed, checked and switched to."""
        warnings: list[str] = []
        try:
            chosen, report = self._choose(args, plan, measured, task_vars, warnings)
        except AnsibleActionFail as exc:  # none within the budget: the candidates go again
            self._module({**args, "state": "pruned", "_phase": "apply"}, task_vars)
            return {"failed": True, "msg": exc.message, "current": probe["current"]}
        entry = next(c for c in every if c["artifact"] == chosen.candidate.id)
        applied = self._apply({**args, **_release_args(entry), "_candidates": []}, probe,
                              task_vars)
        if not applied.get("failed"):
            applied["changed"] = (applied.get("previous") != applied.get("release")
                                  or bool(measured.get("sent")))
        return {**applied, **report, "warnings": [*applied.get("warnings", ()), *warnings]}

    def _choose(self, args: dict[str, Any], plan: dict[str, Any], measured: dict[str, Any],
                task_vars: dict[str, Any], warnings: list[str]) -> tuple[Any, dict[str, Any]]:
        """edge's choice among the timings the module replied, and what the task reports."""
        where = self._label(task_vars)
        warnings += [f"{where}: {key} dropped out: {why}" for key, why in measured["dropped"]]
        benches = device_benches(measured["benches"], where, warnings)
        runtimes = args.get("runtimes") or plan["bundle"].profile_spec.get("runtimes") or ()
        return choose(plan["bundle"], benches, how=measured["how"], where=where,
                      budget_ms=args.get("latency_budget_ms"),
                      budget_name=str(args.get("latency_budget_name") or "latency_budget_ms"),
                      runtimes=runtimes, more=self._more(args, task_vars, warnings))

    def _more(self, args: dict[str, Any], task_vars: dict[str, Any], warnings: list[str]
              ) -> Callable[[Sequence[str], int], dict[str, tuple[float, ...]]]:
        """More interleaved rounds of some candidates: one more module call each time."""
        def more(ids: Sequence[str], count: int) -> dict[str, tuple[float, ...]]:
            subset = [c for c in args["_candidates"] if c["artifact"] in ids]
            reply = self._module({**args, "_phase": "more", "_candidates": subset,
                                  "_bench": bench_options(args["runs"], args["warmup"], count)},
                                 task_vars)
            if reply.get("failed"):
                warnings.append(f"no more rounds of {', '.join(ids)} ({reply.get('msg')}): "
                                "chosen from the rounds run")
                return {}
            return round_ms(reply["benches"])
        return more

    def _label(self, task_vars: dict[str, Any]) -> str:
        """This host as edge names a device: ssh://user@host:port."""
        try:
            port = int(self._connection.get_option("port") or 22)
        except (KeyError, AnsibleError, TypeError, ValueError):
            port = 22
        return label_of(str(self._get_remote_user() or "?"),
                        str(self._get_remote_addr(task_vars)), port)

    def _send(self, local: str, sha: str, name: str, missing: list[str]) -> dict[str, Any]:
        """One file into the remote tmp dir when the device lacks it."""
        entry: dict[str, Any] = {"name": name, "sha256": sha}
        if name in missing:
            remote = self._connection._shell.join_path(self._connection._shell.tmpdir,
                                                       f"{sha[:16]}-{name}")
            self._transfer_file(local, remote)
            self._fixup_perms2((self._connection._shell.tmpdir, remote), execute=False)
            entry["src"] = remote
        return entry

    def _other(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        """rolled_back / pruned: the agent must be there already (a deploy put it there)."""
        agent, _ = _agent()
        args = {**args, "bundle": None, "_agent_name": agent.name,
                "name": _name(args.get("name"))}
        probe = self._module({**args, "_phase": "probe"}, task_vars)
        if probe.get("failed"):
            return probe
        if not probe["agent_present"]:
            agent_sha = _agent()[1]
            if self._task.check_mode:
                return {"failed": True, "msg": "no edge release on this device (no agent)"}
            args["_agent_src"] = self._send(str(agent), agent_sha, agent.name,
                                            [agent.name])["src"]
            args["_agent_sha256"] = agent_sha
        applied = self._module({**args, "_phase": "apply"}, task_vars)
        if not applied.get("failed") and applied.get("changed"):
            applied["diff"] = _diff(applied.get("previous"), applied.get("release"))
        return applied


def _release_args(entry: dict[str, Any]) -> dict[str, Any]:
    """The module's arguments for one release of ``entry`` (the plan, or a candidate)."""
    return {"_release": entry["release"], "_artifact": entry["artifact"], "_main": entry["main"],
            "_planned": entry.get("planned", ""),
            "_files": [{"name": n, "sha256": s} for _, s, n in entry["files"]]}


def _wired(candidate: dict[str, Any], files: list[dict[str, Any]] | None = None
           ) -> dict[str, Any]:
    """A candidate as the module takes it: its files by name and sha256 (and ``src`` once
    sent)."""
    return {**{k: candidate[k] for k in ("release", "artifact", "runtime", "main")},
            "files": files if files is not None
            else [{"name": n, "sha256": s} for _, s, n in candidate["files"]]}


def _name(name: Any) -> str | None:
    """A task's slot name, checked as edge checks --name (none: None)."""
    if name in (None, ""):
        return None
    from devices.release import check_name
    from edge.core.errors import EdgeError

    try:
        return check_name(str(name))
    except EdgeError as exc:
        raise AnsibleActionFail(f"name: {exc}") from None


def _diff(before: str | None, after: str | None) -> dict[str, str]:
    return {"before_header": "current release", "after_header": "current release",
            "before": f"current: {before or 'none'}\n", "after": f"current: {after or 'none'}\n"}


def _facts(applied: dict[str, Any]) -> dict[str, Any]:
    """The device's numbers, as host facts."""
    return {k: applied.get(k) for k in ("release", "previous", "candidate", "p50_ms", "health",
                                         "transfer")}
