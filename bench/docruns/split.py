"""One session for docs/commands/partition.md, serve-cloud.md and run-split.md: the splits made
on the partition page are served and run on the other two (the servers on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path

from . import files
from .models import DOCS_DIR
from .steps import Session, head_tail, json_lists, on_page, upto

WORK = DOCS_DIR / "split"
NET = "splitnet/splitnet.onnx"
FRAMES = "splitnet/splitnet_frames.npy"
SPLIT = "splitnet-rpi-zero-2w-split"
URL = "http://127.0.0.1:18555"
AUTH = "-H 'Authorization: Bearer s3cret'"
TRAIN = ("python -c \"from pathlib import Path; from tests.support.splitnet import "
         f"train_splitnet; print(train_splitnet(Path('{WORK}/splitnet')))\"")

#: Writes req.json: one KServe v2 JSON input, the int8 cut tensor of the first frame.
MAKE_REQUEST = f"""\
import json

import numpy as np
import onnxruntime as ort

ort_cpu = dict(providers=["CPUExecutionProvider"])
head = ort.InferenceSession("{SPLIT}/head.onnx", **ort_cpu)
tail = ort.InferenceSession("{SPLIT}/tail.onnx", **ort_cpu)
frame = np.load("{FRAMES}")[:1]
outputs = dict(zip([o.name for o in head.get_outputs()],
                   head.run(None, {{head.get_inputs()[0].name: frame}})))
name = tail.get_inputs()[0].name
tensor = outputs[name]
request = {{"inputs": [{{"name": name, "shape": list(tensor.shape), "datatype": "UINT8",
                        "data": tensor.flatten().tolist()}}]}}
