"""Latency models of devices (issue 44): probe models, their features, a fit per device,
runtime and precision, and the calibrations kept in the cache."""
