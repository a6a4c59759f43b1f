"""Edge-cloud partitioning (issue 4): run the first part of a model on the device and the rest
in the cloud, at the cut that is best for the link.

The parts of ``edge partition``:

- :mod:`partition.cost` -- per-node ms on each side: estimated from MACs and a profile's fp32
  peak GOPS, measured on this host with onnxruntime, or measured ON the device by edge's agent
  (the agent's ``profile``, via ``targets.onnxruntime.profiling.node_profile``).
- :mod:`partition.graph` -- the model as a DAG of compute nodes and the tensors that could cross
  a cut (bytes from shape inference, weights excluded), with every node uniquely named; tensor
  sizes as compressed on the wire.
- :mod:`partition.solve` -- the best runnable placement (no cloud node feeds a device node; only
  the final outputs come back) for ``latency`` or device ``energy`` (exact minimum s-t cut, RTT
  counted once) or ``throughput`` (slowest pipeline stage; exact enumeration up to a cap, then a
  heuristic); always compared with all-edge and all-cloud.
- :mod:`partition.split` -- head/tail ONNX models at a node set, the head->tail parity check, and
  ``split.yaml`` (version 2: the chosen split, its cut tensors, the prediction and link, every
  precomputed cut, the best cut per bandwidth).
- :mod:`partition.compress` -- fp16/int8 transfer compression built into the head (encode) and
  the tail (decode).
- :mod:`partition.kserve` -- KServe v2 on the wire (datatype tables, raw tensors,
  ``Server-Timing``), shared by the device-side client and the cloud tail.
- :mod:`partition.client` -- ``SplitClient``: runs the head on the device, sends the cut tensors
  over one connection (gRPC when offered, :mod:`partition.client_grpc`, else REST), estimates
  the uplink, picks the cut that is best for the plan's objective at the measured link, and
  falls back to all-edge when the cloud fails.

The mathematics and the device-side client only: the flows are in ``edge.flows``
(:mod:`edge.flows.partition` for ``edge partition``, :mod:`edge.flows.serve_cloud` and the
engine under :mod:`edge.flows.cloud` for ``edge serve-cloud``, :mod:`edge.flows.runsplit` for
``edge run-split``).
"""
