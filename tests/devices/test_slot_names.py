"""A model's slot name on the device: --name checked, the default taken from the file the user
gave (never from the reference ONNX edge made of it, whose name carries a content hash)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from devices.release import check_name, slot_name_for, slot_of_bundle
from edge.core.errors import UsageError


@pytest.mark.parametrize("path, name", [
    ("models/digits.onnx", "digits"),
    ("C:\\\\models\\\\Face Detector v2.onnx", "face-detector-v2"),
    ("/x/mobilenet_v2-1.0.onnx", "mobilenet_v2-1.0"),
    ("/x/.hidden.onnx", "hidden"),
    ("/x/default.onnx", "default-model"),
    ("/x/模型.onnx", "model"),
    ("/x/" + "a" * 80 + ".onnx", "a" * 64),
])
def test_the_default_name_is_the_files_stem_made_a_name(path: str, name: str) -> None:
    assert slot_name_for(path) == name
    assert check_name(name) == name


def test_a_converted_model_is_named_after_the_users_file() -> None:
    reference = SimpleNamespace(path="/cache/reference/face.pt-4ec281f507e93dcc.onnx")
    bundle = SimpleNamespace(origin=SimpleNamespace(path="/home/me/face.pt"), source=reference)
    assert slot_of_bundle(bundle) == "face"  # type: ignore[arg-type]
    assert slot_of_bundle(SimpleNamespace(origin=None, source=reference)) == (  # type: ignore
        "face.pt-4ec281f507e93dcc")


@pytest.mark.parametrize("bad", ["", "Face", "../x", "-x", ".x", "a/b", "x" * 65, "a b"])
def test_a_bad_name_is_one_usage_error(bad: str) -> None:
    with pytest.raises(UsageError, match="--name"):
        check_name(bad)
