"""SSH transport on paramiko: key auth, known_hosts verification (unknown hosts refused unless
the user opts in), every remote command quoted."""

from __future__ import annotations

import contextlib
import logging
import re
import select
import shlex
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devices.transport import Completed, Session
from edge.core import progress
from edge.core.errors import DeviceError, UsageError

if TYPE_CHECKING:
    import paramiko

__all__ = ["HostSpec", "SSHTransport", "parse_host"]

log = logging.getLogger("edge")
_USER = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,31}$")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")
_DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
#: The most a command's stdout may send (an agent's largest reply is far smaller), and the
#: part of its stderr kept (the rest is read and dropped: it only explains a failure).
MAX_STDOUT = 64 << 20
MAX_STDERR = 1 << 20


@dataclass(frozen=True, kw_only=True, slots=True)
class HostSpec:
    """Where to connect: user, host, port."""

    user: str
    host: str
    port: int = 22

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}:{self.port}"


def parse_host(text: str, *, default_user: str | None = None) -> HostSpec:
    """Parse ``USER@HOST[:PORT]`` (IPv6 as ``[ADDR]``); reject anything that is not a name."""
    user, at, rest = text.rpartition("@")
    if not at:
        user, rest = default_user or "", text
    host, port = _split_port(rest, text)
    if not _USER.fullmatch(user):
        raise UsageError(f"--host {text!r}: give USER@HOST[:PORT] with a plain user name")
    if not (_HOST.fullmatch(host) or _is_ipv6(host)):
        raise UsageError(f"--host {text!r}: '{host}' is not a valid host name or address")
    return HostSpec(user=user, host=host, port=port)


def _split_port(rest: str, text: str) -> tuple[str, int]:
    if rest.startswith("["):
        host, closed, tail = rest[1:].partition("]")
        if not closed or (tail and not tail.startswith(":")):
            raise UsageError(f"--host {text!r}: an IPv6 address goes in [brackets], then "
                             "an optional :PORT")
        port_text = tail[1:]
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
    else:
        host, port_text = rest, ""
    if not port_text:
        return host, 22
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(f"--host {text!r}: port must be a number from 1 to 65535")
    return host, int(port_text)


def _is_ipv6(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6, host)
    except OSError:
        return False
    return True


