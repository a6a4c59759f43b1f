"""Every measured number in docs/ comes from a JSON under bench/results written by a script in
the repository, with the git sha and the machine recorded (docs/benchmarks.md, "Where the
numbers come from").

* every ``bench/results/...json`` cited in docs/ or README.md exists, and records under
  ``provenance`` the script (which exists), a git sha and the machine (CPU model and flags);
* a table under a heading or paragraph that cites a JSON shows only numbers that JSON holds
  (to the digits shown, or as a percentage); in the figure pages every table of measured
  numbers cites one;
* every page of docs/ with ```console blocks cites bench/results/examples.json (written by
  bench/examples.py, which runs those sessions), and every command it shows there (``$ ...``,
  continuation lines joined) was recorded for that page, in the page's order, with every
  output line shown (in order; ``...`` lines mark cuts, blank lines are not checked).
* ``bench/examples.py --check`` passes: every console block is exactly its record;
* a ```sh block (commands to type, not run) shows no ``$ `` session: output belongs in a
  ```console block, which is checked.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([*ROOT.glob("docs/*.md"), *ROOT.glob("docs/commands/*.md"),
               *ROOT.glob("docs/accelerators/*.md"), ROOT / "README.md"])
CITED = re.compile(r"bench/results/[\w.-]+\.json")
FIGURE_PAGES = ("docs/benchmarks.md", "docs/fleet.md")
EXAMPLES = "bench/results/examples.json"
CONSOLE = re.compile(r"^```console\n(.*?)^```\n", re.S | re.M)
# Results written before bench/provenance.py existed, their provenance backfilled from git
# history. This set may only shrink: rerun the script to replace a file and drop it here.
BACKFILLED = {"bench/results/peers-cnn-run-c.json"}
NUMBER = re.compile(r"(?<![\w.\-])\d+(?:,\d{3})*(?:\.\d+)?(?![\d.])")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _citations() -> dict[str, set[str]]:
    """Cited results file -> the pages citing it."""
    found: dict[str, set[str]] = {}
    for page in DOCS:
        for cited in CITED.findall(page.read_text()):
            found.setdefault(cited, set()).add(_rel(page))
    return found


CITATIONS = _citations()


def _load(cited: str) -> dict[str, Any]:
    return json.loads((ROOT / cited).read_text())


def _console_pages() -> list[str]:
    """The pages of docs/ (and docs/commands/) that show console sessions."""
    return [_rel(page) for page in DOCS if page.parent.name in ("docs", "commands", "accelerators")
            and CONSOLE.search(page.read_text())]


CONSOLE_PAGES = _console_pages()


def test_the_figure_pages_cite_results() -> None:
    pages = {page for pages in CITATIONS.values() for page in pages}
    assert set(FIGURE_PAGES) <= pages, pages
    uncited = sorted(set(CONSOLE_PAGES) - set(CITATIONS.get(EXAMPLES, ())))
    assert not uncited, f"pages with console sessions that do not cite {EXAMPLES}: {uncited}"


@pytest.mark.parametrize("cited", sorted(CITATIONS))
def test_a_cited_result_exists_and_records_commit_and_machine(cited: str) -> None:
    assert (ROOT / cited).is_file(), f"{cited} is cited by {sorted(CITATIONS[cited])} but missing"
    record = _load(cited).get("provenance")
    assert isinstance(record, dict), f"{cited}: no provenance (see bench/provenance.py)"
    assert (ROOT / record["script"]).is_file(), f"{cited}: no script {record['script']}"
    assert re.fullmatch(r"[0-9a-f]{40}", record["git_sha"]), f"{cited}: git sha {record}"
    machine = record["machine"]
    assert machine["cpu"], f"{cited}: no CPU model"
    if cited in BACKFILLED:
        assert record.get("backfilled"), f"{cited}: listed as backfilled but is not marked so"
    else:
        assert not record.get("backfilled"), f"{cited}: a backfilled file not in BACKFILLED"
        assert machine["flags"], f"{cited}: no CPU flags"


def test_backfilled_files_are_still_cited() -> None:
    assert BACKFILLED <= set(CITATIONS), "drop files from BACKFILLED once no page cites them"


# ---------------------------------------------------------------- tables


def _tables(text: str) -> Iterator[tuple[str, str, set[str]]]:
    """(first row, table text, JSONs cited in the table, its heading or the text above it)."""
    heading, above, lines = "", [], text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading, above = line, []
        if line.startswith("|"):
            start = i
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            table = "\n".join(lines[start:i])
            context = "\n".join([heading, *above[-12:], table])
            yield lines[start], table, set(CITED.findall(context))
            above = []
            continue
        above.append(line)
        i += 1


def _numbers(doc: Any) -> list[float]:
    if isinstance(doc, bool):
        return []
    if isinstance(doc, int | float):
        return [float(doc)]
    if isinstance(doc, dict):
        return [n for value in doc.values() for n in _numbers(value)]
    if isinstance(doc, list):
        return [n for value in doc for n in _numbers(value)]
    if isinstance(doc, str):  # a reason text, say ("2.5 points below fp32 87.5%")
        return [float(token.replace(",", "")) for token in NUMBER.findall(doc)]
    return []


def _explained(token: str, values: list[float]) -> bool:
    """``token`` shows one of ``values`` to its digits (or x100, a percentage)."""
    number = float(token.replace(",", ""))
    digits = len(token.split(".")[1]) if "." in token else 0
    half = 0.5 * 10 ** -digits + 1e-9
    return any(abs(v - number) <= half or abs(100 * v - number) <= half for v in values)


def _measured(table: str) -> list[str]:
    """Number tokens of a table's body rows, its header and separator left out."""
    body = "\n".join(table.splitlines()[2:])
    return NUMBER.findall(body)


