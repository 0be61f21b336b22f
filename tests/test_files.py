"""Files written whole: the final name appears complete or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from relaybatch.files import replaced_atomically, write_bytes_atomically


def test_a_written_file_appears_under_its_name_and_nothing_else_is_left(tmp_path: Path) -> None:
    path = write_bytes_atomically(tmp_path / "deep" / "out.bin", b"data")

    assert path.read_bytes() == b"data"
    assert [entry.name for entry in path.parent.iterdir()] == ["out.bin"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "results.parquet"
    path.write_bytes(b"old")

    with pytest.raises(RuntimeError), replaced_atomically(path) as temporary:
        temporary.write_bytes(b"half")
        raise RuntimeError("crash half way")

    assert path.read_bytes() == b"old"
    assert [entry.name for entry in tmp_path.iterdir()] == ["results.parquet"]
