"""The docs and the CLI agree: examples in every --help, a page per command, every `edge ...`
line in the docs parses, generated option blocks are fresh, relative links resolve.

Fast: nothing is converted or run; command lines are only parsed with click.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _load_cli_docs():
    """tools/ is a plain folder (and other packages install a `tools` too): load by path."""
    spec = importlib.util.spec_from_file_location("edge_tools_cli_docs",
                                                  ROOT / "tools" / "cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cli_docs = _load_cli_docs()
COMMANDS = list(cli_docs.walk())
IDS = [" ".join(("edge",) + path) for path, _, _ in COMMANDS]


def _markdown_files() -> list[Path]:
    return sorted(DOCS.glob("*.md")) + sorted((DOCS / "commands").glob("*.md")) + [
        ROOT / "README.md"]


# ------------------------------------------------------------------ command lines
_REDIRECT = re.compile(r"(?<![\w=/-])\d*(>>|>&|<&|>|<)\s*(&?\d+|\S+)?")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_CONTROL = {"|", "||", "&&", ";", "&"}


def _segments(line: str) -> list[list[str]]:
    """Split one shell line into simple commands (words), dropping redirections and comments."""
    lexer = shlex.shlex(_REDIRECT.sub(" ", line), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    segments: list[list[str]] = [[]]
    for token in lexer:
        if token in _CONTROL:
            segments.append([])
        elif token in ("(", ")"):
            continue
        else:
            segments[-1].append(token)
    return [s for s in segments if s]


def _edge_args(words: list[str]) -> list[str] | None:
    """The arguments after `edge` when the simple command runs edge, else None."""
    while words and _ENV.match(words[0]):
        words = words[1:]
    if words and words[0] in ("sudo", "time", "exec"):
        words = words[1:]
    if not words or not (words[0] == "edge" or words[0].endswith("/edge")):
        return None
    return words[1:]


def check_args(args: list[str]) -> str | None:
    """Parse `edge ARGS` against the real click tree; return the problem, or None if it parses."""
    args = [a for a in args if a != "--traceback"]  # edge.cli.main accepts it anywhere
    command: click.Command = cli_docs.root_command()
    ctx = click.Context(command, info_name="edge", **command.context_settings)
    path: list[str] = []
    while isinstance(command, click.Group):
        flags = []
        while args and args[0].startswith("-"):
            flags.append(args.pop(0))
        known = {o for p in command.get_params(ctx) for o in p.opts + p.secondary_opts}
        known |= set(ctx.help_option_names)
        for flag in flags:
            if flag.split("=")[0] not in known:
                return f"no such option {flag!r} for `{' '.join(['edge', *path])}`"
        if set(flags) & (set(ctx.help_option_names) | {"--version"}):
            return None
        if not args:
            return f"`{' '.join(['edge', *path])}` needs a command"
        name = args.pop(0)
        sub = command.get_command(ctx, name)
        if sub is None:
            return f"no such command {name!r} in `{' '.join(['edge', *path])}`"
        path.append(name)
        command = sub
        ctx = click.Context(command, info_name=name, parent=ctx, **command.context_settings)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # --help would print
            command.make_context(path[-1] if path else "edge", list(args), parent=ctx.parent)
    except click.exceptions.Exit:
        return None  # --help
    except click.ClickException as exc:
        return f"`{' '.join(['edge', *path])}`: {exc.format_message()}"
    return None


def _fenced_blocks(text: str):
    """(info string, [(line number, line), ...]) for every fenced code block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not match:
            i += 1
            continue
        fence, info = match.group(2), match.group(3).lower()
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append((i + 1, lines[i]))
            i += 1
        i += 1
        yield info, body


