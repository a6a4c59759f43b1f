"""The parts of bench/peers.py (the benchmark of edge's choice against peers' defaults).

common (paths, thresholds), models (the CNN and digits with their data), builds (peers'
artifacts, edge optimize), runners (rows), measure (fidelity, timing, roofline), report
(results, verdict, tables, machine).
"""
