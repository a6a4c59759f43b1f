"""Distillation: the pruned student learns to reproduce the original (the teacher) on the
user's unlabelled calibration data, within a time budget.

The loss is, per model output, the mean squared error to the teacher's output divided by the
variance of the teacher's output over the calibration set (so outputs of any scale weigh the
same), on logits where an output is a softmax. Each batch mixes pairs of samples and adds a
little noise: the teacher labels whatever it is shown, so augmented inputs are free data.
Both networks stay in eval mode (batch-norm statistics frozen); Adam, cosine-decayed over the
budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["Distilled", "distill"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Distilled:
    """What distillation did."""

    seconds: float
    steps: int
    samples: int
    loss_before: float
    loss_after: float


def distill(student: nn.Module, teacher: nn.Module, inputs: list[torch.Tensor], *,
            budget_s: float, max_steps: int | None = None, batch: int = 32,
            lr: float = 1e-3, seed: int = 0) -> Distilled:
    """Train ``student`` towards ``teacher`` on ``inputs`` (one stacked tensor per model
    input) for at most ``budget_s`` seconds and ``max_steps`` steps."""
    torch.manual_seed(seed)
    student.eval()
    teacher.eval()
    with _logits(student, teacher):
        scales = _scales(teacher, inputs)
        before = _loss_on(student, teacher, inputs, scales)
        start = time.perf_counter()
        steps = _train(student, teacher, inputs, scales, budget_s, max_steps, batch, lr)
        seconds = time.perf_counter() - start
        after = _loss_on(student, teacher, inputs, scales)
    return Distilled(seconds=seconds, steps=steps, samples=int(inputs[0].shape[0]),
                     loss_before=before, loss_after=after)


class _logits:
    """Within: softmax outputs give their logits (the modules' ``logits`` flag)."""

    def __init__(self, *modules: nn.Module) -> None:
        self.modules = modules

    def __enter__(self) -> None:
        for module in self.modules:
            setattr(module, "logits", True)  # noqa: B010 - an OnnxModule's flag

    def __exit__(self, *exc: object) -> None:
        for module in self.modules:
            setattr(module, "logits", False)  # noqa: B010


def _train(student: nn.Module, teacher: nn.Module, inputs: list[torch.Tensor],
           scales: list[torch.Tensor], budget_s: float, max_steps: int | None, batch: int,
           lr: float) -> int:
    """Adam steps until the budget is spent; the number of steps."""
    if budget_s <= 0 or max_steps == 0:
        return 0
    params = [p for p in student.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=lr)
    start, steps = time.perf_counter(), 0
    while (spent := time.perf_counter() - start) < budget_s and (
            max_steps is None or steps < max_steps):
        for group in optimizer.param_groups:
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * min(1.0, spent / budget_s)))
        feeds = _augmented(_batch(inputs, batch))
        with torch.no_grad():
            target = teacher(*feeds)
        loss = _loss(student(*feeds), target, scales)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
    return steps


def _batch(inputs: list[torch.Tensor], size: int) -> list[torch.Tensor]:
    index = torch.randint(0, int(inputs[0].shape[0]), (size,))
    return [x[index] for x in inputs]


def _augmented(feeds: list[torch.Tensor]) -> list[torch.Tensor]:
    """A quarter of the batch as it is; the rest shifted (images), with its contrast jittered,
    half of it mixed with a shuffled copy, plus a little noise."""
    size = int(feeds[0].shape[0])
    order = torch.randperm(size)
    mix = torch.empty(size).uniform_(0.6, 1.0)
    mix[: size // 2] = 1.0
    plain = torch.arange(size) < size // 4
    out = []
    for x in feeds:
        weight = mix.reshape(-1, *([1] * (x.dim() - 1)))
        varied = _shifted(x) * torch.empty_like(weight).uniform_(0.8, 1.2)
        varied = weight * varied + (1 - weight) * x[order]
        varied = varied + torch.randn_like(x) * (0.02 * x.std())
        out.append(torch.where(plain.reshape(weight.shape), x, varied))
    return out


def _shifted(x: torch.Tensor) -> torch.Tensor:
    """An image batch (NCHW or NHWC, at most 4 channels) rolled by up to 1/8 of its height and
    width; any other input as it is."""
    if x.dim() != 4:
        return x
    axes = (2, 3) if x.shape[1] <= 4 else (1, 2) if x.shape[3] <= 4 else None
    if axes is None:
        return x
    shifts = [int(torch.randint(-(x.shape[a] // 8), x.shape[a] // 8 + 1, ()).item())
              for a in axes]
    return torch.roll(x, shifts=shifts, dims=axes)


def _chunks(inputs: list[torch.Tensor], size: int = 64) -> Iterator[list[torch.Tensor]]:
    for first in range(0, int(inputs[0].shape[0]), size):
        yield [x[first:first + size] for x in inputs]


def _scales(teacher: nn.Module, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each output's variance over the calibration set (a floor keeps constants finite)."""
    with torch.no_grad():
        parts = [teacher(*chunk) for chunk in _chunks(inputs)]
    outputs = [torch.cat([p[i] for p in parts]) for i in range(len(parts[0]))]
    return [torch.clamp(o.float().var(), min=1e-8) for o in outputs]


def _loss(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...],
          scales: list[torch.Tensor]) -> torch.Tensor:
    terms = [torch.mean((g - w) ** 2) / s for g, w, s in zip(got, want, scales, strict=True)]
    return torch.stack(terms).mean()


def _loss_on(student: nn.Module, teacher: nn.Module, inputs: list[torch.Tensor],
             scales: list[torch.Tensor]) -> float:
    """The loss over the whole (un-augmented) calibration set."""
    total, count = 0.0, 0
    with torch.no_grad():
        for chunk in _chunks(inputs):
            size = int(chunk[0].shape[0])
            total += float(_loss(student(*chunk), teacher(*chunk), scales)) * size
            count += size
    return total / max(count, 1)