def _shell_lines(info: str, body: list[tuple[int, str]]):
    """(line number, command line) for every edge command of a console/shell block,
    continuations joined. A console block's commands are its `$ ` lines, and one whose output
    starts with `error:` shows a failure on purpose (not checked); sh/bash blocks are all
    commands; in unlabelled blocks only lines that start with `edge` count. `text` blocks are
    synopses."""
    if info in ("text", "yaml", "json", "python", "py", "ini", "toml", "diff", "svg"):
        return
    console = info == "console" or any(line.lstrip().startswith("$ ") for _, line in body)
    pending, start = "", 0
    for index, (number, line) in enumerate(body):
        stripped = line.strip()
        if pending:
            pending += " " + stripped
        elif console:
            if not stripped.startswith("$ "):
                continue
            pending, start = stripped[2:], number
        elif info in ("sh", "bash", "shell", "zsh") or _STARTS_EDGE.match(stripped):
            if not stripped or stripped.startswith("#"):
                continue
            pending, start = stripped, number
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        output = body[index + 1][1].strip() if index + 1 < len(body) else ""
        if not (console and output.lower().startswith("error:")):
            yield start, pending
        pending = ""
    if pending:
        yield start, pending


_STARTS_EDGE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:\S*/)?edge(?:\s|$)")


def doc_command_lines():
    """(file:line, edge args) for every edge command line in the docs' code blocks."""
    for md in _markdown_files():
        for info, body in _fenced_blocks(md.read_text(encoding="utf-8")):
            for number, line in _shell_lines(info, body):
                try:
                    segments = _segments(line)
                except ValueError as exc:  # unbalanced quotes
                    if re.search(r"(^|[\s/;&|])edge\s", line):
                        yield f"{md.relative_to(ROOT)}:{number}", f"unparsable: {exc}"
                    continue
                for words in segments:
                    args = _edge_args(words)
                    if args is not None:
                        yield f"{md.relative_to(ROOT)}:{number}", args


def test_parser_helper_catches_bad_lines():
    assert check_args(["deploy", "m.onnx", "--profile", "rpi4"]) is None
    assert check_args(["profiles", "show", "rpi4", "--json"]) is None
    assert check_args(["--version"]) is None
    assert check_args(["--traceback", "inspect", "m.onnx"]) is None
    assert "no such option" in check_args(["deploy", "m.onnx", "--no-such-flag"]).lower()
    assert "Missing option" in check_args(["optimize", "m.onnx"])
    assert "no such command" in check_args(["frobnicate"])
    assert "Missing argument" in check_args(["inspect"])
    assert _segments("cd /tmp && EDGE_CACHE_DIR=$PWD/c edge bench b --runs 5 2>/dev/null | tail")\
        == [["cd", "/tmp"], ["EDGE_CACHE_DIR=$PWD/c", "edge", "bench", "b", "--runs", "5"],
            ["tail"]]
    assert _edge_args(["EDGE_CLOUD_TOKEN=x", ".venv/bin/edge", "report", "b", "-o", "r.html"])\
        == ["report", "b", "-o", "r.html"]


# ------------------------------------------------------------------ (a) examples in --help
_EXAMPLE = re.compile(r"^\s*Examples?:\s*$")
_EDGE_LINE = re.compile(r"^\s+(?:[A-Za-z_][A-Za-z0-9_]*=\S+\s+)*edge(\s|$)")


def _help_examples(command: click.Command, ctx: click.Context) -> list[str]:
    """The example command lines under "Example(s):" in the --help text."""
    lines = command.get_help(ctx).splitlines()
    examples: list[str] = []
    for i, line in enumerate(lines):
        if not _EXAMPLE.match(line):
            continue
        pending = ""
        for follow in lines[i + 1:]:
            if not follow.strip():
                break
            text = follow.strip()
            if pending:
                text = pending + " " + text
            elif not _EDGE_LINE.match(follow):
                continue
            if text.endswith("\\"):
                pending = text[:-1]
                continue
            examples.append(text)
            pending = ""
    return examples


@pytest.mark.parametrize(("path", "command", "ctx"), COMMANDS, ids=IDS)
def test_help_has_an_example(path, command, ctx):
    assert _help_examples(command, ctx), (
        f"`{' '.join(('edge',) + path)} --help` has no 'Example:' line followed by an "
        "`edge ...` line (edit the docstring in edge/cli/__init__.py)")


