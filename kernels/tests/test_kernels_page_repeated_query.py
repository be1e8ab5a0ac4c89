"""The job page's variant table takes each of its one-value query keys once: given twice, the page
says so and shows the default view for that key (as for a value it cannot read, ``?batch=abc``),
never the last value silently."""
from __future__ import annotations

import html
import re

import pytest


@pytest.fixture
def page(client, viewer, measured_job):
    client.force_login(viewer)
    return lambda query: client.get(f"/kernels/jobs/{measured_job.pk}/?{query}").content.decode()


def test_a_batch_given_twice_is_named_and_the_smallest_batch_shown(page):
    shown = page("batch=1&batch=4")

    assert html.escape("batch is given 2 times (1, 4): give it once") in shown
    assert "at batch 1" in shown and "at batch 4" not in shown
    assert '<option value="4" selected>' not in shown and '<option value="1" selected>' in shown


@pytest.mark.parametrize("query, key", [("state=wrong&state=correct", "state"),
                                        ("sort=-ordinal&sort=-key", "sort"),
                                        ("offset=1&offset=2", "offset")])
def test_every_one_value_key_given_twice_falls_back_to_its_default(page, query, key):
    shown = page(query)

    assert f"{key} is given 2 times (" in shown
    # the rows of the default view, in its order
    assert _rows(shown) == _rows(page(""))
    assert len(_rows(shown)) > 2


def _rows(text: str) -> list[str]:
    return re.findall(r'data-variant="([0-9]+)"', text)
