"""PyTorch files that run code when unpickled (issue 27, hostile_code); imports torch."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

MARKER = "code-ran"


class Payload:
    """Unpickled, it runs ``exec`` on a line that writes ``code-ran`` in the working folder."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (exec, (f"open({MARKER!r}, 'w').write('x')",))


class Booby(nn.Module):
    """A module (x[1, 4] -> [1, 2]) whose unpickling writes ``code-ran`` in the working folder:
    a pickled module runs its class's code when loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def __setstate__(self, state: dict[str, Any]) -> None:
        Path(MARKER).write_text("x")
        super().__setstate__(state)


def zip_payload(path: Path) -> None:
    """torch.save's zip format with the payload inside its data.pkl."""
    torch.save({"model": Payload()}, path)


def legacy_payload(path: Path) -> None:
    """torch.save's legacy (pre-1.6, not a zip) format with the payload."""
    torch.save({"model": Payload()}, path, _use_new_zipfile_serialization=False)


def module(path: Path) -> None:
    """A whole module saved with torch.save (a pickle of the class Booby)."""
    torch.manual_seed(0)
    torch.save(Booby().eval(), path)


def scripted(path: Path) -> None:
    """The same module as TorchScript: data, loaded without unpickling Python objects."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script is deprecated
        torch.jit.script(nn.Sequential(nn.Linear(4, 2)).eval()).save(str(path))


class FileWriter(nn.Module):
    """A TorchScript forward that maps ``code-ran`` (created, shared) and writes into it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mapped = torch.from_file("code-ran", True, 4, dtype=torch.uint8)
        mapped.fill_(65)
        return x * 2 + mapped[0].float()


def scripted_from_file(path: Path) -> None:
    """TorchScript is not plain data either: its code may call torch.from_file."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script is deprecated
        torch.jit.script(FileWriter()).save(str(path))


class FileSaver(nn.Module):
    """A TorchScript forward that saves its input to ``code-ran`` (aten::save)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.save(x, "code-ran")
        return x * 2


def scripted_save(path: Path) -> None:
    """TorchScript whose code calls torch.save: any TorchScript call that writes files."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script is deprecated
        torch.jit.script(FileSaver()).save(str(path))
