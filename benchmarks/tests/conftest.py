"""Fixtures shared by the sweep tests."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.tests.sweep_support import sim_start


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a real sim engine process started for the test module (stopped after it)."""
    base, proc = sim_start(tmp_path_factory.mktemp("sim") / "sim.log")
    yield base
    proc.terminate()
    proc.wait(timeout=10)
