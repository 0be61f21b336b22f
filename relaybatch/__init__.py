"""relaybatch: a batch job runner for the Model Relay Gateway."""

from relaybatch.arrow_memory import prefer_system_allocator

prefer_system_allocator()  # before anything imports pyarrow (arrow_memory.py says why)

__version__ = "0.1.0"

__all__ = ["__version__"]
