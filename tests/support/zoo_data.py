"""Realistic inputs for the zoo's models, made on the spot from packaged data (nothing downloads).

- photos: crops of scikit-image's bundled colour pictures (astronaut, coffee, chelsea, rocket),
  jittered in place and scale, as [N, H, W, 3] floats in [0, 1];
- faces: scikit-image's ``lfw_subset`` (100 faces then 100 non-faces, 25x25 grey) scaled up;
- text: random strings rendered with Pillow's bundled font, dark on light, as [N, H, W] in [0, 1]
  (the strings come back too, for recognizers' accuracy);
- audio: 16 kHz mono made with numpy: voiced "syllables" (harmonics under formant-like
  envelopes), chirps, tones and noise at several levels, as [N, samples] float32;
- text for a tokenizer: short English sentences drawn from a fixed word list.
- notes: 22.05 kHz clips of plucked harmonic notes (MIDI 40-84, some overlapping), for a
  pitch transcriber;
- files: the bytes of 18 file types (PNG/JPEG/GIF/BMP, zip/gzip/bz2/tar, .npy, PDF, JSON,
  CSV, HTML, XML, Python, Markdown, INI, shell) with random content, for a content-type model.

Every generator takes ``n`` and a ``seed`` and is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable

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


def songs(n: int, samples: int, rate: int = 48_000, seed: int = 0) -> np.ndarray:
    """``n`` clips of bird-like song at ``rate``: 3-12 syllables, each a 40-250 ms sweep
    between 1.5 and 9 kHz with its second harmonic, over wind-like noise; every fifth clip
    noise alone. [n, samples] float32."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate
    clips = rng.normal(0, 1, (n, samples)).cumsum(1) * 1e-3  # brown noise
    clips -= clips.mean(1, keepdims=True)
    for i in range(n):
        if i % 5 != 4:
            clips[i] += _song(t, rng)
        clips[i] = _unit(clips[i]) * rng.uniform(0.1, 0.8)
    return clips.astype(np.float32)


