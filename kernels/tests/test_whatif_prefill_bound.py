"""The sim-profile what-if is bounded by the profile's prefill, which no decode kernel speeds up: a
demo-like sweep of the seed profile (PD, 256/256, c = 1, 8, 16 as the seed measured them) projected
with the kernel 1000 times faster models the prefill's 1064 tok/s instead of thousands, projects
below it by each point's measured / model ratio,
says so per row and in a note, and keeps its numbers at the seed's share and a 44x speedup."""
from __future__ import annotations

import re

import pytest
from django.test import Client

from deployments.engines.simcore.profile import profile_load
from kernels.whatif import prefill_bound_tok_s

pytestmark = pytest.mark.django_db

SEED = {1: (9.95, 893.0, 94.0), 8: (24.5, 2000.0, 282.0), 16: (25.0, 8800.0, 510.0)}


@pytest.fixture
def demo_sweep(db):
    from benchmarks.models import BenchmarkRun, BenchmarkSweep

    sweep = BenchmarkSweep.objects.create(name="demo-like pd", engine="sim", topology="pd", status="done",
                                          served_model_name="DeepSeek-V4-Flash",
                                          snapshot={"spec": {"sim": {"profile": "seed-sm120-fallback"}}})
    for ordinal, (c, (tok, ttft, tpot)) in enumerate(SEED.items()):
        BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status="done", concurrency=c, input_len=256,
                                    output_len=256, summary={"output_throughput_tok_s": tok,
                                                             "ttft_ms": {"mean": ttft}, "tpot_ms": {"mean": tpot}})
    return sweep


def test_the_seed_profiles_prefill_allows_1064_tok_s_from_c4() -> None:
    prefill = profile_load("seed-sm120-fallback").prefill
    # 4 prompts of 256 tokens per batch of 0.607 + 0.000347 x 1024 = 0.962 s
    assert prefill_bound_tok_s(prefill, concurrency=16, input_len=256, output_len=256) == pytest.approx(
        256 * 4 / (0.607 + 0.000347 * 1024))
    assert prefill_bound_tok_s(prefill, concurrency=16, input_len=256, output_len=256) == pytest.approx(1064.09,
                                                                                                    abs=0.01)
    # one prompt at c=1: 256 / 0.696 s; a prompt over the budget takes ceil(n / budget) batches
    assert prefill_bound_tok_s(prefill, concurrency=1, input_len=256, output_len=256) == pytest.approx(367.90,
                                                                                                   abs=0.01)
    assert prefill_bound_tok_s(prefill, concurrency=8, input_len=2048, output_len=64) == pytest.approx(
        64 / (2 * 0.607 + 0.000347 * 2048))


def test_a_thousandfold_kernel_stops_at_the_prefill_bound(viewer_api, viewer, demo_sweep) -> None:
    body = viewer_api.get("/api/kernel-whatif/", {"sweep": demo_sweep.pk, "share": 1, "speedup": 1000}).json()
    rows = {r["concurrency"]: r for r in body["lengths"]["256/256"]}
    for r in rows.values():
        assert r["projected_tok_s"] <= r["prefill_bound_tok_s"] + 1e-9
    assert rows[1]["prefill_bound"] is False and rows[1]["projected_tok_s"] == pytest.approx(300.84, abs=0.01)
    assert rows[8]["prefill_bound"] is True and rows[16]["prefill_bound"] is True
    assert rows[8]["model_fast_tok_s"] == pytest.approx(1064.09, abs=0.01)
    assert rows[16]["model_fast_tok_s"] == pytest.approx(1064.09, abs=0.01)
    # measured x (bound / model as is): 24.5 x 1064.09 / 25.54 and 25.0 x 1064.09 / 28.12 (was 3859 at c=16)
    assert rows[8]["projected_tok_s"] == pytest.approx(1020.88, abs=0.01)
    assert rows[16]["projected_tok_s"] == pytest.approx(945.99, abs=0.01)
    note = next(n for n in body["notes"] if n.startswith("prefill-bound at "))
    assert note.startswith("prefill-bound at c=8 256/256, c=16 256/256: the kernel does not speed up the prefill")
    assert "at most 1024 prompt tokens (607 ms + 0.347 ms per token each, in sim profile seed-sm120-fallback)" in note
    page = Client()
    page.force_login(viewer)
    html = page.get(f"/kernels/whatif/?sweep={demo_sweep.pk}&share=1&speedup=1000").content.decode()
    assert html.count("data-prefill-bound") == 2 and "<strong>945.99</strong>" in html
    # the bound stands in its own column of every row
    assert html.count('<td class="num" data-bound-tok-s>1064.09</td>') == 2
    assert '<td class="num" data-bound-tok-s>367.90</td>' in html


def test_the_note_says_the_projection_is_calibrated_below_the_bound(viewer_api, demo_sweep) -> None:
    body = viewer_api.get("/api/kernel-whatif/", {"sweep": demo_sweep.pk, "share": 1, "speedup": 1000}).json()
    note = next(n for n in body["notes"] if n.startswith("prefill-bound at "))
    assert "stops there" not in note
    assert "cap the model's output tok/s with the faster kernel at the row's prefill_bound_tok_s " \
           "(c=8 256/256 1064.09, c=16 256/256 1064.09 tok/s)" in note
    # measured / model as is: 24.5 / 25.54 and 25.0 / 28.12, hence c=16 below c=8
    assert "measured tok/s × that bound / the model's tok/s as is" in note
    assert "(measured / model as is: c=8 256/256 0.959, c=16 256/256 0.889)" in note
    assert "a higher concurrency projects lower where its measurement falls further short" in note
    rows = {r["concurrency"]: r for r in body["lengths"]["256/256"]}
    for c in (8, 16):
        r = rows[c]
        assert r["projected_tok_s"] == pytest.approx(
            r["measured_tok_s"] * r["prefill_bound_tok_s"] / r["model_tok_s"])


def test_a_small_projected_tpot_keeps_three_significant_figures(viewer, demo_sweep) -> None:
    page = Client()
    page.force_login(viewer)
    html = page.get(f"/kernels/whatif/?sweep={demo_sweep.pk}&share=1&speedup=1000").content.decode()
    tpots = re.findall(r"<strong>([0-9.]+)</strong></td>\s*<td class=\"num\">[0-9]+</td>", html)
    assert len(tpots) == 3 and all(len(t.replace(".", "").lstrip("0")) >= 3 for t in tpots), tpots
    assert "<strong>0.1</strong>" not in html


@pytest.mark.parametrize("value, shown", [(510.0, "510.0"), (24.5, "24.5"), (9.95, "9.95"), (0.3124, "0.312"),
                                          (0.000512, "0.000512"), (9.996, "10.0"), (0.0, "0.0"), (None, "—"),
                                          (float("nan"), "—")])
def test_sig3(value, shown) -> None:
    from kernels.templatetags.kernel_numbers import sig3

    assert sig3(value) == shown


def test_the_seeds_share_and_a_44x_kernel_are_nowhere_near_the_bound(viewer_api, demo_sweep) -> None:
    body = viewer_api.get("/api/kernel-whatif/", {"sweep": demo_sweep.pk, "share": 0.63, "speedup": 44}).json()
    rows = {r["concurrency"]: r for r in body["lengths"]["256/256"]}
    assert {c: round(r["projected_tok_s"], 2) for c, r in rows.items()} == {1: 24.62, 8: 62.75, 16: 64.48}
    assert not any(r["prefill_bound"] for r in rows.values())
    assert not any(n.startswith("prefill-bound") for n in body["notes"])
