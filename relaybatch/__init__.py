"""relaybatch: a batch job runner for the Model Relay Gateway."""

__version__ = "0.1.0"

__all__ = ["__version__"]
