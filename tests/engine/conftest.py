"""Engine test fixtures."""

from __future__ import annotations

import pytest
from engine_fakes import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
