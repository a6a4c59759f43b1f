#!/usr/bin/env python3
"""edge's Mender update module (``edge-release``): Mender's states onto edge's release switch.

Installed on a device as ``/usr/share/mender/modules/v3/edge-release`` (mode 755); the Mender
client calls it as ``edge-release STATE FILES_DIR`` for each payload of type ``edge-release``
(what ``edge export mender`` writes). Standard library only, Python >= 3.8; the release work
is done by edge's agent (shipped in the payload) under the device's python::

    ArtifactInstall     check every payload file's sha256 against edge-release.json; take the
                        device's deploy lock; install the release (only the files it lacks,
                        each checked again by the agent), health-check it (load, run once),
                        switch ``current`` to it; remember the release it replaced in
                        FILES_DIR/tmp/edge-release-state.json
    NeedsArtifactReboot No
    SupportsRollback    Yes
    ArtifactCommit      keep it; prune inactive releases beyond ``edge_keep``
    ArtifactRollback    ``current`` back to the release it replaced (none before: no
                        ``current``); nothing to do when the install never switched
    ArtifactFailure     the same check as ArtifactRollback (the device ends on a whole release)
    Download, Cleanup, other states: nothing (the client stores the files in FILES_DIR/files)

Settings, from the artifact's meta-data (``FILES_DIR/header/meta-data``): ``edge_work_dir``
(edge's work dir, default ``~/.edge`` of the user the client runs as), ``edge_python`` (the
python that runs the agent and the model's runtime, default ``python3``), ``edge_keep``
(releases kept after a commit, default 3). Run as root against a work dir another user owns
(or a new one under a folder they own), everything that touches it runs as that user: the
agent, and the copies into it in a forked child that drops root first (``as_owner``), so the
files stay theirs (``edge deploy`` as them keeps working) and a link of theirs (``~/.edge/agent``
pointing at a root-owned folder) never makes root write there. Errors, malformed meta-data or
edge-release.json included: one line on stderr, exit 1 (the client then rolls back), nothing
changed.
"""

import hashlib
import json
import os
import pwd
import select
import shutil
import signal
import subprocess
import sys

MANIFEST = "edge-release.json"
STATE = "edge-release-state.json"
DEFAULTS = {"edge_work_dir": "~/.edge", "edge_python": "python3", "edge_keep": 3}
AGENT_TIMEOUT_S = 600
HOLD_TIMEOUT_S = 60  # the agent's hold answers (or lets go) at once


class ModuleError(Exception):
    """A state failed: its one-line reason."""


def main(argv):
    """Run one state; the exit status (0 ok, 1 failed, 2 bad call)."""
    if len(argv) != 3:
        sys.stderr.write("usage: edge-release STATE FILES_DIR\n")
        return 2
    state, files_dir = argv[1], argv[2]
    try:
        STATES.get(state, _nothing)(files_dir)
    except ModuleError as exc:
        sys.stderr.write(f"edge-release {state}: {exc}\n")
        return 1
    except OSError as exc:
        sys.stderr.write(f"edge-release {state}: {exc.filename or ''}: {exc.strerror}\n")
        return 1
    except Exception as exc:  # noqa: BLE001 - one line for the client's log, never a traceback
        sys.stderr.write(f"edge-release {state}: {type(exc).__name__}: {exc}\n")
        return 1
    return 0


def _say(text):
    """One line for the client's deployment log (it keeps the module's stderr)."""
    sys.stderr.write(f"edge-release: {text}\n")


def _nothing(files_dir):
    """A state this module has no work in."""


def needs_reboot(files_dir):
    """The switch is a symlink rename: no reboot."""
    print("No")


def supports_rollback(files_dir):
    """The previous release stays installed: rollback is a switch back."""
    print("Yes")


