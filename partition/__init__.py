"""Edge-cloud partitioning: per-node cost, an optimal DAG cut, split models (issue 4)."""
