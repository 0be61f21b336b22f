"""Tables in and out: a pandas DataFrame or any Arrow-compatible table in, DataFrames joined to the
input rows out. pandas is imported here only when a caller hands in or asks for a DataFrame: the
package face imports this lazily, and `relaybatch run` never loads it (tests/test_lean_imports.py).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from relaybatch.api.job import ROW, write_if_changed

if TYPE_CHECKING:
    import pandas as pd


def pandas_module() -> Any:
    """pandas, or a one-line error saying how to get it (it is the ``notebook`` extra)."""
    try:
        import pandas
    except ModuleNotFoundError:
        from relaybatch.errors import UserError

        raise UserError(
            "the Python API hands DataFrames in and out and needs pandas: pip install 'relaybatch[notebook]'"
        ) from None
    return pandas


# What the results carry of the row column (results prefix carried inputs with ``input_``).
ROW_RESULT = f"input_{ROW}"


def arrow_table(data: Any) -> pa.Table:
    """A pandas DataFrame (its index kept in the file's metadata), a pyarrow Table, or anything
    that speaks the Arrow C stream protocol (polars, DuckDB relations, ...) as a pyarrow Table."""
    if isinstance(data, pa.Table):
        return data
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data)
    if hasattr(data, "__arrow_c_stream__"):
        return pa.table(data)
    raise TypeError(f"expected a pandas DataFrame or an Arrow-compatible table, got {type(data).__name__}")


def write_input(table: pa.Table, path: Path) -> bool:
    """The table with each row's position (``_row``) as Parquet at ``path``; written only when
    its bytes change (a rerun of the same cell plans nothing anew). True when written."""
    if ROW in table.column_names:
        raise ValueError(f"the table has a column named {ROW!r}, which the API adds itself: rename it")
    numbered = table.append_column(ROW, pa.array(range(table.num_rows), type=pa.int64()))
    buffer = io.BytesIO()
    pq.write_table(numbered, buffer)
    return write_if_changed(path, buffer.getvalue())


def read_input(path: Path) -> pd.DataFrame:
    """The input table back as a DataFrame (its own index when it came from pandas), without ``_row``."""
    frame = pq.read_table(path).to_pandas()
    return frame.drop(columns=[ROW])


def read_parquet(paths: list[Path], job_column: bool) -> pd.DataFrame:
    """The files as one DataFrame (a ``job`` column first when asked: several jobs' files)."""
    pd = pandas_module()
    frames = []
    for path in paths:
        frame = pq.read_table(path).to_pandas()
        if job_column:
            frame.insert(0, "job", path.stem)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def joined_to_rows(inputs: pd.DataFrame, answers: pd.DataFrame) -> pd.DataFrame:
    """Each answer row beside the input row it came from (matched by ``input__row``), the input's
    index kept; carried copies of input columns dropped; a name both have gets ``_result`` on the
    answer's side. An answer of no input row (a charge of an item the table no longer has) is kept
    at the end, its input columns empty."""
    pd = pandas_module()

    rows = answers.pop(ROW_RESULT) if ROW_RESULT in answers.columns else None
    carried = {f"input_{name}" for name in inputs.columns}  # copies of input columns (``carry``)
    answers = answers.drop(columns=[name for name in answers.columns if name in carried])
    if rows is None:
        return answers
    answers.columns = [f"{name}_result" if name in inputs.columns else name for name in answers.columns]
    known = rows.notna().to_numpy()
    left = inputs.iloc[rows[known].astype("int64").to_numpy()]
    matched = answers[known]
    matched.index = left.index
    joined = pd.concat([left, matched], axis=1)
    if not known.all():  # a charge of an item the table no longer has: kept, with no input row
        joined = pd.concat([joined, answers[~known]])
    return joined
