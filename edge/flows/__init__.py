"""The orchestration layer: one module per job (optimize, deploy, fleet, probe, report).

Built on edge.core, targets/, devices/ and partition/; used by edge.cli."""