def install(files_dir):
    """Checked files in, health check, then ``current`` switched to the new release."""
    conf, manifest = _settings(files_dir), _manifest(files_dir)
    payload = os.path.join(files_dir, "files")
    _check_payload(payload, manifest)
    _check_release_id(manifest)
    agent = Agent(conf, _install_agent(conf, payload, manifest["agent"]))
    _save_state(files_dir, {"agent": agent.path})
    with agent.deploy_lock("mender install"):
        previous = agent.call("releases", conf["work"]).get("active")
        release = manifest["release"]
        _save_state(files_dir, {"previous": previous, "release": release})
        model = _install_release(agent, conf["work"], payload, manifest)
        health = agent.call("health", "--model", model)
        agent.call("activate", conf["work"], release, "--artifact", manifest["candidate"])
    _say(f"release {release} ({manifest['candidate']}) installed in {conf['work']}, healthy "
         f"({health.get('runtime')}: load {health.get('load_ms', 0):.0f} ms), current "
         f"{previous or 'none'} -> {release}")


def commit(files_dir):
    """Keep the new release; prune old ones (a failed prune is only a warning)."""
    conf = _settings(files_dir)
    agent = Agent(conf, _state(files_dir).get("agent"))
    try:
        pruned = agent.call("prune", conf["work"], "--keep", str(conf["keep"]))
    except ModuleError as exc:
        _say(f"warning: could not prune old releases: {exc}")
        return
    _say(f"committed; pruned {', '.join(pruned.get('removed', ())) or 'nothing'}")


def rollback(files_dir):
    """``current`` back to the release it replaced, if the install switched it."""
    state = _state(files_dir)
    if "previous" not in state:
        return  # the install stopped before it looked at the device: nothing changed
    conf = _settings(files_dir)
    agent = Agent(conf, state["agent"])
    with agent.deploy_lock("mender rollback"):
        active = agent.call("releases", conf["work"]).get("active")
        if active == state["previous"]:
            return
        if state["previous"] is None:
            _remove_current(conf["work"])
        else:
            agent.call("rollback", conf["work"], "--to", state["previous"])
    _say(f"current {active or 'none'} -> {state['previous'] or 'none'} (rolled back)")


# ---------------------------------------------------------------- settings and state


def _settings(files_dir):
    """The work dir, python and keep: the artifact's meta-data over the defaults."""
    meta = _read_json(os.path.join(files_dir, "header", "meta-data"), {})
    if not isinstance(meta, dict):
        raise ModuleError("header/meta-data is not a JSON object; nothing was changed")
    merged = dict(DEFAULTS, **{k: v for k, v in meta.items() if k in DEFAULTS})
    keep = merged["edge_keep"]
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
        raise ModuleError(f"meta-data edge_keep must be an integer >= 1, not {keep!r}; "
                          "nothing was changed")
    for key in ("edge_work_dir", "edge_python"):
        if not isinstance(merged[key], str) or not merged[key].strip() or "\0" in merged[key]:
            raise ModuleError(f"meta-data {key} must be a non-empty string, not "
                              f"{merged[key]!r}; nothing was changed")
    work = os.path.abspath(os.path.expanduser(merged["edge_work_dir"]))
    return {"work": work, "python": os.path.expanduser(merged["edge_python"]), "keep": keep}


def _manifest(files_dir):
    """The payload's edge-release.json: release, candidate, files and the agent."""
    data = _read_json(os.path.join(files_dir, "files", MANIFEST), None)
    if not isinstance(data, dict) or data.get("format") != 1:
        raise ModuleError(f"the payload has no {MANIFEST} of format 1: not an artifact of "
                          "edge export mender")
    wrong = _manifest_fault(data)
    if wrong:
        raise ModuleError(f"{MANIFEST}: {wrong}; nothing was changed")
    return data


