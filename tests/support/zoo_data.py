"""Realistic inputs for the zoo's models, made on the spot from packaged data (nothing downloads).

- photos: crops of scikit-image's bundled colour pictures (astronaut, coffee, chelsea, rocket),
  jittered in place and scale, as [N, H, W, 3] floats in [0, 1];
- faces: scikit-image's ``lfw_subset`` (100 faces then 100 non-faces, 25x25 grey) scaled up;
- text: random strings rendered with Pillow's bundled font, dark on light, as [N, H, W] in [0, 1]
  (the strings come back too, for recognizers' accuracy);
- audio: 16 kHz mono made with numpy: voiced "syllables" (harmonics under formant-like
  envelopes), chirps, tones and noise at several levels, as [N, samples] float32;
- text for a tokenizer: short English sentences drawn from a fixed word list.

Every generator takes ``n`` and a ``seed`` and is deterministic.
"""

from __future__ import annotations

import numpy as np

RATE = 16_000
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket")
ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"
WORDS = ("the device runs a small model on every frame while the camera keeps recording "
         "people walk past the door and a sensor reports the light level each minute "
         "quantized weights make the network smaller but some outputs drift away from the "
         "original values when the calibration data does not cover real inputs").split()


def photos(n: int, side: int, seed: int = 0) -> np.ndarray:
    """``n`` jittered square crops of the bundled colour photos, [n, side, side, 3] in [0, 1]."""
    import skimage.data
    from skimage.transform import resize

    rng = np.random.default_rng(seed)
    pictures = [getattr(skimage.data, name)() / 255.0 for name in PHOTOS]
    return np.stack([resize(_crop(pictures[i % len(pictures)], rng), (side, side), order=1)
                     for i in range(n)]).astype(np.float32)


def _crop(picture: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random square crop covering 40-100% of the picture's shorter side."""
    h, w = picture.shape[:2]
    size = int(min(h, w) * rng.uniform(0.4, 1.0))
    top, left = rng.integers(0, h - size + 1), rng.integers(0, w - size + 1)
    return picture[top:top + size, left:left + size, :3]


def faces(side: int) -> tuple[np.ndarray, np.ndarray]:
    """lfw_subset scaled to [200, side, side] grey in [0, 1], and labels (1 face, 0 not)."""
    from skimage.data import lfw_subset
    from skimage.transform import resize

    crops = np.stack([resize(c, (side, side), order=1) for c in lfw_subset()])
    labels = np.r_[np.ones(100), np.zeros(100)].astype(np.int64)
    return crops.astype(np.float32), labels


def rgb(grey: np.ndarray) -> np.ndarray:
    """[N, H, W] grey -> [N, H, W, 3]."""
    return np.repeat(grey[..., None], 3, axis=-1)


def strings(n: int, seed: int = 0, low: int = 4, high: int = 8) -> list[str]:
    """``n`` random lower-case strings of ``low``..``high`` characters from ALPHABET."""
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list(ALPHABET), rng.integers(low, high + 1))) for _ in range(n)]


def rendered(texts: list[str], height: int, width: int, seed: int = 0) -> np.ndarray:
    """Each text drawn dark-on-light at a jittered size and place, [N, height, width] in [0, 1]."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    out = np.empty((len(texts), height, width), np.float32)
    for i, text in enumerate(texts):
        image = Image.new("L", (width, height), int(rng.integers(200, 256)))
        font = ImageFont.load_default(size=int(height * rng.uniform(0.55, 0.75)))
        xy = (int(rng.integers(2, max(3, width // 10))), int(height * rng.uniform(0.05, 0.2)))
        ImageDraw.Draw(image).text(xy, text, fill=int(rng.integers(0, 80)), font=font)
        noisy = np.asarray(image, np.float32) / 255.0 + rng.normal(0, 0.03, (height, width))
        out[i] = np.clip(noisy, 0.0, 1.0)
    return out


def audio(n: int, samples: int, seed: int = 0) -> np.ndarray:
    """``n`` clips of ``samples`` at 16 kHz: a quarter each voiced, chirp, tone, noise."""
    rng = np.random.default_rng(seed)
    kinds = (_voiced, _chirp, _tone, _noise)
    clips = [kinds[i % 4](samples, rng) * rng.uniform(0.05, 0.8) for i in range(n)]
    return np.stack(clips).astype(np.float32)


def _time(samples: int) -> np.ndarray:
    return np.arange(samples) / RATE


def _voiced(samples: int, rng: np.random.Generator) -> np.ndarray:
    """Harmonics of a 90-250 Hz pitch under two formant bumps, syllable-rate amplitude."""
    t, pitch = _time(samples), rng.uniform(90, 250)
    formants = rng.uniform(300, 900), rng.uniform(900, 2500)
    wave = sum(_formant(k * pitch, formants) * np.sin(2 * np.pi * k * pitch * t)
               for k in range(1, int(4000 // pitch)))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(3, 6) * t) ** 2
    return _unit(wave * envelope + rng.normal(0, 0.01, samples))


def _formant(freq: float, formants: tuple[float, float]) -> float:
    return float(sum(np.exp(-((freq - f) / 200.0) ** 2) for f in formants) + 0.05)


def _chirp(samples: int, rng: np.random.Generator) -> np.ndarray:
    t = _time(samples)
    start, end = rng.uniform(100, 1000), rng.uniform(1000, 6000)
    rate = (end - start) / max(t[-1], 1e-3)
    return np.sin(2 * np.pi * (start * t + 0.5 * rate * t * t))


def _tone(samples: int, rng: np.random.Generator) -> np.ndarray:
    return np.sin(2 * np.pi * rng.uniform(200, 3000) * _time(samples))


def _noise(samples: int, rng: np.random.Generator) -> np.ndarray:
    return _unit(rng.normal(0, 1, samples))


def _unit(wave: np.ndarray) -> np.ndarray:
    return wave / max(float(np.abs(wave).max()), 1e-6)


def sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences of 5-14 words drawn from WORDS."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(5, 15))) for _ in range(n)]
