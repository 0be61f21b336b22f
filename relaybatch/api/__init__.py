"""The Python API: run a manifest or a table from Python (a notebook), pandas in and out.

``Run`` drives a run over the same run layer as the CLI; ``Job`` describes a job in Python.
docs/python-api.md has the whole of it; examples/label-a-dataframe.ipynb shows it at work.
"""

from relaybatch.api.job import Job
from relaybatch.api.run import Run

__all__ = ["Job", "Run"]
