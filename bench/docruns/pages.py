"""Rewriting the ```console blocks of the pages from the recorded steps."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .steps import Session, iter_blocks, shown

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = re.compile(r"^```console\n(.*?)^```\n", re.S | re.M)


def console_blocks(text: str) -> list[re.Match[str]]:
    """The ```console blocks of a page."""
    return list(CONSOLE.finditer(text))


def block_texts(recorded: dict[str, Any], session: Session) -> dict[tuple[str, int], list[str]]:
    """(page, block) -> the lines of that console block, from the recorded steps."""
    shown_steps = list(iter_blocks(session.steps, session.docs))
    records = [r for r in recorded["steps"] if r["block"] is not None]
    if len(records) != len(shown_steps):
        raise ValueError(f"{session.name}: the recorded session does not match its steps")
    texts: dict[tuple[str, int], list[str]] = {}
    for (doc, block, step), record in zip(shown_steps, records, strict=True):
        lines = record["output"].splitlines() if record["output"] else []
        body = texts.setdefault((doc, block), [])
        if step.gap and body:
            body.append("")
        body.extend([f"$ {record['command']}", *shown(lines, step)])
    return texts


def changed_commands(recorded: dict[str, Any], session: Session) -> list[str]:
    """The shown steps whose command (a plain string) is not the one recorded for them."""
    records = [r for r in recorded["steps"] if r["block"] is not None]
    steps = [step for _, _, step in iter_blocks(session.steps, session.docs)]
    return [f"{session.name}: `{step.command}` is recorded as `{record['command']}`"
            for step, record in zip(steps, records, strict=False)
            if isinstance(step.command, str) and step.command != record["command"]]


def stale(texts: dict[tuple[str, int], list[str]]) -> list[str]:
    """The (page, block)s whose text is not what the records give, as 'PAGE console block N'."""
    out = []
    for doc in sorted({d for d, _ in texts}):
        blocks = console_blocks((ROOT / doc).read_text())
        for index in sorted(i for d, i in texts if d == doc):
            body = "\n".join(texts[(doc, index)]) + "\n"
            if index >= len(blocks) or blocks[index].group(1) != body:
                out.append(f"{doc} console block {index + 1}")
    return out


def rewrite(texts: dict[tuple[str, int], list[str]]) -> list[str]:
    """Replace every (page, block) in ``texts``; the pages rewritten."""
    pages = sorted({doc for doc, _ in texts})
    for doc in pages:
        path = ROOT / doc
        text = path.read_text()
        blocks = console_blocks(text)
        indexes = sorted((block for page, block in texts if page == doc), reverse=True)
        if indexes and indexes[0] >= len(blocks):
            raise ValueError(f"{doc} has {len(blocks)} console blocks, not {indexes[0] + 1}")
        for index in indexes:
            block = blocks[index]
            body = "\n".join(texts[(doc, index)]) + "\n"
            text = text[:block.start(1)] + body + text[block.end(1):]
        path.write_text(text)
    return pages
