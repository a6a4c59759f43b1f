"""KServe v2 request parsing (edge/flows/cloud/tensors.py) without a server: every malformed
input is a RequestError (a 400), never another exception (a 500)."""

from __future__ import annotations

import numpy as np
import pytest

from edge.flows.cloud.tensors import RequestError, TensorSpec, parse_inputs, split_body

SPECS = (TensorSpec(name="0", datatype="FP32", shape=(-1, 2)),)


def _parse(body: bytes, header_len: str | None = None) -> dict[str, np.ndarray]:
    doc, binary = split_body(body, header_len)
    return parse_inputs(SPECS, doc, binary)


def test_a_good_request_parses() -> None:
    feeds = _parse(b'{"inputs": [{"name": "0", "shape": [1, 2], "datatype": "FP32", '
                   b'"data": [1, 2]}]}')
    np.testing.assert_array_equal(feeds["0"], np.array([[1, 2]], np.float32))


@pytest.mark.parametrize("body", [
    b'{"inputs": [{"name": 0, "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}',
    b'{"inputs": [{"name": ["0"], "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}',
    b'{"inputs": [{"name": null, "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}',
    b'{"inputs": [{"name": "0", "shape": [1, 2], "datatype": "FP32", "data": [1, "x"]}]}',
    b'{"inputs": [{"name": "0", "shape": [1, 2], "datatype": "FP32", "data": [[1], [2, 3]]}]}',
    b'{"inputs": [{"name": "0", "shape": [0, 2], "datatype": "FP32", "data": []}]}',
    b'{"inputs": [{"name": "0", "shape": [1, true], "datatype": "FP32", "data": [1, 2]}]}',
    b'{"inputs": [{"name": "0", "shape": [1, 2], "datatype": "FP64", "data": [1, 2]}]}',
    b'{"inputs": {"name": "0"}}',
    b'[1, 2]',
])
def test_a_malformed_request_is_a_request_error(body: bytes) -> None:
    with pytest.raises(RequestError) as caught:
        _parse(body)
    assert caught.value.status == 400


def test_binary_data_must_add_up() -> None:
    head = b'{"inputs": [{"name": "0", "shape": [1, 2], "datatype": "FP32", ' \
           b'"parameters": {"binary_data_size": 8}}]}'
    feeds = _parse(head + np.array([1, 2], np.float32).tobytes(), str(len(head)))
    np.testing.assert_array_equal(feeds["0"], np.array([[1, 2]], np.float32))
    for extra, length in ((b"\0" * 4, str(len(head))), (b"\0" * 12, str(len(head))),
                          (b"\0" * 8, "-1"), (b"\0" * 8, "x"), (b"\0" * 8, "99999")):
        with pytest.raises(RequestError):
            _parse(head + extra, length)
