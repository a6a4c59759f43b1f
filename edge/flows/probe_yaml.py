"""The commented YAML ``edge devices probe`` writes: every field with a ``# read: how`` or
``# ASSUMED: why`` comment on its line, the ``source:`` text folded, and a plain dump instead
if the commented text would not read back as the same profile."""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

from edge.core.profile import Profile
from edge.flows.probe_result import ProbeResult

__all__ = ["render_profile"]


_HEADER = ("# 'read:' values come from the device; 'ASSUMED:' values are estimates or",
           "# placeholders: edit them, and the source: text, before relying on them.",
           "# Check with: edge profiles validate THIS_FILE")


def render_profile(result: ProbeResult) -> str:
    """The profile as commented YAML: a header, then every field with a ``# read:`` or
    ``# ASSUMED:`` comment. Checked: it reads back as ``result.data`` and validates."""
    data = result.data
    lines = [f"# Written by `edge devices probe` from {result.where}.", *_HEADER]
    for key in ("id", "name"):
        lines.append(_line(key, data[key], _comment(result, key), 0))
    lines.append("source: >-")
    lines += textwrap.wrap(data["source"], 96, initial_indent="  ", subsequent_indent="  ",
                           break_on_hyphens=False, break_long_words=False)
    for section in ("compute", "memory", "storage", "power"):
        lines += _section(result, section, "")
    lines += _accelerators(result)
    lines.append(_line("runtimes", data["runtimes"], _comment(result, "runtimes"), 0))
    for section in ("link", "access"):
        lines += _section(result, section, _comment(result, section))
    text = "\n".join(lines) + "\n"
    if _parsed(text) != _plain(data):  # never write a file that reads back differently
        text = "# Written by `edge devices probe`; see source: for what was read or assumed.\n" \
            + yaml.safe_dump(_plain(data), sort_keys=False, width=96)
    Profile.model_validate(_parsed(text))
    return text


def _section(result: ProbeResult, section: str, comment: str) -> list[str]:
    lines = [f"{section}:  # {comment}" if comment else f"{section}:"]
    for key, value in result.data[section].items():
        lines.append(_line(key, value, _comment(result, f"{section}.{key}"), 2))
    return lines


def _accelerators(result: ProbeResult) -> list[str]:
    accels = result.data["accelerators"]
    comment = _comment(result, "accelerators")
    if not accels:
        return [_line("accelerators", [], comment, 0)]
    return [f"accelerators:  # {comment}" if comment else "accelerators:",
            *(f"  - {_flow(a)}" for a in accels)]


def _comment(result: ProbeResult, key: str) -> str:
    if key in result.assumed:
        text = f"ASSUMED: {result.assumed[key]}"
    elif key in result.measured:
        text = f"read: {result.measured[key]}"
    else:
        return ""
    text = text.replace("\n", " ").split("; ")[0]
    if len(text) > 110:
        text = text[:110].rsplit(" ", 1)[0] + " ... (see source)"
    return text


def _flow(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 16, sort_keys=False)
    return text.removesuffix("\n...\n").strip()


def _line(key: str, value: Any, comment: str, indent: int) -> str:
    line = f"{' ' * indent}{key}: {_flow(value)}"
    return f"{line}  # {comment}" if comment else line


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _parsed(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None
