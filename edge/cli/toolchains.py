"""``edge toolchains list|install|remove``: the environments of converters whose pinned
versions clash with edge's own (built once, cached, used for every conversion)."""

from __future__ import annotations

from typing import Any

import click

from edge.cli.common import json_option
from edge.cli.output import emit, stdout_to_stderr
from edge.core.tables import table
from edge.core.units import size_text

__all__ = ["toolchains"]

NAMES = click.argument("names", nargs=-1, required=True, metavar="NAME...")


@click.group()
def toolchains() -> None:
    """List, build and remove the environments of converters whose pins clash with edge's.

    \b
    Example:
      edge toolchains list
    """


@toolchains.command("list")
@json_option
def toolchains_list(as_json: bool) -> None:
    """List the declared toolchains: built or not, where, size, versions.

    \b
    Example:
      edge toolchains list --json
    """
    from edge.flows.toolchains import list_toolchains

    states = list_toolchains()
    emit(as_json, {"toolchains": [s.to_json() for s in states]}, _table(states))


@toolchains.command("install")
@NAMES
@click.option("--dry-run", is_flag=True,
              help="Say which environments would be built and what they would install; build "
                   "nothing.")
@json_option
def toolchains_install(names: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Build the environment of each named toolchain (once; a built one is kept).

    \b
    Examples:
      edge toolchains install rknn-toolkit2 --dry-run
      edge toolchains install rknn-toolkit2
    """
    from edge.flows.toolchains import install_toolchains

    with stdout_to_stderr(as_json):
        states = install_toolchains(names, dry_run=dry_run)
    text = "\n".join(_installed_text(s) for s in states)
    emit(as_json, {"dry_run": dry_run, "toolchains": [s.to_json() for s in states]}, text)


@toolchains.command("remove")
@NAMES
@json_option
def toolchains_remove(names: tuple[str, ...], as_json: bool) -> None:
    """Delete the environment of each named toolchain (built again on next use).

    \b
    Example:
      edge toolchains remove rknn-toolkit2
    """
    from edge.flows.toolchains import remove_toolchains

    states = remove_toolchains(names)
    text = "\n".join(f"{s.action:<8} {s.name} ({s.path})" for s in states)
    emit(as_json, {"toolchains": [s.to_json() for s in states]}, text)


def _table(states: Any) -> str:
    rows = [(s.name, "built" if s.built else "not built",
             "" if s.size_bytes is None else size_text(s.size_bytes), _versions(s.versions),
             s.path) for s in states]
    return table(("name", "state", "size", "versions", "path"), rows)


def _installed_text(state: Any) -> str:
    """One toolchain's install outcome; for a dry run, what it would install."""
    head = f"{state.action} {state.name} in {state.path} ({_versions(state.versions)})"
    if state.action != "would build":
        return head
    return "\n".join([head, *(f"  {r}" for r in state.requirements)])


def _versions(versions: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in versions.items() if k != "toolchain")
