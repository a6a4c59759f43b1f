"""Provisioning a device with a registered runtime: the wheels its folder declares
(``Runtime.provision``), installed by ``devices.provision`` offline into the device's venv."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from devices.provision import ProvisionReport, install_declared, runtime_to_provision
from devices.transport import Transport
from edge.core.errors import UsageError
from targets import runtimes as registered
from targets.base import Provision

__all__ = ["provision_runtime", "provisionable", "runtime_for_bundle"]


def provisionable() -> dict[str, Provision]:
    """Runtime name -> what provisioning installs, for every runtime that declares it."""
    return {name: r.provision for name, r in registered().items() if r.provision is not None}


def provision_runtime(transport: Transport, *, device_python: str, work_dir: str, runtime: str,
                      host_cache: Path | None = None) -> ProvisionReport:
    """Install ``runtime`` (one that declares its wheels) and numpy into ``WORK/venv`` on the
    device from wheels fetched on this host (``devices.provision.install_declared``)."""
    specs = provisionable()
    if runtime not in specs:
        raise UsageError(f"cannot provision runtime {runtime!r}: choose one of "
                         f"{', '.join(specs)}")
    return install_declared(transport, specs[runtime], device_python=device_python,
                            work_dir=work_dir, runtime=runtime, host_cache=host_cache)


def runtime_for_bundle(bundle: Any, runtimes: Iterable[str] = ()) -> str:
    """The runtime to provision for a bundle (``devices.provision.runtime_to_provision`` among
    the registered runtimes that declare their wheels)."""
    return runtime_to_provision(bundle, provisionable(), runtimes)