class SSHTransport:
    """A lazily opened SSH connection (a context manager)."""

    is_local = False

    def __init__(
        self,
        spec: HostSpec,
        *,
        identity: Path | None = None,
        known_hosts: Path | None = None,
        trust_new_host: bool = False,
        timeout: float = 15.0,
        io_timeout: float = 60.0,
    ) -> None:
        self.spec = spec
        self.label = f"ssh://{spec}"
        self.identity = identity.expanduser() if identity else None
        self.known_hosts = (known_hosts or _DEFAULT_KNOWN_HOSTS).expanduser()
        self.trust_new_host = trust_new_host
        self.timeout = timeout  # connect, authenticate, open a channel
        self.io_timeout = io_timeout  # an SFTP request (open, write, close, stat) unanswered
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        if self.identity is not None and not self.identity.is_file():
            raise UsageError(f"--identity {self.identity}: no such key file")
        if known_hosts is not None and not self.known_hosts.is_file() and not trust_new_host:
            raise UsageError(f"--known-hosts {self.known_hosts}: no such file "
                             "(pass --trust-new-host to create it with the device's key)")

    def _connect(self) -> paramiko.SSHClient:
        if self._client is not None:
            return self._client
        paramiko = _paramiko()
        client = paramiko.SSHClient()
        if self.known_hosts.is_file():
            self._load_host_keys(client)
        client.set_missing_host_key_policy(
            _RecordNewHost(self.known_hosts) if self.trust_new_host else paramiko.RejectPolicy())
        try:
            client.connect(
                self.spec.host, port=self.spec.port, username=self.spec.user,
                key_filename=str(self.identity) if self.identity else None,
                look_for_keys=self.identity is None, allow_agent=self.identity is None,
                timeout=self.timeout, banner_timeout=self.timeout, auth_timeout=self.timeout,
                channel_timeout=self.timeout)
        except Exception as exc:  # noqa: BLE001 - translated to one line for the user
            client.close()
            raise self._translate(exc) from None
        self._client = client
        return client

    def _load_host_keys(self, client: paramiko.SSHClient) -> None:
        """known_hosts read by paramiko; a file it cannot read (binary, bad lines) is one line."""
        try:
            client.load_host_keys(str(self.known_hosts))
        except (UnicodeDecodeError, ValueError, OSError, _paramiko().SSHException) as exc:
            raise UsageError(f"--known-hosts {self.known_hosts}: not a readable known_hosts "
                             f"file ({type(exc).__name__}); fix or remove it") from None

    def _translate(self, exc: Exception) -> Exception:
        paramiko = _paramiko()
        where = f"{self.spec.host}:{self.spec.port}"
        if isinstance(exc, paramiko.BadHostKeyException):
            return DeviceError(
                f"host key of {where} does not match {self.known_hosts} (possible attack, or "
                f"the device was reinstalled: check it, then ssh-keygen -R '[{self.spec.host}]:"
                f"{self.spec.port}' -f {self.known_hosts})")
        if isinstance(exc, paramiko.AuthenticationException):
            key = self.identity or "your default keys/agent"
            return DeviceError(f"authentication failed for {self.spec.user}@{where} with {key}: "
                               "check --identity and the device's authorized_keys")
        if isinstance(exc, paramiko.SSHException) and "known_hosts" in str(exc):
            return DeviceError(
                f"unknown host key for {where}: not in {self.known_hosts}; add it "
                "(ssh-keyscan) or pass --trust-new-host to record it")
        if isinstance(exc, (OSError, paramiko.SSHException)):
            return DeviceError(f"cannot connect to {where}: {exc}")
        return DeviceError(f"ssh to {where} failed: {type(exc).__name__}: {exc}")

    def _sftp_client(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            client = self._connect()
            try:
                self._sftp = client.open_sftp()
            except (OSError, _paramiko().SSHException) as exc:
                raise DeviceError(f"{self.label}: cannot open SFTP ({_reason(exc)})") from None
            channel = self._sftp.get_channel()
            if channel is not None:
                channel.settimeout(self.io_timeout)  # no SFTP request waits for ever
        return self._sftp

    def home(self) -> str:
        """The remote user's home directory."""
        try:
            return self._sftp_client().normalize(".")
        except (OSError, _paramiko().SSHException) as exc:
            raise DeviceError(f"{self.label}: cannot read the home directory "
                              f"({_reason(exc)})") from None

    def run(self, argv: list[str], *, timeout: float = 600.0) -> Completed:
        """Run argv on the device; every argument is shell-quoted. Its output is bounded
        before it is kept (MAX_STDOUT, MAX_STDERR) and the whole command by ``timeout``: a
        device that talks for ever or without end is one DeviceError, not edge's memory."""
        client = self._connect()
        try:
            ssh = client.get_transport()
            if ssh is None:
                raise EOFError("not connected")
            channel = ssh.open_session(timeout=self.timeout)
            channel.exec_command(shlex.join(argv))
            out, err = _drain(channel, time.monotonic() + timeout, self.label)
            status = channel.recv_exit_status()
        except (OSError, EOFError, _paramiko().SSHException) as exc:
            raise DeviceError(f"{self.label}: command failed ({_reason(exc)})") from None
        return Completed(status=status, stdout=out.decode("utf-8", "replace"),
                         stderr=err.decode("utf-8", "replace"))

    def start(self, argv: list[str], *, timeout: float = 30.0) -> Session:
        """Run argv on its own channel until its stdin closes: when this process dies (kill -9
        included) or the connection drops, sshd closes that stdin."""
        client = self._connect()
        try:
            ssh = client.get_transport()
            if ssh is None:
                raise EOFError("not connected")
            channel = ssh.open_session(timeout=self.timeout)
            channel.settimeout(timeout)
            channel.exec_command(shlex.join(argv))
        except (OSError, EOFError, _paramiko().SSHException) as exc:
            raise DeviceError(f"{self.label}: command failed ({_reason(exc)})") from None
        return _SSHSession(channel, self.label, timeout)

    def put(self, local: Path, remote: str) -> None:
        """Upload a file over SFTP (a bytes bar while progress is shown).

        The copy runs in a worker thread: Ctrl-C or SIGTERM drops the connection at once
        (``abort``) instead of waiting in paramiko's close of the remote file, which can block
        for minutes; an unanswered SFTP request fails after ``io_timeout``.
        """
        sftp = self._sftp_client()
        with progress.transfer(f"uploading {local.name} to {self.spec.host}",
                               local.stat().st_size) as bar:
            error = _in_worker(lambda: sftp.put(str(local), remote, callback=bar.sent),
                               self.abort)
        if error is None:
            return
        if isinstance(error, TimeoutError):
            self.abort()  # a stalled connection: the next command opens a new one
        raise DeviceError(f"{self.label}: upload of {local.name} failed ({_reason(error)})")

    def abort(self) -> None:
        """Drop the connection now, without a goodbye: its socket is shut down and closed,
        so any thread blocked on it returns (the device sees the connection end)."""
        client, self._client, self._sftp = self._client, None, None
        ssh = client.get_transport() if client is not None else None
        if ssh is not None:
            with contextlib.suppress(Exception):
                ssh.sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(Exception):
                ssh.close()

    def exists(self, remote: str) -> bool:
        """Whether a remote path exists."""
        try:
            self._sftp_client().lstat(remote)
        except FileNotFoundError:
            return False
        except (OSError, _paramiko().SSHException) as exc:
            raise DeviceError(f"{self.label}: cannot stat {remote} ({_reason(exc)})") from None
        return True

    def mkdir(self, remote: str) -> None:
        """Create a remote directory and its parents."""
        sftp = self._sftp_client()
        path = ""
        for part in remote.strip("/").split("/"):
            path = f"{path}/{part}"
            try:
                self._mkdir_one(sftp, path)
            except (OSError, _paramiko().SSHException) as exc:
                raise DeviceError(f"{self.label}: cannot make {path} ({_reason(exc)})") from None

    def _mkdir_one(self, sftp: paramiko.SFTPClient, path: str) -> None:
        try:
            if not stat.S_ISDIR(sftp.stat(path).st_mode or 0):
                raise DeviceError(f"{self.label}: {path} exists and is not a directory")
        except FileNotFoundError:
            sftp.mkdir(path)

    def close(self) -> None:
        """Close SFTP and the connection."""
        sftp, self._sftp = self._sftp, None
        if sftp is not None:
            with contextlib.suppress(Exception):  # a dead connection has nothing to close
                sftp.close()
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> SSHTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _SSHSession:
    """A command on its own SSH channel: stdout lines, each awaited at most ``timeout``."""

    def __init__(self, channel: paramiko.Channel, label: str, timeout: float) -> None:
        self.channel = channel
        self.label = label
        self.timeout = timeout
        self.stdout = channel.makefile("rb")

    def readline(self) -> str:
        try:
            return self.stdout.readline().decode("utf-8", "replace")
        except TimeoutError:
            raise DeviceError(f"{self.label}: no answer from the device in "
                              f"{self.timeout:.0f} s") from None
        except (OSError, EOFError, _paramiko().SSHException) as exc:
            raise DeviceError(f"{self.label}: command failed ({_reason(exc)})") from None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.channel.shutdown_write()  # the command reads end of file
        with contextlib.suppress(Exception):
            self.channel.close()


def _in_worker(work: Callable[[], object], abort: Callable[[], None]) -> BaseException | None:
    """Run ``work`` in a daemon thread and wait for it; what it raised (None if nothing).
    Interrupted while waiting (Ctrl-C, SIGTERM): ``abort`` (which unblocks the worker), then
    the interrupt goes on."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            failed.append(exc)

    worker = threading.Thread(target=run, name="edge-upload", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
    except BaseException:
        abort()
        raise
    return failed[0] if failed else None


def _drain(channel: Any, deadline: float, label: str) -> tuple[bytes, bytes]:
    """The command's stdout and (the first MAX_STDERR bytes of) its stderr, read as they come
    until it closes both; a DeviceError past ``deadline`` or MAX_STDOUT."""
    out, err = bytearray(), bytearray()
    while not (channel.exit_status_ready() and channel.eof_received and _quiet(channel)):
        if time.monotonic() > deadline:
            channel.close()
            raise DeviceError(f"{label}: a command was still running at its time limit")
        if not _quiet(channel) or select.select([channel], [], [], 0.5)[0]:
            out += channel.recv(1 << 16) if channel.recv_ready() else b""
            chunk = channel.recv_stderr(1 << 16) if channel.recv_stderr_ready() else b""
            err += chunk[:max(0, MAX_STDERR - len(err))]
        if len(out) > MAX_STDOUT:
            channel.close()
            raise DeviceError(f"{label}: a command sent more than {MAX_STDOUT >> 20} MB of "
                              "output (no reply of edge's agent is that long)")
    return bytes(out), bytes(err)


def _quiet(channel: Any) -> bool:
    return not (channel.recv_ready() or channel.recv_stderr_ready())


def _reason(exc: BaseException) -> str:
    """An SSH/SFTP failure in words ("timed out" rather than an empty message)."""
    if isinstance(exc, TimeoutError):
        return "the device stopped answering: timed out"
    return str(exc).strip() or type(exc).__name__


def _paramiko():
    try:
        import paramiko
    except ImportError:
        raise UsageError("SSH deploys need paramiko: pip install 'edge[ssh]'") from None
    # paramiko's transport thread logs a whole traceback at ERROR when a peer is not an SSH
    # server; edge reports the failure itself, in one line (_translate)
    logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)
    return paramiko


class _RecordNewHost:
    """Missing-host-key policy for --trust-new-host: accept and record the key."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        """Record the key in the known_hosts file and say so (a warning: stderr, and the
        ``--json`` document's warnings)."""
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        client.save_host_keys(str(self.known_hosts))
        log.warning("trusted new host key %s %s for %s, recorded in %s", key.get_name(),
                    key.fingerprint, hostname, self.known_hosts)