@pytest.mark.parametrize(("path", "command", "ctx"), COMMANDS, ids=IDS)
def test_help_examples_parse(path, command, ctx):
    problems = []
    for example in _help_examples(command, ctx):
        for words in _segments(example):
            args = _edge_args(words)
            if args is not None and (problem := check_args(args)):
                problems.append(f"{example!r}: {problem}")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ (b) a page per command
@pytest.mark.parametrize(("path", "command", "ctx"), COMMANDS, ids=IDS)
def test_every_command_has_a_page(path, command, ctx):
    page = cli_docs.page_for(path)
    assert page.exists(), f"{page.relative_to(ROOT)} is missing (the page of edge {path})"
    text = page.read_text(encoding="utf-8")
    name = " ".join(("edge",) + path)
    assert re.search(re.escape(name) + r"(?![\w-])", text), \
        f"{page.relative_to(ROOT)} never shows `{name}`"
    assert "\n# " in "\n" + text, f"{page.relative_to(ROOT)} has no title"


def test_every_page_is_a_command_and_listed_in_the_index():
    pages = {cli_docs.page_for(path).name for path, _, _ in COMMANDS}
    stray = sorted(p.name for p in (DOCS / "commands").glob("*.md") if p.name not in pages)
    assert not stray, f"docs/commands/ pages with no command behind them: {stray}"
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    unlisted = sorted(p for p in pages if f"commands/{p}" not in index)
    assert not unlisted, f"docs/README.md does not link to: {unlisted}"


# ------------------------------------------------------------------ (c) doc command lines
def test_doc_command_lines_parse():
    problems, count = [], 0
    for where, args in doc_command_lines():
        if isinstance(args, str):
            problems.append(f"{where}: {args}")
            continue
        count += 1
        problem = check_args(list(args))
        if problem:
            problems.append(f"{where}: edge {shlex.join(args)}\n    {problem}")
    assert count > 100, f"only {count} edge command lines found: is the extraction broken?"
    assert not problems, "\n".join(problems)


def test_every_command_has_a_runnable_example_in_its_page():
    """Each page shows its own command in a code block (not only in prose)."""
    found: dict[tuple[str, ...], bool] = {path: False for path, _, _ in COMMANDS}
    for path, _, _ in COMMANDS:
        page = cli_docs.page_for(path)
        if not page.exists():
            continue
        for info, body in _fenced_blocks(page.read_text(encoding="utf-8")):
            for _, line in _shell_lines(info, body):
                for words in _segments(line):
                    args = _edge_args(words)
                    if args is not None and tuple(a for a in args if not a.startswith("-"))[
                            :len(path)] == path:
                        found[path] = True
    missing = [" ".join(("edge",) + p) for p, ok in found.items() if not ok]
    assert not missing, f"pages without an example of their command: {missing}"


# ------------------------------------------------------------------ (d) generated blocks
def test_options_blocks_are_fresh():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "cli_docs.py"), "--check"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------ (e) links
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)


def _strip_code(text: str) -> str:
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def _anchors(md: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", md.read_text(encoding="utf-8"),
                  flags=re.S | re.M)
    for match in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        slug = _slug(match.group(1))
        n = seen.get(slug, 0)
        anchors.add(slug if n == 0 else f"{slug}-{n}")
        seen[slug] = n + 1
    anchors |= set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    return anchors


def test_relative_links_resolve():
    problems = []
    for md in _markdown_files():
        text = _strip_code(md.read_text(encoding="utf-8"))
        for target in _LINK.findall(text) + _REF.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto:, ...
                continue
            file_part, _, anchor = target.partition("#")
            dest = (md.parent / file_part).resolve() if file_part else md
            where = f"{md.relative_to(ROOT)}: ({target})"
            if not dest.exists():
                problems.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                problems.append(f"{where}: no heading #{anchor} in {dest.name}")
    assert not problems, "\n".join(problems)
