"""Two small models trained here (a few seconds each, one thread) for the embedding and
multi-label kinds (issue 41 item 4):

* an **embedder**: a 1-D conv net trained to tell 12 kinds of signal apart, exported without
  its classifier: the output is its pooled 32-vector (GlobalAveragePool, flattened), one per
  sample; samples of one kind sit close together, so their nearest neighbours are fragile;
* a **tagger**: a multi-label MLP trained with a sigmoid loss over 64 tags (1-3 per sample),
  exported as raw logits ``tags`` [1, 64] (the sigmoid is the reader's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

KINDS, LENGTH, CHANNELS, WIDTH = 12, 64, 4, 32
TAGS, FEATURES = 64, 32


@contextmanager
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _fit(net: torch.nn.Module, batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
         loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], steps: int) -> None:
    optimizer = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(steps):
        x, y = batch()
        value = loss(net(x), y)
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
    net.eval()


# ---------------------------------------------------------------- the embedder


class _Embedder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv1d(CHANNELS, WIDTH, 5, padding=2)
        self.b = torch.nn.Conv1d(WIDTH, WIDTH, 5, padding=2)
        self.pool = torch.nn.AdaptiveAvgPool1d(1)
        self.head = torch.nn.Linear(WIDTH, KINDS)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.b(torch.relu(self.a(x))))).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x))


class _Pooled(torch.nn.Module):
    def __init__(self, net: _Embedder) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.embed(x)


def _signals(rng: np.random.Generator, prototypes: np.ndarray,
             count: int) -> tuple[np.ndarray, np.ndarray]:
    kinds = rng.integers(0, KINDS, size=count)
    noise = rng.normal(size=(count, CHANNELS, LENGTH)) * 0.5
    return (prototypes[kinds] + noise).astype(np.float32), kinds


def embedder(path: Path, count: int) -> np.ndarray:
    """Train and export the embedder to ``path``; ``count`` held-out inputs [count, 4, 64]."""
    rng = np.random.default_rng(0)
    prototypes = rng.normal(size=(KINDS, CHANNELS, LENGTH))

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        x, y = _signals(rng, prototypes, 64)
        return torch.from_numpy(x), torch.from_numpy(y)

    with _one_thread():
        net = _Embedder()
        _fit(net, batch, torch.nn.functional.cross_entropy, 150)
        torch.onnx.export(_Pooled(net), (torch.zeros(1, CHANNELS, LENGTH),), str(path),
                          input_names=["x"], output_names=["out"], opset_version=17,
                          dynamo=False)
    return _signals(rng, prototypes, count)[0]


# ---------------------------------------------------------------- the tagger


def _tagged(rng: np.random.Generator, codes: np.ndarray,
            count: int) -> tuple[np.ndarray, np.ndarray]:
    tags = np.zeros((count, TAGS), np.float32)
    for row in tags:
        row[rng.choice(TAGS, size=int(rng.integers(1, 4)), replace=False)] = 1.0
    x = tags @ codes + rng.normal(size=(count, FEATURES)) * 0.3
    return x.astype(np.float32), tags


def tagger(path: Path, count: int) -> np.ndarray:
    """Train and export the tagger to ``path``; ``count`` held-out inputs [count, 32]."""
    rng = np.random.default_rng(1)
    codes = rng.normal(size=(TAGS, FEATURES))

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        x, y = _tagged(rng, codes, 64)
        return torch.from_numpy(x), torch.from_numpy(y)

    with _one_thread():
        net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 128), torch.nn.ReLU(),
                                  torch.nn.Linear(128, TAGS))
        _fit(net, batch, torch.nn.functional.binary_cross_entropy_with_logits, 400)
        torch.onnx.export(net, (torch.zeros(1, FEATURES),), str(path), input_names=["x"],
                          output_names=["tags"], opset_version=17, dynamo=False)
    return _tagged(rng, codes, count)[0]
