"""``edge profiles list|show|validate|schema``: the device catalog and the profile schema."""

from __future__ import annotations

import json
from pathlib import Path

import click

from edge.cli.common import PATH, json_option
from edge.cli.output import emit
from edge.core.errors import EdgeError, ExitStatus
from edge.core.tables import table

__all__ = ["profiles"]


@click.group()
def profiles() -> None:
    """List, show, validate device profiles and print their schema.

    \b
    Example:
      edge profiles show rpi4
    """


@profiles.command("list")
@json_option
def profiles_list(as_json: bool) -> None:
    """List the shipped device profiles.

    \b
    Example:
      edge profiles list --json
    """
    from edge.core.profile import catalog_ids, load_profile

    items = [load_profile(i) for i in catalog_ids()]
    rows = [(p.id, p.name, f"{p.compute.cores} cores: {p.compute.cpu}", f"{p.memory.ram_mb} MB",
             " > ".join(p.runtimes)) for p in items]
    listed = [{"id": p.id, "name": p.name, "runtimes": list(p.runtimes)} for p in items]
    emit(as_json, {"profiles": listed}, table(("id", "name", "cpu", "ram", "runtimes"), rows))


@profiles.command("show")
@click.argument("name")
@json_option
def profiles_show(name: str, as_json: bool) -> None:
    """Show a profile (a catalog id or a file, with extends: resolved).

    \b
    Example:
      edge profiles show my-pi.yaml
    """
    import yaml

    from edge.core.profile import load_profile

    profile = load_profile(name)
    emit(as_json, profile.to_json(), yaml.safe_dump(profile.to_json(), sort_keys=False).rstrip())


@profiles.command("validate")
@click.argument("files", nargs=-1, required=True, type=PATH)
@json_option
def profiles_validate(files: tuple[Path, ...], as_json: bool) -> int:
    """Validate profile files; name the file and key of every error.

    \b
    Example:
      edge profiles validate profiles/*.yaml
    """
    results = [_validated(file) for file in files]
    if as_json:
        emit(True, {"files": results}, "")
    else:
        for r in results:
            click.echo(f"ok     {r['file']} ({r['id']})" if r["ok"] else f"error: {r['error']}",
                       err=not r["ok"])
    return int(ExitStatus.BAD_INPUT) if any(not r["ok"] for r in results) else 0


def _validated(file: Path) -> dict[str, object]:
    from edge.core.profile import validate_file

    try:
        return {"file": str(file), "ok": True, "id": validate_file(file).id}
    except EdgeError as exc:
        return {"file": str(file), "ok": False, "error": str(exc)}


@profiles.command("schema")
def profiles_schema() -> None:
    """Print the JSON Schema of profile files.

    \b
    Example:
      edge profiles schema > profile.schema.json
    """
    from edge.core.profile import profile_schema

    click.echo(json.dumps(profile_schema(), indent=2))
