"""Fixtures shared by the deployments tests."""
from __future__ import annotations

import os
import signal

import pytest

from deployments.supervisor import new_tag, process_find_by_tag


@pytest.fixture
def tag():
    """A fresh process tag (``CEILING_TAG``) for the test; every process still carrying it at the
    end is killed (SIGKILL), so a failed test leaves no orphan."""
    value = new_tag()
    yield value
    for found in process_find_by_tag(value):
        try:
            os.kill(found.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
