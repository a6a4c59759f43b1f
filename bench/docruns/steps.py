"""A session's steps, and what a page shows of each step's output (``...`` marks cut lines)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

CUT = "..."
Show = Callable[[list[str]], list[str]]


@dataclass(frozen=True, slots=True)
class Ctx:
    """What a command may depend on: the session's work dir and its device's facts (the test
    sshd's ``ssh`` target, ``python``, ...)."""

    work: Path
    vars: dict[str, str] = field(default_factory=dict)

    def __getattr__(self, name: str) -> str:
        try:
            return self.vars[name]
        except KeyError:
            raise AttributeError(name) from None


Command = str | Callable[[Ctx], str]


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One command of a session, shown in console block ``block`` of ``doc`` (None: the
    session's first page); ``block=None`` runs it (setup) without showing it."""

    command: Command
    block: int | None = None
    doc: str | None = None
    show: Show | None = None  # which output lines the page shows (default: all)
    background: str | None = None  # a server: run in the background until a line with this
    stop: bool = False  # stop the last background server (``command`` only names the step)
    tty: bool = False  # on a terminal (TERM=dumb): the CLI then prints its `edge: ...` lines
    gap: bool = False  # a blank line before it in the block
    cwd: Path | None = None  # run there (the shell's own directory is kept)


def nowhere(work: Path) -> contextlib.AbstractContextManager[dict[str, str]]:
    """The device context of a session that needs none."""
    return contextlib.nullcontext({})


@dataclass(frozen=True, kw_only=True, slots=True)
class Session:
    """Steps run one after the other in ``workdir`` (made afresh, ``files`` put in it), with
    ``device(workdir)`` entered around them (e.g. the test sshd)."""

    name: str
    docs: tuple[str, ...]
    workdir: Path
    files: Callable[[Path], None]
    steps: list[Step]
    device: Callable[[Path], contextlib.AbstractContextManager[dict[str, str]]] = nowhere


def on_page(doc: str) -> Callable[..., Step]:
    """``Step`` with ``doc`` filled in, for a session that spans pages."""
    def step(*args: object, **kwargs: object) -> Step:
        return Step(*args, doc=doc, **kwargs)  # type: ignore[arg-type, misc]
    return step


def text(command: Command, ctx: Ctx) -> str:
    return command(ctx) if callable(command) else command


# ---------------------------------------------------------------- what the pages show


def keep(wanted: Callable[[int, str], bool]) -> Show:
    """The lines ``wanted(index, line)`` keeps, ``...`` where lines were cut."""
    def show(lines: list[str]) -> list[str]:
        out: list[str] = []
        for index, line in enumerate(lines):
            if wanted(index, line):
                out.append(line)
            elif not out or out[-1] != CUT:
                out.append(CUT)
        return out
    return show


def only(*prefixes: str) -> Show:
    """The lines starting with one of ``prefixes``."""
    return keep(lambda _, line: line.startswith(prefixes))


def keep_from(marker: str, *prefixes: str) -> Show:
    """The lines starting with one of ``prefixes``, and every line from the first containing
    ``marker``."""
    def show(lines: list[str]) -> list[str]:
        start = _index(lines, marker)
        return keep(lambda i, line: i >= start or line.startswith(prefixes))(lines)
    return show


def head_tail(head: int, tail: int) -> Show:
    def show(lines: list[str]) -> list[str]:
        if len(lines) <= head + tail:
            return lines
        return [*lines[:head], CUT, *(lines[-tail:] if tail else [])]
    return show


def _index(lines: list[str], marker: str, start: int = 0) -> int:
    return next(i for i, line in enumerate(lines) if marker in line and i >= start)


def from_(marker: str, upto: str | None = None) -> Show:
    """``...`` then the lines from the first containing ``marker`` (to one containing ``upto``)."""
    def show(lines: list[str]) -> list[str]:
        start = _index(lines, marker)
        end = len(lines) if upto is None else _index(lines, upto, start) + 1
        return ([CUT] if start else []) + lines[start:end] + ([CUT] if end < len(lines) else [])
    return show


def upto(marker: str) -> Show:
    def show(lines: list[str]) -> list[str]:
        end = _index(lines, marker) + 1
        return lines[:end] + ([CUT] if end < len(lines) else [])
    return show


def nothing(lines: list[str]) -> list[str]:
    return [CUT] if lines else []


def cut_between(after: str, resume: str) -> Show:
    """Lines up to the first containing ``after``, ``...``, then from the next line equal to
    ``resume`` (e.g. the closing brace of a JSON object) to the end."""
    def show(lines: list[str]) -> list[str]:
        stop = _index(lines, after) + 1
        again = next(i for i in range(stop, len(lines)) if lines[i] == resume)
        return [*lines[:stop], CUT, *lines[again:]]
    return show


def json_lists(**kept: tuple[int, int]) -> Show:
    """A JSON document (indent 2) with each named list cut to its first and last items:
    ``json_lists(history=(1, 1))`` keeps the first and last entries of ``"history"``."""
    def show(lines: list[str]) -> list[str]:
        out = list(lines)
        for name, (first, last) in kept.items():
            out = _cut_list(out, name, first, last)
        return out
    return show


def _cut_list(lines: list[str], name: str, first: int, last: int) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(f'"{name}": ['))
    indent = " " * (len(lines[start]) - len(lines[start].lstrip()) + 2)
    items: list[tuple[int, int]] = []  # (first line, last line) of each item
    i = start + 1
    while not lines[i].startswith(indent[:-2] + "]"):
        end = i
        if lines[i].rstrip().endswith(("{", "[")):
            closing = indent + lines[i].rstrip()[-1].replace("{", "}").replace("[", "]")
            end = next(j for j in range(i, len(lines)) if lines[j].startswith(closing))
        items.append((i, end))
        i = end + 1
    if len(items) <= first + last:
        return lines
    head = lines[start + 1:items[first - 1][1] + 1] if first else []
    tail = lines[items[-last][0]:items[-1][1] + 1] if last else []
    return [*lines[:start + 1], *head, indent + CUT, *tail, *lines[items[-1][1] + 1:]]


def fold(*names: str) -> Show:
    """A JSON document (indent 2) with the body of each named object cut to ``...``:
    ``fold("metrics")`` shows ``"metrics": {``, ``...``, and its closing brace."""
    def show(lines: list[str]) -> list[str]:
        out = list(lines)
        for name in names:
            start = next(i for i, line in enumerate(out)
                         if line.lstrip().startswith(f'"{name}": {{'))
            indent = out[start][:len(out[start]) - len(out[start].lstrip())]
            end = next(i for i in range(start + 1, len(out)) if out[i].startswith(indent + "}"))
            out = [*out[:start + 1], indent + "  " + CUT, *out[end:]]
        return out
    return show


def sections(*names: str, first_lines: int = 3) -> Show:
    """A YAML document: its first ``first_lines`` lines and the top-level sections ``names``
    (each with its nested lines); the rest cut."""
    def show(lines: list[str]) -> list[str]:
        current = ""
        wanted: list[bool] = []
        for index, line in enumerate(lines):
            if line and not line[0].isspace() and not line.startswith("- "):
                current = line.split(":", 1)[0]
            wanted.append(index < first_lines or current in names)
        return keep(lambda index, _: wanted[index])(lines)
    return show


def drop_bar_blanks(lines: list[str]) -> list[str]:
    """A terminal's output without the blank lines its progress bars leave behind (at the
    start, and after an ``edge: ...`` line)."""
    out: list[str] = []
    for line in lines:
        if not line and (not out or out[-1].startswith("edge: ")):
            continue
        out.append(line)
    return out


def shown(lines: list[str], step: Step) -> list[str]:
    """What the page shows of ``lines``, the output of ``step``."""
    lines = [line.rstrip() for line in lines]
    if step.tty:
        lines = drop_bar_blanks(lines)
    return (step.show or (lambda x: x))(lines)


def iter_blocks(steps: list[Step], docs: tuple[str, ...]) -> Iterator[tuple[str, int, Step]]:
    """(page, block, step) of every shown step."""
    for step in steps:
        if step.block is not None:
            yield step.doc or docs[0], step.block, step
