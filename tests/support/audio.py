"""An audio model shaped like a streaming voice-activity detector (silero-VAD's interface).

Inputs: ``audio`` [1, 256] float32 (one chunk of samples), ``state`` [2, 1, 32] float32 (the
LSTM's h and c carried between chunks) and ``sr`` int64 of shape [] (the sample rate: a 0-d
scalar). Outputs: ``prob`` [1, 1] (speech probability) and ``stateN`` [2, 1, 32]. The chunk goes
through a framed energy front end (8 frames of 32 samples -> Conv1D features), an LSTM over the
frames started from ``state``, and a sigmoid head; ``sr`` scales the front end (16 kHz is 1.0).

The weights are fitted (least squares on the head) so that ``prob`` tells a tone burst from
silence-like noise, and the data is synthesized audio: tones and noise in chunks, the state
carried chunk to chunk as a streaming caller does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CHUNK, FRAME, HIDDEN, FEATURES = 256, 32, 32, 16
RATE = 16000


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "conv_w": (rng.standard_normal((FEATURES, 1, FRAME)) / np.sqrt(FRAME)).astype(np.float32),
        "lstm_w": (rng.standard_normal((1, 4 * HIDDEN, FEATURES)) * 0.3).astype(np.float32),
        "lstm_r": (rng.standard_normal((1, 4 * HIDDEN, HIDDEN)) * 0.2).astype(np.float32),
        "lstm_b": np.zeros((1, 8 * HIDDEN), np.float32),
        "head_w": (rng.standard_normal((HIDDEN, 1)) * 0.5).astype(np.float32),
        "head_b": np.zeros((1,), np.float32),
        "frames": np.array([1, 1, CHUNK], np.int64),
        "split": np.array([1, 1], np.int64),
        "rate": np.array(RATE, np.float32),
    }


def _nodes() -> list:
    from onnx import helper

    make = helper.make_node
    return [
        make("Cast", ["sr"], ["sr_f"], to=1),
        make("Div", ["sr_f", "rate"], ["sr_scale"]),
        make("Mul", ["audio", "sr_scale"], ["scaled"]),
        make("Reshape", ["scaled", "frames"], ["wave"]),
        make("Conv", ["wave", "conv_w"], ["conv"], strides=[FRAME]),  # [1, F, frames]
        make("Abs", ["conv"], ["energy"]),
        make("Softplus", ["energy"], ["feat"]),
        make("Transpose", ["feat"], ["seq"], perm=[2, 0, 1]),  # [frames, 1, F]
        make("Split", ["state", "split"], ["h0", "c0"], axis=0),
        make("LSTM", ["seq", "lstm_w", "lstm_r", "lstm_b", "", "h0", "c0"],
             ["", "h_n", "c_n"], hidden_size=HIDDEN),
        make("Concat", ["h_n", "c_n"], ["stateN"], axis=0),
        make("Squeeze", ["h_n", "axis0"], ["last"]),
        make("MatMul", ["last", "head_w"], ["logit_raw"]),
        make("Add", ["logit_raw", "head_b"], ["logit"]),
        make("Sigmoid", ["logit"], ["prob"]),
    ]


def build(path: Path, seed: int = 0) -> Path:
    """Write the model (opset 17) and return its path; the head is fitted on synthetic audio."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = _weights(seed)
    weights["axis0"] = np.array([0], np.int64)
    graph = helper.make_graph(
        _nodes(), "streaming_vad",
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, CHUNK]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 1, HIDDEN]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1]),
         helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, 1, HIDDEN])],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(_fitted(model), str(path))
    return path


def _fitted(model):
    """Fit the head so that prob separates tone chunks (1) from noise chunks (0)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(helper.make_tensor_value_info("last", onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    audio, states, rates, labels = _chunks(96, seed=7, session=session)
    hidden = np.stack([session.run(["last"], {"audio": a, "state": s,
                                                  "sr": np.asarray(r)})[0][0]
                       for a, s, r in zip(audio, states, rates, strict=True)])
    design = np.c_[hidden, np.ones(len(hidden))]
    target = np.where(labels > 0, 3.0, -3.0)
    solution = np.linalg.lstsq(design, target, rcond=None)[0].astype(np.float32)
    for init in model.graph.initializer:
        if init.name == "head_w":
            init.CopyFrom(numpy_helper.from_array(solution[:-1, None], "head_w"))
        elif init.name == "head_b":
            init.CopyFrom(numpy_helper.from_array(solution[-1:], "head_b"))
    return model


def _chunks(count: int, *, seed: int, session=None):
    """(audio [N,1,256], state [N,2,1,32], sr [N] int64, labels [N]): tones (1) and noise (0),
    the state carried from chunk to chunk when a session is given (else zeros)."""
    rng = np.random.default_rng(seed)
    t = np.arange(CHUNK) / RATE
    audio, states, labels = [], [], []
    state = np.zeros((2, 1, HIDDEN), np.float32)
    for i in range(count):
        tone = i % 4 < 2
        freq = rng.uniform(200, 2000)
        wave = (0.5 * np.sin(2 * np.pi * freq * t) if tone else np.zeros(CHUNK))
        wave = wave + rng.normal(0, 0.02 if tone else 0.05, CHUNK)
        chunk = wave.astype(np.float32)[None]
        audio.append(chunk)
        states.append(state)
        labels.append(int(tone))
        if session is not None:
            state = session.run(["stateN"], {"audio": chunk, "state": state,
                                             "sr": np.array(RATE, np.int64)})[0]
    rates = np.full(count, RATE, np.int64)
    return np.stack(audio), np.stack(states), rates, np.array(labels)


def data(model: Path, path: Path, count: int = 64, seed: int = 1) -> Path:
    """An .npz of streamed chunks for ``model``: audio [N,1,256], state [N,2,1,32] as carried
    from chunk to chunk and sr [N] (one 0-d value per sample)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    audio, states, rates, _ = _chunks(count, seed=seed, session=session)
    np.savez(path, audio=audio, state=states, sr=rates)
    return path
