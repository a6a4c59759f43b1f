"""The HTML page: one self-contained document, tables, figures and inline SVG plots."""

from __future__ import annotations

import html
import io
import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from edge.core import __version__
from edge.core.errors import UsageError
from edge.core.units import size_text

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0 auto;
max-width:1100px;padding:1rem 1.5rem;color:#1d1d1f;background:#fff;line-height:1.4}
h1{font-size:1.5rem;margin:.5rem 0}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:.9rem}figure{margin:1rem 0}figure svg{max-width:100%;height:auto}
figcaption{color:#555;font-size:.85rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f4f6}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.chosen td{background:#fff6d6;font-weight:600}tr.rejected td,tr.failed td{color:#9b1c1c}
tr.skipped td{color:#777}.note{color:#555;font-size:.9rem}code{font-size:.85rem}
"""

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    body: str
    anchor: str


def page(title: str, subtitle: str, sections: Sequence[Section]) -> str:
    toc = "".join(f'<li><a href="#{e(s.anchor)}">{e(s.title)}</a></li>' for s in sections)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="edge ' + e(__version__) + '">',
        f"<title>{e(title)}</title><style>{_CSS}</style></head><body>",
        f"<header><h1>{e(title)}</h1><p class=\"meta\">{e(subtitle)}<br>"
        f"written by edge {e(__version__)} on {e(time.strftime('%Y-%m-%d %H:%M:%S %Z'))}</p>"
        f"<nav><ul>{toc}</ul></nav></header><main>",
    ]
    parts += [f'<section id="{e(s.anchor)}"><h2>{e(s.title)}</h2>{s.body}</section>'
              for s in sections]
    parts.append("</main></body></html>\n")
    return "\n".join(parts)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]],
           classes: Iterable[str] | None = None, numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = []
    row_classes = list(classes) if classes is not None else None
    for i, row in enumerate(rows):
        cls = f' class="{e(row_classes[i])}"' if row_classes and row_classes[i] else ""
        cells = "".join(f'<td class="num">{e(c)}</td>' if j in numeric else f"<td>{e(c)}</td>"
                        for j, c in enumerate(row))
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{e(caption)}</figcaption></figure>"


def note(text: str) -> str:
    return f'<p class="note">{e(text)}</p>'


_PROLOG = re.compile(r"^.*?(?=<svg[\s>])", re.S)


def svg(fig: Any, plot_id: str, title: str) -> str:
    """The figure as an inline <svg> with an id, a class and a <title>; the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    for ax in fig.axes:
        _plain_numbers(ax.xaxis)
        _plain_numbers(ax.yaxis)
    try:
        with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": plot_id}):
            fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    finally:
        plt.close(fig)
    text = _PROLOG.sub("", buf.getvalue(), count=1)
    head_end = text.index(">") + 1
    attrs = (f' id="{e(plot_id)}" class="plot" role="img" aria-label="{e(title)}"'
             f' data-plot="{e(plot_id)}"')
    head = text[:head_end - 1].rstrip("/") + attrs + ">"
    return head + f"<title>{e(title)}</title>" + text[head_end:]


def _plain_numbers(axis: Any) -> None:
    """Tick labels a reader reads as they are: a log axis in plain numbers (matplotlib's own
    are mathtext, shown raw since text is never parsed as math), no offset ("1e-8+1")."""
    from matplotlib.ticker import FuncFormatter, LogFormatter, NullFormatter, ScalarFormatter

    major = axis.get_major_formatter()
    if isinstance(major, LogFormatter):
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    elif isinstance(major, ScalarFormatter):
        major.set_useOffset(False)


def pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UsageError("edge report draws with matplotlib: pip install 'edge[report]'") from None
    matplotlib.use("Agg", force=True)
    # every text drawn comes from documents: "$...$" is text, never mathtext or LaTeX to parse
    matplotlib.rcParams.update({"text.parse_math": False, "text.usetex": False})
    import matplotlib.pyplot as plt

    return plt


#: The largest magnitude a plotted number may have (matplotlib's limits overflow near 1e308).
MAX_PLOTTED = 1e12


def drawable(*values: Any) -> bool:
    """Finite numbers matplotlib can place on an axis (documents may hold NaN or 1e308)."""
    return all(isinstance(v, int | float) and math.isfinite(v) and abs(v) <= MAX_PLOTTED
               for v in values)


def fmt_ms(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def fmt_size(n: int | None) -> str:
    return "" if n is None else size_text(n)


def short(name: str, width: int = 36) -> str:
    return name if len(name) <= width else "..." + name[-(width - 3):]