def _figure_tables() -> list[tuple[str, str, str, set[str]]]:
    found = []
    for page in DOCS:
        for header, table, cited in _tables(page.read_text()):
            found.append((_rel(page), header, table, cited))
    return found


@pytest.mark.parametrize(("page", "header", "table", "cited"),
                         [t for t in _figure_tables() if t[3] and t[3] != {EXAMPLES}],
                         ids=lambda v: v[:40] if isinstance(v, str) else None)
def test_a_table_citing_a_result_shows_only_its_numbers(page: str, header: str, table: str,
                                                         cited: set[str]) -> None:
    values = [n for c in sorted(cited) if (ROOT / c).is_file() for n in _numbers(_load(c))]
    strays = [t for t in _measured(table) if not _explained(t, values)]
    assert not strays, f"{page} table {header!r}: numbers not in {sorted(cited)}: {strays}"


def test_every_measured_table_of_the_figure_pages_cites_its_result() -> None:
    bare = [f"{page}: {header}" for page, header, table, cited in _figure_tables()
            if page in FIGURE_PAGES and not cited
            and any("." in token for token in _measured(table))]
    assert not bare, "tables of measured numbers without a bench/results JSON: " + str(bare)


# ---------------------------------------------------------------- console sessions


def _console_commands(text: str) -> Iterator[tuple[str, list[str]]]:
    """(command, output lines shown) of every ``$ `` line in the page's console blocks; a
    command continued with ``\\`` takes the following lines (joined with newlines)."""
    for block in CONSOLE.findall(text):
        lines = block.splitlines()
        command: str | None = None
        shown: list[str] = []
        i = 0
        while i < len(lines):
            if lines[i].startswith("$ "):
                if command is not None:
                    yield command, shown
                parts = [lines[i][2:]]
                while parts[-1].endswith("\\") and i + 1 < len(lines):
                    i += 1
                    parts.append(lines[i])
                command, shown = "\n".join(parts), []
            elif command is not None:
                shown.append(lines[i].rstrip())
            i += 1
        if command is not None:
            yield command, shown


def _recorded(page: str) -> list[dict[str, Any]]:
    """The steps recorded for ``page``'s console blocks, in the page's order (by block)."""
    steps = [step for session in _load(EXAMPLES)["sessions"].values()
             for step in session["steps"] if step.get("doc") == page and step["block"] is not None]
    return sorted(steps, key=lambda step: step["block"])


def _session_cases() -> list[tuple[str, int, str, list[str]]]:
    return [(page, index, command, shown) for page in CONSOLE_PAGES
            for index, (command, shown) in enumerate(_console_commands((ROOT / page).read_text()))]


