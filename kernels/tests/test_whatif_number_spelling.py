"""The what-if writes a speedup one way wherever it shows one, as the kernel pages do (``44.24×``:
two decimals and ``×``, never ``44.2x``), the same quantity with the same decimals in its facts,
notes, form and table, while the API keeps the full number; a refusal quotes a number that is not
finite as every other refusal does (``Infinity``, ``NaN``), never Python's ``inf``."""
import re

import pytest
from django.test import Client

from benchmarks.analysis import ANALYSIS_VERSION
from controlplane.errors import InvalidInput
from kernels.models import KernelBest
from kernels.tests.test_kernels_whatif import _sweep
from kernels.whatif import SPEEDUP_RANGE, number_text, whatif_compute, whatif_input_errors

SPEEDUP = 44.2412


@pytest.fixture
def odd_best(measured_job):
    """The best variant of toy_attn small/batch 1, its speedup made one that rounds differently
    at one, two and three decimals."""
    best = KernelBest.objects.get(job=measured_job, shape="small", batch=1)
    KernelBest.objects.filter(pk=best.pk).update(speedup=SPEEDUP)
    return best


def test_it_writes_a_speedup_with_two_decimals_and_a_times_sign_everywhere(viewer, viewer_api, odd_best,
                                                                          seed_pd_sweep):
    body = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "best": odd_best.pk}).json()
    assert body["speedup"] == SPEEDUP   # the API keeps the full number
    assert body["notes"][0].startswith("the speedup 44.24× was measured at batch 1 of shape small; ")
    assert "44.24× at batch 1" in body["notes"][0]
    assert any(n.startswith("the speedup 44.24× is over package toy_attn's own baseline") for n in body["notes"])
    c = Client()
    c.force_login(viewer)
    html = c.get(f"/kernels/whatif/?sweep={seed_pd_sweep.pk}&best={odd_best.pk}").content.decode()
    assert "<dt>Speedup</dt><dd>44.24× <span" in html
    assert " / 44.24</dd>" in html                                       # the decode step factor's formula
    odd_best.refresh_from_db()
    us, base = f"{odd_best.median_us:.2f} µs", f"{odd_best.baseline_us:.2f} µs"
    assert f"best variant #{odd_best.pk}: toy_attn small/batch=1 on NVIDIA H200, {us}, 44.24× over" in html
    assert f"batch 1 on NVIDIA H200: {us}, 44.24× over its own baseline ({base})</option>" in html
    assert "the speedup 44.24× was measured at batch 1" in html
    assert set(re.findall(r"44\.2\d*", html)) == {"44.24"}
    # the one "<n>x" left is the sim profile's own hardware text, a count of GPUs
    assert re.findall(r"[\d.]+x\b.{7}", html) == ["8x sm_120"]


def test_a_given_speedup_is_shown_with_the_same_decimals(viewer, seed_pd_sweep):
    c = Client()
    c.force_login(viewer)
    html = c.get(f"/kernels/whatif/?sweep={seed_pd_sweep.pk}&speedup=3").content.decode()
    assert '<dt>Speedup</dt><dd>3.00× <span class="muted small">(given)</span></dd>' in html
    assert "(1 − 0.63) + 0.63 / 3.00</dd>" in html


def test_the_ceiling_fit_writes_its_milliseconds_as_the_tpot_columns_do(viewer, db):
    analysis = {"lengths": {"256/256": {"fit": {"possible": True, "fixed_ms": 50.0, "per_seq_ms": 0.004,
                                                "r_squared": 0.99, "labels": ["c=1", "c=4"],
                                                "running_batch": [1.0, 3.5]}}}, "version": ANALYSIS_VERSION}
    sweep = _sweep(engine="sglang", topology="single", analysis=analysis,
                   points=[(1, 16.0, 60.0, 150.0), (4, 44.0, 86.0, 200.0)])
    c = Client()
    c.force_login(viewer)
    html = c.get(f"/kernels/whatif/?sweep={sweep.pk}&speedup=2").content.decode()
    # three significant figures, as sig3 writes every TPOT of the table: 0.004 ms is not "0.00"
    assert "256/256: TPOT = 50.0 ms + 0.00400 ms × running batch (R² 0.990)" in html


def test_a_refusal_quotes_a_number_that_is_not_finite_as_json_decoders_write_it(db, seed_pd_sweep):
    assert [number_text(v) for v in (float("inf"), float("-inf"), float("nan"))] == ["Infinity", "-Infinity", "NaN"]
    assert [number_text(v) for v in (0.0, 20000.0, 2.5, 1e-300, 1e-7, 7)] == ["0", "20000", "2.5", "1e-300", "1e-7", "7"]
    assert whatif_input_errors(speedup=float("inf")) == {"speedup": [f"{SPEEDUP_RANGE}, got Infinity"]}
    with pytest.raises(InvalidInput) as err:
        whatif_compute(sweep=seed_pd_sweep, speedup=float("nan"))
    assert err.value.errors == {"speedup": [f"{SPEEDUP_RANGE}, got NaN"]}