def _manifest_fault(data):
    """What is wrong with a manifest's fields (None: nothing)."""
    files, agent = data.get("files"), data.get("agent")
    if not (isinstance(files, dict) and files and all(
            _plain_name(k) and _sha256(v) for k, v in files.items())):
        return "files must map plain file names to sha256 digests"
    if not (isinstance(agent, dict) and _plain_name(agent.get("file"))
            and _sha256(agent.get("sha256"))):
        return "agent must give a plain file name and its sha256"
    release = data.get("release")
    if not (isinstance(release, str) and 0 < len(release) <= 64 and set(release) <= _HEX):
        return "release must be 1-64 lowercase hex digits"
    if not (isinstance(data.get("model"), str) and data["model"] in files
            and isinstance(data.get("candidate"), str)):
        return "model must be one of its files, and candidate a name"
    companions = data.get("companions", [])
    if not (isinstance(companions, list)
            and all(isinstance(c, str) and c in files for c in companions)):
        return "companions must be some of its files"
    return None


_HEX = set("0123456789abcdef")


def _plain_name(name):
    return isinstance(name, str) and name not in ("", ".", "..") and \
        os.path.basename(name) == name and "\0" not in name


def _sha256(text):
    return isinstance(text, str) and len(text) == 64 and set(text) <= _HEX


def _read_json(path, missing):
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return missing
    except OSError as exc:
        raise ModuleError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return json.loads(text) if text.strip() else missing
    except ValueError:
        raise ModuleError(f"{path} is not JSON") from None


def _state(files_dir):
    """What ArtifactInstall recorded ({} if it recorded nothing)."""
    state = _read_json(os.path.join(files_dir, "tmp", STATE), {})
    return state if isinstance(state, dict) else {}


def _save_state(files_dir, update):
    """Merge ``update`` into the state file, atomically (a crash leaves the old or the new)."""
    folder = os.path.join(files_dir, "tmp")
    os.makedirs(folder, exist_ok=True)
    state = dict(_state(files_dir), **update)
    tmp = os.path.join(folder, STATE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, os.path.join(folder, STATE))


# ---------------------------------------------------------------- the payload


def sha256_file(path):
    """Hex sha256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_payload(payload, manifest):
    """Every file the manifest names is in the payload with its sha256 (before any change)."""
    wanted = dict(manifest["files"])
    wanted[manifest["agent"]["file"]] = manifest["agent"]["sha256"]
    for name, sha in sorted(wanted.items()):
        path = os.path.join(payload, name)
        if os.path.basename(name) != name or not os.path.isfile(path):
            raise ModuleError(f"payload file {name} is missing")
        actual = sha256_file(path)
        if actual != sha:
            raise ModuleError(f"payload file {name} does not match its sha256 (got {actual}, "
                              f"want {sha}); nothing was changed")


def _check_release_id(manifest):
    """The release id is the content's (as edge names releases): a manifest naming files of
    other content than its release's would change an installed release, which never changes."""
    main = manifest["files"][manifest["model"]]
    shas = [main] + [manifest["files"][name] for name in manifest.get("companions", [])]
    content = main if len(shas) == 1 else hashlib.sha256("\n".join(shas).encode()).hexdigest()
    if content[:len(manifest["release"])] != manifest["release"]:
        raise ModuleError(f"edge-release.json names release {manifest['release']} for files "
                          f"of release {content[:16]}; nothing was changed")


def _install_agent(conf, payload, agent):
    """The agent under WORK/agent/ (by content, as edge deploy puts it); its path. Made as the
    work dir's owner (as_owner): root never writes through a link of theirs."""
    work = conf["work"]
    with open(os.path.join(payload, agent["file"]), "rb") as source:  # ours: the payload
        return as_owner(owner_of(work), _place_agent, source.fileno(), work, agent)


