"""edge: take a trained model to the devices people own, and prove how fast it runs there."""

from edge.core import __version__

__all__ = ["__version__"]
