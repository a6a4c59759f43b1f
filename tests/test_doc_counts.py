"""Numbers in the README's and the tutorial's prose that describe edge are the code's or the
recorded run's (issue 42: the README said 13 devices while 17 shipped, the tutorial quoted a
first run and a candidate count from runs long gone).

Console blocks are the record itself (bench/examples.py --check, tests/test_doc_figures.py);
this checks the sentences around them against the same record.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from edge.core.profile import catalog_ids

ROOT = Path(__file__).resolve().parents[1]
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
         "eight": 8, "nine": 9, "ten": 10}


def _step(session: str, command: str) -> dict[str, Any]:
    doc = json.loads((ROOT / "bench" / "results" / "examples.json").read_text())
    return next(s for s in doc["sessions"][session]["steps"] if s["command"] == command)


def _number(found: re.Match[str] | None, text: str) -> str:
    assert found is not None, f"the sentence is gone; update this test: {text[:80]}"
    return found.group(1)


def test_the_readme_counts_the_catalog() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    count = _number(re.search(r"the device catalog \((\d+) profiles\)", readme), readme)
    assert int(count) == len(catalog_ids())


def test_the_tutorials_timings_are_its_recorded_runs() -> None:
    text = " ".join((ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8").split())
    first = _step("tutorial", "edge deploy sample:digits --profile rpi4")
    strict = _step("tutorial", "edge optimize model.onnx --profile rpi4 --calib calib.npy "
                               "--eval eval.npz --max-drop 0.1 --min-cosine 0.9999 "
                               "--exhaustive -o strict.bundle")
    assert _number(re.search(r"It took ([\d.]+) s here", text), text) == \
        f"{first['seconds']:.1f}"
    assert _number(re.search(r"\(([\d.]+) s: this time every runtime was converted", text),
                   text) == f"{strict['seconds']:.1f}"


def test_the_tutorials_rejected_count_is_its_recorded_table() -> None:
    text = " ".join((ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8").split())
    strict = _step("tutorial", "edge optimize model.onnx --profile rpi4 --calib calib.npy "
                               "--eval eval.npz --max-drop 0.1 --min-cosine 0.9999 "
                               "--exhaustive -o strict.bundle")
    rejected = [line for line in strict["output"].splitlines()
                if re.match(r"\S*int8\S*\s+rejected\b", line)]
    word = _number(re.search(r"converted\.\) (\w+) int8 candidates? lost", text), text)
    assert WORDS[word.lower()] == len(rejected)


def _prose(page: Path) -> str:
    """A page's text outside its fenced blocks, whitespace folded."""
    kept, fenced = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            kept.append(line)
    return " ".join(" ".join(kept).split())


#: "N profiles" / "N devices" (digits or words) with "catalog" shortly before: a count of the
#: catalog, wherever a page states one.
CATALOG_COUNT = re.compile(r"catalog\b[^|]{0,40}?\b(\d+|" + "|".join(WORDS) +
                           r") (?:device )?(?:profiles|devices)\b", re.I)


def test_every_page_that_counts_the_catalog_counts_what_ships() -> None:
    pages = [ROOT / "README.md", *sorted(ROOT.glob("docs/**/*.md"))]
    found = [(str(page.relative_to(ROOT)), match.group(1)) for page in pages
             for match in CATALOG_COUNT.finditer(_prose(page))]
    assert "README.md" in dict(found), "the README no longer counts the catalog; update this test"
    wrong = [(page, count) for page, count in found
             if int(WORDS.get(count.lower(), 0) or count) != len(catalog_ids())]
    assert not wrong, f"catalog counts that are not the {len(catalog_ids())} profiles: {wrong}"


def test_the_catalog_count_check_finds_a_wrong_count() -> None:
    text = "the device catalog (12 profiles) and its schema; a catalog of nine devices"
    assert [m.group(1) for m in CATALOG_COUNT.finditer(text)] == ["12", "nine"]
