"""The parts of bench/peers.py (the benchmark of edge's choice against peers' defaults).

common (paths, thresholds), models (the CNN and digits with their data), zoomodels (trained zoo
models and their reference ONNX), builds (peers' artifacts, edge optimize), runners (rows,
every output), matching (a row's outputs to the reference's), judging (edge's per-output
verify), measure (timing, roofline), report (results, verdict, tables, machine).
"""
