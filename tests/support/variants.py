"""Variants of the trained digits CNN as users bring them: with symbolic spatial dims, already
quantized by ONNX Runtime, and a recurrent digits reader quantized dynamically."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def dynamic_features(digits_onnx: Path, out: Path) -> Path:
    """The digits CNN's convolutional trunk (up to its last MaxPool) with symbolic batch,
    height and width: it runs on any image size, like a detector exported with dynamic axes."""
    import onnx
    from onnx.utils import extract_model

    trunk = out.with_name(out.stem + ".static.onnx")
    extract_model(str(digits_onnx), str(trunk), ["input"], ["/7/MaxPool_output_0"])
    model = onnx.load(str(trunk))
    for value, names in ((model.graph.input[0], ("batch", None, "height", "width")),
                         (model.graph.output[0], ("batch", None, "h8", "w8"))):
        for dim, name in zip(value.type.tensor_type.shape.dim, names, strict=True):
            if name is not None:
                dim.dim_param = name
    del model.graph.value_info[:]
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    trunk.unlink()
    return out


def quantized(digits_onnx: Path, calib: Path, out_dir: Path) -> dict[str, Path]:
    """The digits CNN quantized by ONNX Runtime: ``dynamic`` (ConvInteger + MatMulInteger),
    ``qoperator`` (QLinearConv, static) and ``qdq`` (QuantizeLinear/DequantizeLinear)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    samples = np.load(calib)[:32]

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.items = iter({"input": s[None]} for s in samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.items, None)

    out_dir.mkdir(parents=True, exist_ok=True)
    files = {name: out_dir / f"digits-{name}.onnx" for name in ("dynamic", "qoperator", "qdq")}
    quantize_dynamic(str(digits_onnx), str(files["dynamic"]), op_types_to_quantize=["Conv",
                     "MatMul", "Gemm"], weight_type=QuantType.QUInt8)
    for name, fmt in (("qoperator", QuantFormat.QOperator), ("qdq", QuantFormat.QDQ)):
        quantize_static(str(digits_onnx), str(files[name]), Reader(), quant_format=fmt)
    return files


def digits_lstm(out_dir: Path, *, epochs: int = 4, seed: int = 0) -> tuple[Path, Path]:
    """An LSTM trained here to read a digit row by row (8 steps of 8 pixels), exported to ONNX,
    and its ONNX Runtime dynamic int8 form (DynamicQuantizeLSTM)."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from sklearn.datasets import load_digits
    from torch import nn

    torch.manual_seed(seed)
    digits = load_digits()
    x = torch.from_numpy((digits.images / 16.0).astype(np.float32))  # [N, 8 rows, 8]
    y = torch.from_numpy(digits.target.astype(np.int64))

    class Reader(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(8, 32)
            self.head = nn.Linear(32, 10)

        def forward(self, rows: torch.Tensor) -> torch.Tensor:  # rows: [8, N, 8]
            out, _ = self.lstm(rows)
            return self.head(out[-1])

    model = Reader()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(epochs):
        for idx in torch.randperm(len(x)).split(64):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[idx].transpose(0, 1)), y[idx])
            loss.backward()
            opt.step()
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32, int8 = out_dir / "reader.onnx", out_dir / "reader-int8.onnx"
    torch.onnx.export(model.eval(), torch.zeros(8, 1, 8), str(fp32), input_names=["rows"],
                      output_names=["logits"], opset_version=17, dynamo=False)
    quantize_dynamic(str(fp32), str(int8), op_types_to_quantize=["LSTM", "MatMul", "Gemm"],
                     weight_type=QuantType.QInt8)
    return fp32, int8


OUTLIER = 1000.0


def with_outlier_channel(src: Path, dst: Path, calib: np.ndarray) -> Path:
    """The digits CNN with one activation outlier, fp32 unchanged (bench/docruns and the recovery
    tests). Scale the most often active hidden unit of the first Gemm by OUTLIER and divide the
    next Gemm's weights for it by OUTLIER (ReLU commutes with positive scaling)."""
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(str(src))
    gemm, head = [n for n in proto.graph.node if n.op_type == "Gemm"]
    inits = {i.name: i for i in proto.graph.initializer}
    weight, bias, head_weight = (numpy_helper.to_array(inits[name]).copy()
                                 for name in (gemm.input[1], gemm.input[2], head.input[1]))
    channel = int(np.argmax(np.mean(_hidden(src, gemm.output[0], calib) > 0, axis=0)))
    weight[channel] *= OUTLIER  # Gemm transB=1: row = hidden unit
    bias[channel] *= OUTLIER
    head_weight[:, channel] /= OUTLIER
    for name, array in ((gemm.input[1], weight), (gemm.input[2], bias),
                        (head.input[1], head_weight)):
        inits[name].CopyFrom(numpy_helper.from_array(array.astype(np.float32), name))
    onnx.save(proto, str(dst))
    return dst


def _hidden(path: Path, tensor: str, x: np.ndarray) -> np.ndarray:
    """The values of ``tensor`` inside the model at ``path`` for every sample of ``x``."""
    import onnx
    import onnxruntime as ort

    proto = onnx.load(str(path))
    proto.graph.output.append(onnx.helper.make_tensor_value_info(tensor, 1, None))
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return np.concatenate([session.run([tensor], {"input": x[i:i + 1]})[0]
                           for i in range(len(x))])
