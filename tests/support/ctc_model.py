"""A small CTC text recognizer, trained on synthetic feature frames (a few seconds, one
thread) and exported as PyTorch writes CTC scores: time first, [T, 1, C] raw scores, its ONNX
output declared [1, seqlen]. Shared by tests/edge/test_output_kinds.py and the docs' optimize
session (bench/docruns/files.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch

FEATURES, FRAMES, CLASSES = 8, 32, 6  # class 0 is the CTC blank


def build(path: Path, count: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Train and export the recognizer to ``path``; ``count`` held-out utterances (frames
    [T, F]) and their symbols, the same for the same arguments."""
    rng = np.random.default_rng(0)
    codes = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32) * 2
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        net = _train(rng, codes)
    finally:
        torch.set_num_threads(threads)
    _export(net, path)
    inputs, labels = zip(*(_utterance(rng, codes) for _ in range(count)), strict=True)
    return list(inputs), list(labels)


def _utterance(rng: np.random.Generator, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Feature frames [T, F] holding 2-4 symbols (each 2-4 frames of its code), and the symbols."""
    label = rng.integers(1, CLASSES, size=int(rng.integers(2, 5)))
    frames = rng.normal(size=(FRAMES, FEATURES)).astype(np.float32) * 0.3
    start = int(rng.integers(0, 3))
    for symbol in label:
        width = int(rng.integers(2, 5))
        frames[start:start + width] += codes[symbol]
        start += width + int(rng.integers(1, 3))
    return frames, label


def _network() -> torch.nn.Module:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Conv1d(FEATURES, 24, 3, padding=1)
            self.b = torch.nn.Conv1d(24, 24, 3, padding=1)
            self.c = torch.nn.Conv1d(24, CLASSES, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # [N, T, F] -> [T, N, C]
            hidden = torch.relu(self.b(torch.relu(self.a(x.transpose(1, 2)))))
            return self.c(hidden).permute(2, 0, 1)

    return Net()


def _train(rng: np.random.Generator, codes: np.ndarray) -> torch.nn.Module:
    """CTC loss, 400 steps of 32 utterances on one thread (a few seconds)."""
    torch.manual_seed(0)
    net = _network()
    optimizer = torch.optim.Adam(net.parameters(), 1e-2)
    ctc = torch.nn.CTCLoss(blank=0)
    for _ in range(400):
        xs, labels = zip(*(_utterance(rng, codes) for _ in range(32)), strict=True)
        scores = net(torch.from_numpy(np.stack(xs))).log_softmax(-1)
        loss = ctc(scores, torch.from_numpy(np.concatenate(labels)), torch.full((32,), FRAMES),
                   torch.tensor([len(label) for label in labels]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return net.eval()


def _export(net: torch.nn.Module, path: Path) -> None:
    """ONNX with the output declared [1, seqlen] (it produces [T, 1, C])."""
    torch.onnx.export(net, (torch.zeros(1, FRAMES, FEATURES),), str(path), input_names=["x"],
                      output_names=["logits"], opset_version=17, dynamo=False)
    model = onnx.load(str(path))
    shape = model.graph.output[0].type.tensor_type.shape
    del shape.dim[:]
    shape.dim.add().dim_value = 1
    shape.dim.add().dim_param = "seqlen"
    onnx.save(model, str(path))
