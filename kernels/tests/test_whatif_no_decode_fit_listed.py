"""A finished sweep of another engine than ``sim`` whose ceiling analysis has no decode cost fit
(a llama.cpp sweep on a CPU: one sequence at a time, its throughput flat from c=1, its output
events grouped into network reads) cannot be projected: the what-if page lists it greyed out with
the reason the projection gives, because the list asks the same function
(:func:`kernels.whatif.model_refusal`) that :func:`kernels.whatif.whatif_compute` raises from."""
import html
import re

import pytest
from django.test import Client

from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_analyse
from controlplane.errors import InvalidInput
from controlplane.jsonsafe import json_safe
from kernels.whatif import model_refusal, sweep_refusals, whatif_compute

pytestmark = pytest.mark.django_db

# The demo's llama.cpp sweep as measured: c, output tok/s, mean / p50 TTFT (ms), mean TPOT (ms).
LLAMACPP_POINTS = [(1, 385.2, 28.4, 27.0, 2.5), (8, 337.3, 2400.0, 2348.0, 2.9), (16, 391.3, 4810.0, 4790.0, 2.4)]


@pytest.fixture
def llamacpp_sweep():
    sweep = BenchmarkSweep.objects.create(name="local-llamacpp", engine="llamacpp", topology="single",
                                          status="done", snapshot={"engine": "llamacpp"})
    for i, (c, tok_s, ttft, ttft_p50, tpot) in enumerate(LLAMACPP_POINTS):
        BenchmarkRun.objects.create(
            sweep=sweep, ordinal=i, status="done", concurrency=c, input_len=256, output_len=64, num_requests=4 * c,
            flags=["itl_coalesced", "tokens_estimated"],
            summary={"requests": 4 * c, "successes": 4 * c, "failures": 0, "output_throughput_tok_s": tok_s,
                     "ttft_ms": {"mean": ttft, "p50": ttft_p50}, "tpot_ms": {"mean": tpot, "p50": tpot},
                     "flags": {"itl_coalesced": True, "tokens_estimated": True}})
    # Analysed as a finished sweep is: the report stored with it.
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(analysis=json_safe(sweep_analyse(sweep=sweep)))
    sweep.refresh_from_db()
    return sweep


def test_its_analysis_has_no_decode_cost_fit_so_the_projection_refuses_it(llamacpp_sweep):
    report = llamacpp_sweep.analysis["lengths"]["256/64"]
    fit = report["fit"]
    assert not (fit.get("possible") and (fit.get("per_seq_ms") or 0) > 0 and (fit.get("fixed_ms") or -1) >= 0), fit
    why = (f"the ceiling analysis of sweep #{llamacpp_sweep.pk} has no decode cost fit (it needs at least 3 points "
           "whose TPOT grows with the running batch)")
    with pytest.raises(InvalidInput) as err:
        whatif_compute(sweep=llamacpp_sweep, speedup=2.0)
    assert err.value.errors == {"sweep": [why]}
    assert model_refusal(llamacpp_sweep) == why
    assert sweep_refusals([llamacpp_sweep]) == {llamacpp_sweep.pk: why}


def test_the_page_lists_it_greyed_out_with_why_and_the_api_gives_the_same_reason(viewer, viewer_api, llamacpp_sweep,
                                                                                seed_pd_sweep):
    why = html.escape(model_refusal(llamacpp_sweep))
    page = Client()
    page.force_login(viewer)
    body = page.get("/kernels/whatif/").content.decode()
    option = re.search(rf'<option value="{llamacpp_sweep.pk}"[^>]*>[^<]*</option>', body).group(0)
    assert option == (f'<option value="{llamacpp_sweep.pk}" disabled data-refusal="{why}">#{llamacpp_sweep.pk} '
                      f"local-llamacpp (llamacpp single, done: cannot be projected: {why})</option>")
    # the projectable sim sweep beside it stays a choice
    assert f'<option value="{seed_pd_sweep.pk}">#{seed_pd_sweep.pk} seed pd (sim pd)</option>' in body

    api = viewer_api.get("/api/kernel-whatif/", {"sweep": llamacpp_sweep.pk, "speedup": 2})
    assert api.status_code == 400 and api.json() == {"sweep": [html.unescape(why)]}
    asked = page.get("/kernels/whatif/", {"sweep": llamacpp_sweep.pk, "speedup": 2})
    assert asked.status_code == 400
    assert re.findall(r"<li><code>(\w+)</code>: ([^<]*)</li>", asked.content.decode()) == [("sweep", why)]