json.dump(request, open("req.json", "w"))
"""


def _files(work: Path) -> None:
    files.write(work, {"make_req.py": MAKE_REQUEST})


def _partition(tail: str, *, lines: tuple[str, ...] = ()) -> str:
    """``edge partition`` of the splitnet for a Pi Zero 2 W and a T4, continued as on the page."""
    rest = "".join(f" \\\n      {line}" for line in lines)
    return (f"edge partition {NET} --profile rpi-zero-2w --cloud cloud-t4 \\\n      {tail}"
            f"{rest}")


_INT8 = f"--compress int8 --calib {FRAMES}"
_P = on_page("docs/commands/partition.md")
_S = on_page("docs/commands/serve-cloud.md")
_R = on_page("docs/commands/run-split.md")
_RUN = f"edge run-split {SPLIT} --url {URL}"
_SERVE = "EDGE_CLOUD_TOKEN=s3cret edge serve-cloud"

PARTITION = [
    _P(command="edge partition sample:digits --profile rpi4 --cloud cloud-t4 --bandwidth 10 "
               "--rtt 20", block=0),
    _P(command="find digits-rpi4-split | sort", block=0),
    _P(command=TRAIN, block=1, cwd=files.ROOT),
    _P(command=_partition(f"--bandwidth 10 --rtt 20 {_INT8}"), block=2),
    _P(command=f"find {SPLIT} | sort", block=2),
    _P(command=_partition(f"--bandwidth 2 --rtt 100 {_INT8} -o slow-split"), block=3,
       show=head_tail(5, 1)),
    _P(command=_partition("--bandwidth 2 --rtt 100 --objective energy -o splitnet-energy "
                          "--compress int8", lines=(f"--calib {FRAMES}",)), block=4),
    _P(command=_partition("--bandwidth 2 --rtt 100 --objective throughput -o splitnet-fps "
                          "--compress int8", lines=(f"--calib {FRAMES}",)), block=4, gap=True),
    _P(command=_partition(f"--bandwidth 100 --rtt 2 {_INT8}",
                          lines=("--on-device --threads 1 -o splitnet-device",)), block=5),
    _P(command=_partition(f"--bandwidth 10 --rtt 20 {_INT8}",
                          lines=("--measure -o splitnet-host",)), block=6,
       show=upto("objective")),
    _P(command=_partition(f"--bandwidth 10 --rtt 20 {_INT8} --json"), block=7,
       show=json_lists(bandwidth_table=(1, 0), cuts=(1, 0))),
]

SERVE = [
    _S(command="python make_req.py"),
    _S(command=f"{_SERVE} {SPLIT} --port 18555 --threads 1 &", block=0, background="serving"),
    _S(command="curl -s localhost:18555/v2/health/ready", block=0, gap=True),
    _S(command="curl -s localhost:18555/v2/models/tail", block=0),
    _S(command=f"curl -s {AUTH} localhost:18555/v2/models/tail-c2", block=0),
    _S(command=f"curl -s -i {AUTH} --data-binary @req.json {URL}/v2/models/tail/infer", block=0),
    _S(command=f"curl -s -i {AUTH} -d '{{\"inputs\": []}}' {URL}/v2/models/tail/infer", block=0,
       show=head_tail(1, 1)),
    _S(command=f"curl -s {AUTH} localhost:18555/v2/models/tail-c9", block=0),
]

RUN = [
    _R(command="export EDGE_CLOUD_TOKEN=s3cret", block=0),
    _R(command=f"{_RUN} \\\n      --input {FRAMES} --runs 5", block=0),
    _R(command=f"{_RUN} \\\n      --input {FRAMES} --runs 5 --cut c2", block=0, gap=True),
    _R(command=f"{_RUN} \\\n      --input {FRAMES} --runs 5 --cut all-edge", block=0, gap=True),
    _R(command="edge partition sample:digits --profile rpi4 --cloud cloud-t4 --bandwidth 10 "
               "--rtt 20 -o digits-split"),
    _R(command=f"{_SERVE} digits-split --port 8766 &", block=1, background="serving"),
    _R(command="EDGE_CLOUD_TOKEN=wrong edge run-split digits-split --url http://127.0.0.1:8766 "
               "--runs 2 --probe-every 0", block=1),
    _R(command="EDGE_CLOUD_TOKEN=wrong edge run-split digits-split --url http://127.0.0.1:8766 "
               "--runs 2 --cut c1", block=1),
    _R(command="echo $?", block=1),
    _R(command="kill %2  # the digits-split server", stop=True),
    _R(command=f"{_RUN} --runs 2 --json -o out.npz", block=2, show=json_lists(runs=(1, 0))),
    _R(command="python -c \"import numpy as np; print(list(np.load('out.npz')))\"", block=2),
    _R(command=f"kill %1  # the {SPLIT} server", stop=True),
    _R(command=f"{_RUN} --runs 3", block=3),
    _R(command="echo $?", block=3),
    _R(command=f"{_RUN} --runs 3 --cut c0", block=3),
    _R(command="echo $?", block=3),
    _R(command=f"{_SERVE} slow-split --port 18555 --threads 1 &", block=4, background="serving"),
    _R(command=f"edge run-split slow-split --url {URL} \\\n      --input {FRAMES} --runs 10 "
               "--warmup 0 --probe-every 0", block=4),
    _R(command=f"{_RUN} --cut c7", block=5),
    _R(command=f"edge run-split {SPLIT} --url ftp://x", block=5),
    _R(command="kill %3  # the slow-split server", stop=True),
]

SERVE_MORE = [
    _S(command=f"{_SERVE} slow-split --port 18555 --threads 1", block=1, background="serving"),
    _S(command="^C", stop=True),
    _S(command="unset EDGE_CLOUD_TOKEN", block=2),
    _S(command=f"edge serve-cloud {SPLIT} --port 18555", block=2),
    _S(command="echo $?", block=2),
    _S(command=f"edge serve-cloud {SPLIT} --export-repository models/", block=2, gap=True),
    _S(command="find models | sort", block=2),
    _S(command="cat models/tail/config.pbtxt", block=2),
]

SESSION = Session(name="split", docs=("docs/commands/partition.md", "docs/commands/serve-cloud.md",
                                      "docs/commands/run-split.md"),
                  workdir=WORK, files=_files, steps=[*PARTITION, *SERVE, *RUN, *SERVE_MORE])
