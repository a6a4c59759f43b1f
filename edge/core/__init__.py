"""The core layer: values, documents, profiles, models, data, verification, plans, selection.

Imports nothing from targets/, devices/, partition/ or the layers above (edge.flows, edge.cli)."""

__version__ = "0.1.0"
