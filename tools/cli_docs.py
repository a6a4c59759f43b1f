"""Keep the Options blocks of docs/commands/*.md in step with the click commands (edge.cli).

Every command page holds one block between ``<!-- options:begin -->`` and
``<!-- options:end -->``, generated from the command's click parameters (the same text as
``edge ... --help``). Run from the repository root:

    python -m tools.cli_docs            # rewrite the blocks in place (or: python tools/cli_docs.py)
    python -m tools.cli_docs --check    # exit 1 if a block is stale or a page is missing
    python -m tools.cli_docs --list     # the command paths and their pages

A page without the markers gets an "Options" section appended. A command without a page is an
error: write docs/commands/<page>.md (at least a title and the markers), then run this again.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python tools/cli_docs.py` from anywhere
    sys.path.insert(0, str(ROOT))

COMMANDS_DIR = ROOT / "docs" / "commands"
BEGIN = "<!-- options:begin -->"
END = "<!-- options:end -->"

__all__ = ["BEGIN", "COMMANDS_DIR", "END", "main", "options_block", "page_for", "walk"]


def root_command() -> click.Command:
    """The ``edge`` click group."""
    from edge.cli import cli

    return cli


def walk(command: click.Command | None = None, path: tuple[str, ...] = (),
         parent: click.Context | None = None) -> Iterator[tuple[tuple[str, ...], click.Command,
                                                                click.Context]]:
    """Every command and group, depth first in name order: (path, command, its context).

    The root is ``()``; ``("profiles", "list")`` is ``edge profiles list``.
    """
    command = command or root_command()
    if parent is None:
        ctx = click.Context(command, info_name="edge", **command.context_settings)
    else:
        ctx = click.Context(command, info_name=path[-1], parent=parent,
                            **command.context_settings)
    yield path, command, ctx
    if isinstance(command, click.Group):
        for name in sorted(command.list_commands(ctx)):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from walk(sub, path + (name,), ctx)


def page_for(path: tuple[str, ...]) -> Path:
    """docs/commands/README.md for ``edge`` itself, else docs/commands/<a-b>.md."""
    return COMMANDS_DIR / ("README.md" if not path else "-".join(path) + ".md")


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    text = " ".join(text.split())
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*")


def options_block(path: tuple[str, ...], command: click.Command, ctx: click.Context) -> str:
    """The generated text between (and including) the markers."""
    name = " ".join(("edge",) + path)
    usage = " ".join([name] + command.collect_usage_pieces(ctx))
    lines = [BEGIN,
             f"<!-- generated from `{name} --help` by `python -m tools.cli_docs`; "
             "edit the command in edge/cli/, not this block -->",
             "",
             f"Usage: `{usage}`",
             ""]
    arguments = [p for p in command.get_params(ctx) if isinstance(p, click.Argument)]
    if arguments:
        described = ", ".join(
            f"`{p.make_metavar(ctx)}`" + (" (repeatable)" if p.nargs == -1 else "")
            + ("" if p.required else " (optional)") for p in arguments)
        lines += [f"Arguments: {described}.", ""]
    records = []
    for param in command.get_params(ctx):
        if isinstance(param, click.Option) and not param.hidden:
            record = param.get_help_record(ctx)
            if record is not None:
                records.append(record)
    lines += ["| option | description |", "|---|---|"]
    lines += [f"| `{_cell(opts)}` | {_cell(text) or ' '} |" for opts, text in records]
    if isinstance(command, click.Group):
        subs = [n for n in command.list_commands(ctx)
                if not (command.get_command(ctx, n) or command).hidden]
        lines += ["", "Commands: " + ", ".join(
            f"[`{n}`]({page_for(path + (n,)).name})" for n in sorted(subs)) + "."]
    lines.append(END)
    return "\n".join(lines)


def _rewrite(text: str, block: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start == -1 or end == -1 or end < start:
        return text.rstrip("\n") + "\n\n## Options\n\n" + block + "\n"
    return text[:start] + block + text[end + len(END):]


def stale_pages() -> tuple[list[str], dict[Path, str]]:
    """(problems, {page: updated text}) over every command."""
    problems: list[str] = []
    updates: dict[Path, str] = {}
    for path, command, ctx in walk():
        page = page_for(path)
        name = " ".join(("edge",) + path)
        rel = page.relative_to(ROOT)
        if not page.exists():
            problems.append(f"{rel}: missing (the page of `{name}`)")
            continue
        text = page.read_text(encoding="utf-8")
        if text.count(BEGIN) > 1 or text.count(END) > 1:
            problems.append(f"{rel}: more than one options block")
            continue
        new = _rewrite(text, options_block(path, command, ctx))
        if new != text:
            problems.append(f"{rel}: options block of `{name}` is stale")
            updates[page] = new
    return problems, updates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.cli_docs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a block is stale or a page is missing")
    parser.add_argument("--list", action="store_true", help="print the commands and their pages")
    args = parser.parse_args(argv)
    if args.list:
        for path, _, _ in walk():
            print(f"{' '.join(('edge',) + path):28} {page_for(path).relative_to(ROOT)}")
        return 0
    problems, updates = stale_pages()
    if args.check:
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print("run: python -m tools.cli_docs", file=sys.stderr)
        return 1 if problems else 0
    for page, text in updates.items():
        page.write_text(text, encoding="utf-8")
        print(f"updated {page.relative_to(ROOT)}")
    missing = [p for p in problems if p.endswith(")") and ": missing" in p]
    for problem in missing:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