def _song(t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    song = np.zeros(t.size)
    low, high = sorted(rng.uniform(1500, 9000, 2))
    for start in np.sort(rng.uniform(0, t[-1] - 0.3, int(rng.integers(3, 13)))):
        length = rng.uniform(0.04, 0.25)
        inside = (t >= start) & (t < start + length)
        u = (t[inside] - start) / length
        freq = low + (high - low) * (u if rng.random() < 0.5 else 1 - u)
        phase = 2 * np.pi * np.cumsum(freq) / (1 / (t[1] - t[0]))
        song[inside] += np.sin(np.pi * u) * (np.sin(phase) + 0.3 * np.sin(2 * phase))
    return song


def sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences of 5-14 words drawn from WORDS."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(5, 15))) for _ in range(n)]


def notes(n: int, samples: int, rate: int = 22_050, seed: int = 0) -> np.ndarray:
    """``n`` clips of 1-4 plucked notes (MIDI 40-84: harmonics under a decay, some
    overlapping), [n, samples] float32; every third clip opens with silence, as the first
    window of a padded recording does."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate
    clips = np.zeros((n, samples))
    for i in range(n):
        for _ in range(int(rng.integers(1, 5))):
            clips[i] += _note(t, rng) * rng.uniform(0.2, 1.0)
        clips[i] = _unit(clips[i]) * rng.uniform(0.1, 0.8) + rng.normal(0, 0.002, samples)
        if i % 3 == 0:
            clips[i, : samples // 11] = 0.0
    return clips.astype(np.float32)


def _note(t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    pitch = 440.0 * 2 ** ((int(rng.integers(40, 85)) - 69) / 12)
    start, length = rng.uniform(0, t[-1] * 0.8), rng.uniform(0.15, 1.2)
    local = t - start
    on = (local >= 0) & (local < length)
    wave = sum(np.sin(2 * np.pi * k * pitch * local) / k for k in range(1, 6))
    return np.where(on, wave * np.exp(-3.0 * np.clip(local, 0, None)), 0.0)


def files(n: int, seed: int = 0) -> list[bytes]:
    """``n`` files' contents of varied types made on the spot: images (PNG, JPEG, GIF, BMP),
    archives (zip, gzip, bz2, tar), numpy (.npy), PDF, and text (JSON, CSV, HTML, XML, Python,
    Markdown, INI, shell), each with random content."""
    rng = np.random.default_rng(seed)
    makers = (*[_image(f) for f in ("PNG", "JPEG", "GIF", "BMP")], _zip, _gzip, _bz2, _tar,
              _npy, _pdf, _json, _csv, _html, _xml, _python, _markdown, _ini, _shell)
    return [makers[i % len(makers)](rng) for i in range(n)]


def _words(rng: np.random.Generator, low: int = 3, high: int = 12) -> str:
    return " ".join(rng.choice(WORDS, int(rng.integers(low, high))))


def _image(kind: str) -> Callable[[np.random.Generator], bytes]:
    def make(rng: np.random.Generator) -> bytes:
        import io

        from PIL import Image

        side = int(rng.integers(32, 160))
        picture = photos(1, side, seed=int(rng.integers(1 << 30)))[0]
        out = io.BytesIO()
        Image.fromarray((picture * 255).astype(np.uint8)).save(out, format=kind)
        return out.getvalue()
    return make


def _text(rng: np.random.Generator, lines: int = 20) -> bytes:
    return "\n".join(_words(rng) for _ in range(int(rng.integers(3, lines)))).encode()


def _zip(rng: np.random.Generator) -> bytes:
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for k in range(int(rng.integers(1, 4))):
            archive.writestr(f"{rng.choice(WORDS)}{k}.txt", _text(rng))
    return out.getvalue()


def _gzip(rng: np.random.Generator) -> bytes:
    import gzip

    return gzip.compress(_text(rng, 60), mtime=0)


def _bz2(rng: np.random.Generator) -> bytes:
    import bz2

    return bz2.compress(_text(rng, 60))


def _tar(rng: np.random.Generator) -> bytes:
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        data = _text(rng)
        info = tarfile.TarInfo(f"{rng.choice(WORDS)}.txt")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _npy(rng: np.random.Generator) -> bytes:
    import io

    out = io.BytesIO()
    np.save(out, rng.normal(size=(int(rng.integers(2, 60)), int(rng.integers(2, 30)))))
    return out.getvalue()


def _pdf(rng: np.random.Generator) -> bytes:
    text = _words(rng).replace("(", "").replace(")", "")
    stream = f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET".encode()
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> >> >>",
            b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    body, offsets = b"%PDF-1.4\n", []
    for k, obj in enumerate(objs, 1):
        offsets.append(len(body))
        body += b"%d 0 obj\n%s\nendobj\n" % (k, obj)
    xref = b"".join(b"%010d 00000 n \n" % o for o in offsets)
    return body + b"xref\n0 %d\n0000000000 65535 f \n%strailer\n<< /Size %d /Root 1 0 R >>\n" \
        b"startxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref, len(objs) + 1, len(body))


def _json(rng: np.random.Generator) -> bytes:
    import json

    rows = [{"id": int(rng.integers(1000)), "name": str(rng.choice(WORDS)), "note": _words(rng),
             "value": round(float(rng.normal()), 3)} for _ in range(int(rng.integers(1, 12)))]
    return json.dumps({"items": rows}, indent=int(rng.integers(0, 3)) or None).encode()


def _csv(rng: np.random.Generator) -> bytes:
    rows = ["id,name,value,flag"] + [
        f"{k},{rng.choice(WORDS)},{rng.normal():.4f},{bool(rng.integers(2))}"
        for k in range(int(rng.integers(5, 80)))]
    return "\n".join(rows).encode()


def _html(rng: np.random.Generator) -> bytes:
    items = "".join(f"<li><a href=\"/{rng.choice(WORDS)}\">{_words(rng)}</a></li>\n"
                    for _ in range(int(rng.integers(2, 10))))
    return (f"<!DOCTYPE html>\n<html>\n<head><title>{_words(rng, 2, 5)}</title></head>\n"
            f"<body>\n<h1>{_words(rng, 2, 5)}</h1>\n<p>{_words(rng)}</p>\n<ul>\n{items}</ul>\n"
            "</body>\n</html>\n").encode()


def _xml(rng: np.random.Generator) -> bytes:
    rows = "".join(f"  <entry id=\"{k}\" kind=\"{rng.choice(WORDS)}\">{_words(rng)}</entry>\n"
                   for k in range(int(rng.integers(2, 15))))
    return f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<log>\n{rows}</log>\n".encode()


def _python(rng: np.random.Generator) -> bytes:
    funcs = []
    for _ in range(int(rng.integers(1, 5))):
        name, arg = rng.choice(WORDS, 2)
        funcs.append(f"def {name}_{rng.integers(99)}({arg}, count=3):\n"
                     f"    \"\"\"{_words(rng).capitalize()}.\"\"\"\n"
                     f"    result = [{arg} * k for k in range(count)]\n"
                     f"    if len(result) > {rng.integers(1, 9)}:\n"
                     f"        return sum(result)\n    return None\n")
    return ("import os\nimport sys\n\n\n" + "\n\n".join(funcs)
            + "\n\nif __name__ == \"__main__\":\n    print(sys.argv)\n").encode()


def _markdown(rng: np.random.Generator) -> bytes:
    parts = [f"# {_words(rng, 2, 5)}\n"]
    for _ in range(int(rng.integers(1, 4))):
        bullets = "".join(f"- {_words(rng)}\n" for _ in range(int(rng.integers(1, 5))))
        parts.append(f"## {_words(rng, 2, 4)}\n\n{_words(rng, 8, 20)}.\n\n{bullets}")
    return "\n".join(parts).encode()


def _ini(rng: np.random.Generator) -> bytes:
    sections = []
    for _ in range(int(rng.integers(1, 4))):
        keys = "".join(f"{rng.choice(WORDS)} = {rng.integers(100)}\n"
                       for _ in range(int(rng.integers(1, 6))))
        sections.append(f"[{rng.choice(WORDS)}]\n{keys}")
    return "\n".join(sections).encode()


def _shell(rng: np.random.Generator) -> bytes:
    lines = [f"echo \"{_words(rng, 2, 6)}\"" if rng.integers(2) else
             f"mkdir -p /tmp/{rng.choice(WORDS)} && cd /tmp/{rng.choice(WORDS)}"
             for _ in range(int(rng.integers(2, 10)))]
    return ("#!/bin/sh\nset -e\n" + "\n".join(lines) + "\n").encode()
