"""Runs raise the garbage collector's young threshold while they execute and put it back after,
also when runs overlap in one process."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from relaybatch.engine.collection import YOUNG_THRESHOLD_DURING_RUNS, fewer_collections


@pytest.fixture(autouse=True)
def known_thresholds() -> Iterator[tuple[int, int, int]]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield (700, 10, 10)
    gc.set_threshold(*saved)


def test_thresholds_are_raised_during_a_run_and_restored_after() -> None:
    with fewer_collections():
        assert gc.get_threshold() == (YOUNG_THRESHOLD_DURING_RUNS, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_runs_restore_only_when_the_last_one_ends() -> None:
    first, second = fewer_collections(), fewer_collections()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD_DURING_RUNS
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_failing_run_restores_them_too() -> None:
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("crash")
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_set_by_the_user_is_kept() -> None:
    gc.set_threshold(50_000, 10, 10)
    with fewer_collections():
        assert gc.get_threshold() == (50_000, 10, 10)
    assert gc.get_threshold() == (50_000, 10, 10)
