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


class _WithArgs(nn.Module):
    """A forward with an int and a float argument besides its tensor (given with --arg)."""

    def forward(self, x: torch.Tensor, k: int, s: float) -> torch.Tensor:
        return x * k + s


def scripted_args(path: Path) -> None:
    """TorchScript of ``_WithArgs``: plain tensor math."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.script(_WithArgs().eval()).save(str(path))


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


#: Spellings of ``torch.save`` that torch's compiler resolves to aten::save and that a reader
#: of dotted names alone does not see (a hand-edited archive's code).
RESPELLINGS = {
    "getattr-save": 'getattr(torch, "save")',
    "getattr-ops": 'getattr(ops, "aten").save',
    "paren-save": "(torch).save",
    "paren-ops": "(ops.aten).save",
    "paren-getattr": 'getattr((torch), "save")',
    "getattr-paren-ops": 'getattr((ops), "aten").save',
    "ops-getattr-save": 'getattr(ops.aten, "save")',
}


def _respell(path: Path, old: str, new: str) -> None:
    """The archive at ``path`` with ``old`` replaced by ``new`` in its code files."""
    import zipfile

    data = path.read_bytes()
    source = path.with_suffix(".orig")
    source.write_bytes(data)
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            body = src.read(info)
            if "/code/" in info.filename and info.filename.endswith(".py"):
                body = body.decode().replace(old, new).encode()
            dst.writestr(info, body)
    source.unlink()


def scripted_respelled(spelling: str) -> Any:
    """A builder: scripted_save's archive with torch.save spelled as RESPELLINGS[spelling]."""
    def make(path: Path) -> None:
        scripted_save(path)
        _respell(path, "torch.save", RESPELLINGS[spelling])
    return make


class StateSaver(nn.Module):
    """A module whose ``__setstate__`` (run by torch.jit.load itself) saves its weight to
    ``code-ran``; ``__getstate__`` keeps the weight."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.ones(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight

    @torch.jit.export
    def __getstate__(self) -> tuple[torch.Tensor, bool]:
        return (self.weight, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, bool]) -> None:
        torch.save(state[0], "code-ran")
        self.weight = state[0]
        self.training = state[1]


class StateLoop(StateSaver):
    """A module whose ``__setstate__`` never returns: loading it would never finish."""

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, bool]) -> None:
        i = 0
        while i >= 0:
            i = (i + 1) % 7
        self.weight = state[0]
        self.training = state[1]


def _script(module: nn.Module, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script is deprecated
        torch.jit.script(module.eval()).save(str(path))


def scripted_setstate_save(path: Path) -> None:
    """TorchScript whose load-time ``__setstate__`` calls ``getattr(torch, "save")``."""
    _script(StateSaver(), path)
    _respell(path, "torch.save", RESPELLINGS["getattr-save"])


def scripted_setstate_respelled(spelling: str) -> Any:
    """A builder: StateSaver's archive with its ``__setstate__``'s torch.save spelled as
    RESPELLINGS[spelling]."""
    def make(path: Path) -> None:
        _script(StateSaver(), path)
        _respell(path, "torch.save", RESPELLINGS[spelling])
    return make


def scripted_from_file_respelled(spelling: str) -> Any:
    """A builder: scripted_from_file's archive with torch.from_file spelled as
    RESPELLINGS[spelling] spells torch.save."""
    def make(path: Path) -> None:
        scripted_from_file(path)
        _respell(path, "torch.from_file", RESPELLINGS[spelling].replace("save", "from_file"))
    return make


def scripted_setstate_loop(path: Path) -> None:
    """TorchScript whose load-time ``__setstate__`` loops forever."""
    _script(StateLoop(), path)


class StateHog(StateSaver):
    """A module whose ``__setstate__`` asks for a 64 GB tensor."""

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, bool]) -> None:
        self.weight = torch.add(state[0], torch.zeros([1 << 34]).sum())
        self.training = state[1]


def scripted_setstate_memory(path: Path) -> None:
    """TorchScript whose load-time ``__setstate__`` allocates 64 GB."""
    _script(StateHog(), path)


class ForwardLoop(nn.Module):
    """A forward that never returns (no file, no network: only a loop)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        i = 0
        while i >= 0:
            i = (i + 1) % 7
        return x * 2


class ForwardHog(nn.Module):
    """A forward that asks for a 64 GB tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.zeros([1 << 34]).sum()


def scripted_forward_loop(path: Path) -> None:
    _script(ForwardLoop(), path)


def scripted_forward_memory(path: Path) -> None:
    _script(ForwardHog(), path)


class StatePrinter(StateSaver):
    """A module whose ``__setstate__`` prints 64 MB (no file, no network: tensor math only)."""

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, bool]) -> None:
        for _ in range(1 << 21):
            print("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
        self.weight = state[0]
        self.training = state[1]


def scripted_setstate_print(path: Path) -> None:
    _script(StatePrinter(), path)


def rename_code(path: Path, old: str, new: str) -> None:
    """The archive at ``path`` with ``old`` replaced by ``new`` in its code files' names."""
    import zipfile

    source = path.with_suffix(".orig")
    source.write_bytes(path.read_bytes())
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            name = info.filename.replace(old, new) if info.filename.endswith(".py") \
                else info.filename
            dst.writestr(name, src.read(info))
    source.unlink()
