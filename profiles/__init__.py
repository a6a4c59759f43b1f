"""The device profile catalog: one YAML file per device, shipped as package data."""
