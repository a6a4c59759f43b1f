"""How the progress bars look, drawn with rich: loaded by ``edge.core.progress`` only when a
bar is shown, so a command that shows none (``edge --help``) never imports rich."""

from __future__ import annotations

from typing import IO, Any

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskProgressColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Column
from rich.text import Text

__all__ = ["console", "print_line", "progress"]


def console(stream: IO[str], terminal: bool | None) -> Console:
    """The console the bars and the log lines above them are drawn on."""
    return Console(file=stream, force_terminal=terminal, highlight=False, soft_wrap=False)


def progress(on: Console) -> Progress:
    """The live display, redrawn by ``edge.core.progress`` (which respects ``hold``)."""
    return Progress(*_columns(), console=on, transient=True, redirect_stdout=False,
                    auto_refresh=False)


def print_line(live: Any, line: str) -> None:
    """Print ``line`` above the bars of ``live``."""
    live.console.print(Text(line), soft_wrap=True)


class _Description(ProgressColumn):
    def render(self, task: Task) -> RenderableType:
        return Text(task.description, no_wrap=True, overflow="ellipsis")


class _Detail(ProgressColumn):
    """Size, speed and time left of a transfer; else percentage done and time taken."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=True))
        self.bytes = (DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
        self.count = (TaskProgressColumn(), TimeElapsedColumn())
        self.spin = (TimeElapsedColumn(),)

    def render(self, task: Task) -> RenderableType:
        columns = (self.spin if task.total is None else
                   self.bytes if task.fields.get("unit") == "bytes" else self.count)
        return Text(" ").join(column.render(task) for column in columns)


def _columns() -> list[ProgressColumn]:
    """Spinner, description, bar, figures, time. A narrow terminal cuts the description short
    (with an ellipsis) before anything else; nothing wraps onto a second line."""
    return [SpinnerColumn(table_column=Column(no_wrap=True)),
            _Description(table_column=Column(no_wrap=False)),  # the one that gives way
            BarColumn(bar_width=20, table_column=Column(no_wrap=True)), _Detail()]
