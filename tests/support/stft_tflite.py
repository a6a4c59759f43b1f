"""A TFLite audio classifier with its STFT inside the graph (RFFT2D, then REDUCE_MIN over the
log-magnitudes), as on-device keyword spotters ship: no converter turns it into ONNX (issue 41
item 5). Built with TensorFlow's own converter, small weights fixed by a seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np

SAMPLES, FRAME, STEP, CLASSES = 4000, 256, 128, 6


def build(path: Path) -> Path:
    """Write the classifier to ``path`` (waveform [1, 4000] -> [1, 6] scores)."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    bins = FRAME // 2 + 1
    weight = tf.constant(rng.normal(size=(bins, CLASSES)).astype(np.float32) * 0.1)

    @tf.function(input_signature=[tf.TensorSpec([1, SAMPLES], tf.float32, name="wave")])
    def classify(wave: tf.Tensor) -> tf.Tensor:
        spectrum = tf.abs(tf.signal.stft(wave, FRAME, STEP, fft_length=FRAME))
        logs = tf.math.log(spectrum + 1e-6)
        floor = tf.reduce_min(logs, axis=1, keepdims=True)  # per-bin noise floor
        return tf.reduce_mean(logs - floor, axis=1) @ weight

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [classify.get_concrete_function()], classify)
    path.write_bytes(converter.convert())
    return path


def waves(count: int, seed: int = 1) -> np.ndarray:
    """``count`` waveforms [count, 1, 4000]: a few tones in noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(SAMPLES) / 8000.0
    tones = [np.sin(2 * np.pi * rng.uniform(100, 3000, size=(3, 1)) * t).sum(0)
             for _ in range(count)]
    noise = rng.normal(size=(count, SAMPLES)) * 0.1
    return (np.stack(tones) + noise).astype(np.float32)[:, None, :]
