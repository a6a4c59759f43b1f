"""Every measured number in docs/ comes from a JSON under bench/results written by a script in
the repository, with the git sha and the machine recorded (docs/benchmarks.md, "Where the
numbers come from").

* every ``bench/results/...json`` cited in docs/ or README.md exists, and records under
  ``provenance`` the script (which exists), a git sha and the machine (CPU model and flags);
* a table under a heading or paragraph that cites a JSON shows only numbers that JSON holds
  (to the digits shown, or as a percentage); in the figure pages every table of measured
  numbers cites one;
* every command and output line of the console sessions in docs/tutorial.md and docs/data.md
  is in bench/results/examples.json (written by bench/examples.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([*ROOT.glob("docs/*.md"), *ROOT.glob("docs/commands/*.md"), ROOT / "README.md"])
CITED = re.compile(r"bench/results/[\w.-]+\.json")
FIGURE_PAGES = ("docs/benchmarks.md", "docs/fleet.md")
SESSIONS = {"docs/tutorial.md": "tutorial", "docs/data.md": "data"}
EXAMPLES = "bench/results/examples.json"
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


def test_the_figure_pages_cite_results() -> None:
    pages = {page for pages in CITATIONS.values() for page in pages}
    assert set(FIGURE_PAGES) | set(SESSIONS) <= pages, pages


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
    """(command, output lines shown) of every ``$ `` line in the page's console blocks."""
    for block in re.findall(r"^```console\n(.*?)^```\n", text, re.S | re.M):
        command: str | None = None
        shown: list[str] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                if command is not None:
                    yield command, shown
                command, shown = line[2:], []
            elif command is not None:
                shown.append(line.rstrip())
        if command is not None:
            yield command, shown


def _session_cases() -> list[tuple[str, str, list[str]]]:
    return [(page, command, shown) for page in SESSIONS
            for command, shown in _console_commands((ROOT / page).read_text())]


@pytest.mark.parametrize(("page", "command", "shown"), _session_cases(),
                         ids=lambda v: v[:50] if isinstance(v, str) else None)
def test_a_console_session_shows_recorded_output(page: str, command: str,
                                                 shown: list[str]) -> None:
    steps = _load(EXAMPLES)["sessions"][SESSIONS[page]]["steps"]
    recorded = [s for s in steps if s["command"] == command]
    assert recorded, f"{page}: `{command}` is not in {EXAMPLES} (run bench/examples.py)"
    lines = [line.rstrip() for line in recorded[0]["output"].splitlines()]
    position = 0
    for line in shown:
        if line == "...":
            continue
        assert line in lines[position:], f"{page}: `{command}` printed no {line!r} (in order)"
        position = lines.index(line, position) + 1
