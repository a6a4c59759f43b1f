"""edge: take a trained model to the devices people own, and prove how fast it runs there."""

__version__ = "0.1.0"
