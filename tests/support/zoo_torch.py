"""The zoo's PyTorch side: resemblyzer's voice encoder made into TorchScript from its packaged
weights, and the mel spectrogram it takes (librosa's, in numpy).

resemblyzer 0.1.4 ships ``pretrained.pt``, a training checkpoint (a state_dict, which edge
rightly refuses as "not a module"); its ``VoiceEncoder`` is three LSTM layers (40 -> 256), a
linear layer, ReLU and an L2 norm. ``voice_encoder`` rebuilds that module, loads the weights
and saves it with ``torch.jit.script``: the TorchScript file a user would hand to edge.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

RATE, N_FFT, HOP, N_MELS = 16_000, 400, 160, 40  # resemblyzer/hparams.py


def voice_encoder(source: Path, out: Path) -> None:
    """TorchScript of resemblyzer's VoiceEncoder with the checkpoint's weights, at ``out``."""
    import torch
    from torch import nn

    class VoiceEncoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(N_MELS, 256, 3, batch_first=True)
            self.linear = nn.Linear(256, 256)
            self.relu = nn.ReLU()

        def forward(self, mels: torch.Tensor) -> torch.Tensor:
            _, (hidden, _) = self.lstm(mels)
            embeds = self.relu(self.linear(hidden[-1]))
            return embeds / torch.norm(embeds, dim=1, keepdim=True)

    state = torch.load(str(source), map_location="cpu", weights_only=True)["model_state"]
    net = VoiceEncoder()
    net.load_state_dict({k: v for k, v in state.items() if not k.startswith("similarity")})
    torch.jit.save(torch.jit.script(net.eval()), str(out))


def mels(wavs: np.ndarray) -> np.ndarray:
    """resemblyzer's ``wav_to_mel_spectrogram`` of each clip (volume normalized to -30 dBFS
    first, as its ``preprocess_wav`` does): power mel frames [n, frames, 40] float32."""
    bank = _mel_bank()
    out = []
    for wav in wavs.astype(np.float64):
        wav = wav * 10 ** ((-30 - 10 * np.log10(np.mean(wav ** 2) + 1e-12)) / 20)
        out.append(_power(wav) @ bank.T)
    return np.stack(out).astype(np.float32)


def _power(wav: np.ndarray) -> np.ndarray:
    """|STFT|^2 [frames, 1 + N_FFT // 2]: periodic Hann window, centred (zero padding)."""
    padded = np.pad(wav, N_FFT // 2)
    count = 1 + (len(padded) - N_FFT) // HOP
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)
    frames = np.stack([padded[k * HOP:k * HOP + N_FFT] for k in range(count)]) * window
    return np.abs(np.fft.rfft(frames, axis=1)) ** 2


def _mel_bank() -> np.ndarray:
    """librosa's default mel filters (Slaney scale and area norm) [N_MELS, 1 + N_FFT // 2]."""
    hz = _mel_to_hz(np.linspace(0.0, _hz_to_mel(RATE / 2), N_MELS + 2))
    freqs = np.linspace(0, RATE / 2, 1 + N_FFT // 2)
    ramps = hz[:, None] - freqs[None]
    steps = np.diff(hz)
    lower, upper = -ramps[:-2] / steps[:-1, None], ramps[2:] / steps[1:, None]
    bank = np.maximum(0, np.minimum(lower, upper))
    return bank * (2.0 / (hz[2:] - hz[:-2]))[:, None]


_SP, _LOG_HZ, _LOG_MEL, _LOG_STEP = 200.0 / 3, 1000.0, 15.0, np.log(6.4) / 27.0


def _hz_to_mel(f: float) -> float:
    return _LOG_MEL + np.log(f / _LOG_HZ) / _LOG_STEP if f >= _LOG_HZ else f / _SP


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    return np.where(mel >= _LOG_MEL, _LOG_HZ * np.exp(_LOG_STEP * (mel - _LOG_MEL)), mel * _SP)