def _place_agent(source_fd, work, agent):
    """As the owner: the work dir and its folders, then the agent copied in unless there."""
    for sub in ("agent", "incoming", "releases"):
        os.makedirs(os.path.join(work, sub), exist_ok=True)
    final = os.path.join(work, "agent", agent["file"])
    if not (os.path.isfile(final) and sha256_file(final) == agent["sha256"]):
        tmp = os.path.join(work, "incoming", f"{agent['file']}.{os.getpid()}.partial")
        _copy_fd(source_fd, tmp)
        os.replace(tmp, final)
    return final


def _copy_fd(source_fd, path):
    """The open file ``source_fd`` copied to a new file ``path`` (never through a link)."""
    os.lseek(source_fd, 0, os.SEEK_SET)
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(out, "wb") as target, os.fdopen(source_fd, "rb", closefd=False) as source:
        shutil.copyfileobj(source, target, 1 << 20)


def _install_release(agent, work, payload, manifest):
    """The files the release lacks, each through the agent's sha256-checked install, the main
    model last (its presence marks the release complete); the main model's path."""
    release, files, main = manifest["release"], manifest["files"], manifest["model"]
    reply = agent.call("verify", work, release,
                       *[a for name in sorted(files) for a in ("--file", name + "=" + files[name])])
    missing = set(reply.get("missing", ()))
    new = sorted(missing - set(reply.get("names", ())))
    if reply.get("complete") and new:
        raise ModuleError(f"release {release} is installed with other files than "
                          f"{', '.join(new)}; an installed release is never changed")
    folder = os.path.join(work, "releases", release)
    for name in sorted(missing, key=lambda n: (n == main, n)):
        _install_file(agent, work, os.path.join(payload, name), files[name],
                      os.path.join(folder, name))
    return os.path.join(folder, main)


def _install_file(agent, work, source, sha, final):
    """Copy into incoming/ under a fresh name (as the work dir's owner), then the agent checks
    the sha256 and renames."""
    tmp = os.path.join(work, "incoming", f"{sha[:16]}.{os.urandom(4).hex()}.partial")
    try:
        with open(source, "rb") as handle:
            as_owner(agent.owner, _copy_fd, handle.fileno(), tmp)
        agent.call("install", tmp, final, "--sha256", sha)
    finally:
        as_owner(agent.owner, _unlink, tmp)


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _remove_current(work):
    """No release was current before the install: there is none again (as the owner)."""
    as_owner(owner_of(work), _unlink, os.path.join(work, "current"))


# ---------------------------------------------------------------- the agent


def owner_of(work):
    """(uid, gid) of the work dir, or of the nearest folder above it that exists: the entry
    itself (lstat), never what a link there points to."""
    path = work
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    info = os.lstat(path)
    return info.st_uid, info.st_gid


