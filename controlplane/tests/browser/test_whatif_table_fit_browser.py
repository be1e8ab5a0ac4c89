"""The what-if results table fits a 1920 px wide window without scrolling sideways, in a real
browser (the Debian ``chromium`` package driven by Playwright) against Django's live test server,
with every figure still carrying its unit in its column's header."""
from __future__ import annotations

import pytest

from .conftest import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

# Thousands of tok/s and long TTFTs: the widest figures a demo sweep gives.
POINTS = {1: (9.95, 893.0, 94.0), 8: (24.5, 2000.0, 282.0), 16: (25.0, 8800.0, 510.0), 64: (1234.56, 12345.0, 51.0)}


@pytest.fixture
def sweep(transactional_db) -> int:
    from benchmarks.models import BenchmarkRun, BenchmarkSweep

    sweep = BenchmarkSweep.objects.create(name="demo-like pd", engine="sim", topology="pd", status="done",
                                          served_model_name="DeepSeek-V4-Flash",
                                          snapshot={"spec": {"sim": {"profile": "seed-sm120-fallback"}}})
    for ordinal, (c, (tok, ttft, tpot)) in enumerate(POINTS.items()):
        BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status="done", concurrency=c, input_len=256,
                                    output_len=256, summary={"output_throughput_tok_s": tok,
                                                             "ttft_ms": {"mean": ttft}, "tpot_ms": {"mean": tpot}})
    return sweep.pk


def test_the_whatif_table_fits_1920_px(live_server, sweep, viewer, browser):
    page = browser.new_context(viewport={"width": 1920, "height": 1080}).new_page()
    sign_in(page, live_server.url, viewer)
    page.goto(f"{live_server.url}/kernels/whatif/?sweep={sweep}&share=0.63&speedup=44.24", wait_until="load")
    table = page.locator("table.results.whatif").first
    assert table.locator("tbody tr").count() == len(POINTS)
    wrap = page.locator(".table-scroll").filter(has=page.locator("table.whatif")).first
    widths = wrap.evaluate("el => [el.scrollWidth, el.clientWidth]")
    cols = table.evaluate("t => Array.from(t.rows[1].cells).map(c => [c.offsetWidth, c.innerText, getComputedStyle(c).whiteSpace])")
    assert widths[0] <= widths[1], f"the table scrolls sideways at 1920 px: {widths} {cols}"
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    heads = table.locator("thead th").all_inner_texts()
    # every figure's unit is in its header (the concurrency is a count of requests)
    for head in heads[1:]:
        assert any(u in head for u in ("tok/s", "ms", "×", "sequences")), head
