"""Provisioning a device with a registered runtime: the wheels its folder declares
(``Runtime.provision``), installed by ``devices.provision`` offline into the device's venv."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from devices.provision import ProvisionReport, install_runtime
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
    device from wheels fetched on this host (``devices.provision.install_runtime``)."""
    specs = provisionable()
    if runtime not in specs:
        raise UsageError(f"cannot provision runtime {runtime!r}: choose one of "
                         f"{', '.join(specs)}")
    spec = specs[runtime]
    return install_runtime(transport, device_python=device_python, work_dir=work_dir,
                           runtime=runtime, requirements=spec.requirements, module=spec.module,
                           distribution=spec.distribution, host_cache=host_cache,
                           no_deps=spec.no_deps)


def runtime_for_bundle(bundle: Any, runtimes: Iterable[str] = ()) -> str:
    """The runtime to provision for a bundle: its chosen artifact's runtime when provisioning
    can install it, else that of the first faithful candidate it can; ``runtimes`` (what the
    device has already) wins when a faithful candidate can use one of them."""
    have, specs = set(runtimes), provisionable()
    faithful = [c for c in bundle.candidates
                if c.status in ("chosen", "passed") and c.artifact is not None]
    chosen = bundle.chosen_result()
    ordered = ([chosen] if chosen is not None and chosen.artifact is not None else []) + \
        [c for c in faithful if c is not chosen]
    needs = [c.artifact.runtime for c in ordered]
    for runtime in needs:
        if runtime in have and runtime in specs:
            return runtime
    for runtime in needs:
        if runtime in specs:
            return runtime
    raise UsageError(f"no faithful candidate of the bundle uses a runtime that can be "
                     f"provisioned ({', '.join(specs)}); candidates need "
                     f"{', '.join(sorted(set(needs))) or 'nothing'}")