@pytest.mark.parametrize("page", CONSOLE_PAGES)
def test_every_console_command_of_a_page_is_recorded(page: str) -> None:
    shown = [command for command, _ in _console_commands((ROOT / page).read_text())]
    recorded = [step["command"] for step in _recorded(page)]
    missing = [command for command in shown if command not in recorded]
    assert not missing, f"{page}: not recorded in {EXAMPLES} (run bench/examples.py): {missing}"
    assert shown == recorded, f"{page}: the commands shown differ from those recorded (order)"


@pytest.mark.parametrize(("page", "index", "command", "shown"), _session_cases(),
                         ids=lambda v: v[:50] if isinstance(v, str) else None)
def test_a_console_session_shows_recorded_output(page: str, index: int, command: str,
                                                 shown: list[str]) -> None:
    recorded = _recorded(page)
    assert index < len(recorded) and recorded[index]["command"] == command, \
        f"{page}: `{command}` is not in {EXAMPLES} at its place (run bench/examples.py)"
    lines = [line.rstrip() for line in recorded[index]["output"].splitlines()]
    position = 0
    for line in shown:
        if not line.strip() or line.strip().startswith("..."):
            continue
        assert line in lines[position:], f"{page}: `{command}` printed no {line!r} (in order)"
        position = lines.index(line, position) + 1


#: The languages of blocks that list commands to type ("": a block with no language at all).
SHELLS = ("sh", "bash", "shell", "")


#: A fence (CommonMark): up to any indentation (a list item's), 3 or more backticks or tildes,
#: then the info string, whose first word is the language.
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)")


def _fenced(text: str) -> Iterator[tuple[str, list[str]]]:
    """(language, lines) of every fenced block of a page: a block closes at a fence of its own
    character, at least as long, with no info string; its lines lose the fence's indentation;
    one left open runs to the end of the page."""
    opener, language, body = "", None, []
    for line in text.splitlines():
        fence = FENCE.match(line)
        if language is None and fence:
            indent, opener, language, body = fence.group(1), fence.group(2), fence.group(3), []
        elif language is not None and fence and fence.group(2)[0] == opener[0] \
                and len(fence.group(2)) >= len(opener) and not line.strip().strip(opener[0]):
            yield language.lower(), body
            language = None
        elif language is not None:
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
    if language is not None:
        yield language.lower(), body


def _prompts(page: str) -> list[str]:
    return [line for language, lines in _fenced((ROOT / page).read_text())
            if language in SHELLS for line in lines if line.startswith("$ ")]


@pytest.mark.parametrize("page", [_rel(page) for page in DOCS])
def test_a_shell_block_shows_no_session(page: str) -> None:
    """A ```sh (or untagged) block lists commands to type; one with ``$ `` prompts is a session
    shown without its recorded run, and must be a ```console block (checked above) instead."""
    prompts = _prompts(page)
    assert not prompts, f"{page}: a ```sh block shows a session (make it ```console): {prompts}"


def test_the_shell_block_check_sees_untagged_blocks() -> None:
    page = ("```console\n$ edge --help\n```\n\n```\n$ edge optimize m.onnx\nchosen: x\n```\n"
            "1. a step\n\n   ```sh\n   $ edge deploy b --host h\n   ```\n"
            "````md\n```console\n$ inner\n```\n````\n~~~Bash title=x\n$ tilde\n~~~\n")
    assert [(lang, lines[0]) for lang, lines in _fenced(page)] == [
        ("console", "$ edge --help"), ("", "$ edge optimize m.onnx"),
        ("sh", "$ edge deploy b --host h"), ("md", "```console"), ("bash", "$ tilde")]


def test_every_console_block_is_its_record() -> None:
    """`bench/examples.py --check`: each session recorded with its current commands, and every
    console block it shows exactly what its record gives (not only each shown line in it)."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "examples.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


#: What a recorded step says when its session broke (a file an earlier step should have made, a
#: candidate the bundle no longer has, a crash), never an error a page means to show.
BROKEN = ("Cannot open: No such file", "has no artifact of", "Traceback (most recent call last)")


def test_no_recorded_session_is_broken() -> None:
    """The Mender pages showed, recorded and "checked", a second release that could not be made
    (its bundle no longer held the candidate) and everything after it failing."""
    doc = _load(EXAMPLES)
    broken = [f"{name}: {step['command'][:80]}" for name, session in doc["sessions"].items()
              for step in session["steps"] if any(b in step["output"] for b in BROKEN)]
    assert not broken, f"sessions that broke (rerun bench/examples.py --only ...): {broken}"