def as_owner(owner, function, *args):
    """``function(*args)`` as ``owner`` when we are root and they are not: in a forked child
    that drops root before touching anything (so a link of theirs never makes root write, read
    or chown outside what they may); its (JSON-able) result, or ModuleError with its reason."""
    if os.geteuid() != 0 or owner[0] == 0:
        return function(*args)
    read, write = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read)
        os.close(write)
        raise ModuleError(f"cannot start the unprivileged step: {exc.strerror}") from None
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read)
        signal.alarm(AGENT_TIMEOUT_S)  # a step that never ends (a huge file of theirs) dies
        os.write(write, json.dumps(_dropped(owner, function, args)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        text = answer.read()
    os.waitpid(pid, 0)
    result = json.loads(text) if text else {"error": "the unprivileged step died"}
    if "error" in result:
        raise ModuleError(result["error"])
    return result["ok"]


def become(owner):
    """Drop root to ``owner`` (uid, gid) with the groups that user has (video, render...: a
    device node the runtime opens), as a login of theirs would."""
    try:
        os.initgroups(pwd.getpwuid(owner[0]).pw_name, owner[1])
    except KeyError:  # no passwd entry: no supplementary groups
        os.setgroups([])
    os.setgid(owner[1])
    os.setuid(owner[0])


def _dropped(owner, function, args):
    """In the child: root dropped to ``owner``, then the function's result or its error."""
    try:
        become(owner)
        return {"ok": function(*args)}
    except ModuleError as exc:
        return {"error": str(exc)}
    except OSError as exc:
        return {"error": f"as uid {owner[0]}: {exc.filename or ''}: {exc.strerror}"}
    except Exception as exc:  # noqa: BLE001 - said as one line by the parent
        return {"error": f"{type(exc).__name__}: {exc}"}


class Agent:
    """edge's agent on this device, run by ``python`` as the work dir's owner."""

    def __init__(self, conf, path):
        if not path:
            raise ModuleError("no agent recorded: ArtifactInstall did not run")
        self.conf, self.path = conf, path
        self.owner = owner_of(conf["work"])

    def call(self, *args):
        """One agent command; its JSON reply (an error reply: ModuleError)."""
        try:
            done = subprocess.run(self.argv(args), capture_output=True, text=True, cwd="/",
                                  timeout=AGENT_TIMEOUT_S, preexec_fn=self.drop_root())
        except OSError as exc:
            raise ModuleError(f"cannot run the agent with {self.conf['python']}: "
                              f"{exc.strerror}") from None
        except subprocess.TimeoutExpired as exc:
            raise ModuleError(f"agent {args[0]}: {exc}") from None
        return self._reply(args[0], done.returncode, done.stdout, done.stderr)

    def deploy_lock(self, what):
        """The device's deploy lock (edge deploy's), held for a ``with`` block."""
        return _Held(self, what)

    def argv(self, args):
        """The command line of one agent command."""
        return [self.conf["python"], self.path] + [str(a) for a in args]

    def drop_root(self):
        """A pre-exec that drops root to the work dir's owner (None when not root)."""
        owner = self.owner
        if os.geteuid() != 0 or owner[0] == 0:
            return None
        return lambda: become(owner)

    @staticmethod
    def _reply(command, status, stdout, stderr):
        lines = stdout.strip().splitlines()
        try:
            reply = json.loads(lines[-1]) if lines else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            detail = (stderr.strip().splitlines() or ["no answer"])[-1]
            raise ModuleError(f"agent {command} failed (exit {status}): {detail}")
        if status != 0 or "error" in reply:
            raise ModuleError(f"agent {command}: {reply.get('error', f'exit {status}')}")
        return reply


class _Held:
    """The agent's ``hold`` running, its stdin open: the deploy lock is ours until closed."""

    def __init__(self, agent, what):
        self.agent, self.what, self.process = agent, what, None

    def __enter__(self):
        work = self.agent.conf["work"]
        try:
            self.process = subprocess.Popen(
                self.agent.argv(("hold", work, "--by", f"mender edge-release pid {os.getpid()}",
                                 "--what", self.what)),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/",
                preexec_fn=self.agent.drop_root())
        except OSError as exc:
            raise ModuleError(f"cannot run the agent with {self.agent.conf['python']}: "
                              f"{exc.strerror}") from None
        if not select.select([self.process.stdout], [], [], HOLD_TIMEOUT_S)[0]:
            self.process.kill()
            self.__exit__()
            raise ModuleError(f"the agent's hold did not answer in {HOLD_TIMEOUT_S} s")
        line = self.process.stdout.readline(65536)
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or "held" not in reply:
            self.__exit__()
            why = reply.get("error") if isinstance(reply, dict) else line.strip() or "no answer"
            raise ModuleError(f"cannot take the deploy lock: {why}")
        return self

    def __exit__(self, *exc):
        self.process.stdin.close()
        try:
            self.process.wait(timeout=HOLD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


STATES = {"ArtifactInstall": install, "ArtifactCommit": commit, "ArtifactRollback": rollback,
          "ArtifactFailure": rollback, "NeedsArtifactReboot": needs_reboot,
          "SupportsRollback": supports_rollback}

if __name__ == "__main__":
    sys.exit(main(sys.argv))
