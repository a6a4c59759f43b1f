"""edge.fleet.release, the controller half: reads the bundle with edge (installed beside
ansible-core), asks the device what it lacks, sends only that (and edge's agent when it is not
there), then lets the module install, check, benchmark and switch on the device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

MODULE = "edge.fleet.release"
_INTERNAL = ("_phase", "_release", "_artifact", "_main", "_files", "_agent_name",
             "_agent_sha256", "_agent_src")


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
            "main": files[-1][2], "files": [(str(p), sha, name) for p, sha, name in files],
            "name": slot_of_bundle(bundle_read)}


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
                "_release": plan["release"], "_artifact": plan["artifact"],
                "_main": plan["main"], "_agent_name": agent.name, "_agent_sha256": agent_sha,
                "_files": [{"name": n, "sha256": s} for _, s, n in plan["files"]]}
        probe = self._module({**args, "_phase": "probe"}, task_vars)
        if probe.get("failed"):
            return probe
        done = (probe["current"] == plan["release"] and not probe["missing"]
                and probe.get("claimed", True))
        summary = {"release": plan["release"], "previous": probe["current"], "name": args["name"],
                   "candidate": plan["artifact"], "changed": not done,
                   "diff": _diff(probe["current"], plan["release"])}
        if done or self._task.check_mode:
            return {**summary, "release": plan["release"] if not done and
                    self._task.check_mode else probe["current"],
                    "would_send": probe["missing"], "pruned": []}
        args["_files"] = [self._send(local, sha, name, probe["missing"])
                          for local, sha, name in plan["files"]]
        if not probe["agent_present"]:
            args["_agent_src"] = self._send(str(agent), agent_sha, agent.name, [agent.name])["src"]
        applied = self._module({**args, "_phase": "apply"}, task_vars)
        if applied.get("failed"):  # it fails before the switch: still on the release it ran
            return {**applied, "current": probe["current"]}
        applied["ansible_facts"] = {"edge_release": _facts(applied)}
        applied["diff"] = summary["diff"] if applied.get("changed") else {}
        return applied

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
