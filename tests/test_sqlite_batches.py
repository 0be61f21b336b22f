"""Rows go to SQLite as one JSON array only when that array reads back exactly what was given."""

import sqlite3

from relaybatch.sqlite_batches import json_array, json_columns


def read_back(array: str, columns: int) -> list[tuple[object, ...]]:
    connection = sqlite3.connect(":memory:")
    return connection.execute(
        f"select {json_columns(columns)} from json_each(?) as j order by j.key", [array]
    ).fetchall()


def test_rows_travel_as_one_array_that_reads_back_unchanged() -> None:
    rows = [["a", 1, None], ["é ü 中", 2.5, "x"], ['back\\slash "quoted"', -3, ""]]
    array = json_array(rows)
    assert array is not None
    assert read_back(array, 3) == [tuple(row) for row in rows]


def test_a_row_or_two_go_one_by_one() -> None:
    assert json_array([["a"], ["b"]]) is None
    assert json_array([]) is None


def test_a_nul_anywhere_sends_the_rows_one_by_one() -> None:
    # SQLite's JSON functions would cut the text at the NUL.
    assert json_array([["a"], ["b"], ["c\0d"]]) is None
    assert json_array([["a", None], ["b", "x\0"], ["c", None]]) is None


def test_the_escape_written_literally_goes_one_by_one_too() -> None:
    # A text holding the six characters of the escape: row by row is correct, only slower.
    assert json_array([["\\u0000"], ["b"], ["c"]]) is None
