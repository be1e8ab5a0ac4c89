"""The what-if page offers only sweeps the projection can use: a finished sweep it would refuse
for its runs (a cancelled sweep with no finished point, a failed one with only open-loop points or
only points whose requests all failed) is listed disabled with the service's own reason
(:func:`kernels.whatif.sweep_refusals`, the message :func:`kernels.whatif.whatif_compute` raises),
never as a choice. An unknown ``best`` id, or a best variant without a speedup, is named on the page
as the API names it (``no best kernel variant with id 999``)."""
import html
import re

import pytest
from django.test import Client

from benchmarks.models import BenchmarkRun, BenchmarkSweep
from controlplane.errors import InvalidInput
from kernels.models import KernelBest
from kernels.whatif import sweep_refusals, whatif_compute

pytestmark = pytest.mark.django_db

SUMMARY = {"output_throughput_tok_s": 9.95, "ttft_ms": {"mean": 893.0}, "tpot_ms": {"mean": 94.0},
           "successes": 4, "failures": 0}


def _sweep(status, *runs, name="s"):
    sweep = BenchmarkSweep.objects.create(name=name, engine="sim", topology="pd", status=status,
                                          snapshot={"spec": {"sim": {"profile": "seed-sm120-fallback"}}})
    for i, run in enumerate(runs):
        BenchmarkRun.objects.create(sweep=sweep, ordinal=i, input_len=256, output_len=256, **run)
    return sweep


@pytest.fixture
def sweeps(seed_pd_sweep):
    return {
        "usable": seed_pd_sweep,
        "cancelled_empty": _sweep("cancelled", {"status": "cancelled", "concurrency": 1}, name="cancelled"),
        "failed_open_loop": _sweep("failed", {"status": "done", "concurrency": None, "request_rate": 2.0,
                                              "summary": SUMMARY},
                                   {"status": "failed", "concurrency": 4}, name="open loop"),
        "failed_no_success": _sweep("failed", {"status": "done", "concurrency": 1, "summary": {
            **SUMMARY, "output_throughput_tok_s": 0.0, "successes": 0, "failures": 4}}, name="no success"),
        "failed_partial": _sweep("failed", {"status": "done", "concurrency": 1, "summary": SUMMARY},
                                 {"status": "failed", "concurrency": 4}, name="partial"),
        "running": _sweep("running", {"status": "done", "concurrency": 1, "summary": SUMMARY}, name="running"),
    }


def _page(viewer, **query):
    page = Client()
    page.force_login(viewer)
    return page.get("/kernels/whatif/", query)


def _option(body, sweep):
    found = re.search(rf'<option value="{sweep.pk}"[^>]*>[^<]*</option>', body)
    return found.group(0) if found else None


def test_the_refusals_are_the_ones_the_projection_raises(sweeps):
    refusals = sweep_refusals(list(sweeps.values()))

    s = sweeps
    assert refusals == {
        s["cancelled_empty"].pk: f"sweep #{s['cancelled_empty'].pk} has no finished closed-loop run with fixed lengths",
        s["failed_open_loop"].pk: f"sweep #{s['failed_open_loop'].pk} has no finished closed-loop run with fixed lengths",
        s["failed_no_success"].pk: (f"sweep #{s['failed_no_success'].pk} has no finished closed-loop run with fixed "
                                    "lengths and a successful request"),
        s["running"].pk: f"sweep #{s['running'].pk} has not finished (running, 0 of 0 points done): project it once it "
                         "is done",
    }
    for sweep in sweeps.values():
        if sweep.pk in refusals:
            with pytest.raises(InvalidInput) as err:
                whatif_compute(sweep=sweep, speedup=2.0)
            assert err.value.errors == {"sweep": [refusals[sweep.pk]]}
        else:
            assert whatif_compute(sweep=sweep, speedup=2.0)["lengths"]["256/256"]


def test_the_page_lists_a_sweep_it_would_refuse_disabled_with_why(viewer, sweeps):
    body = _page(viewer).content.decode()

    s = sweeps
    assert _option(body, s["usable"]) == f'<option value="{s["usable"].pk}">#{s["usable"].pk} seed pd (sim pd)</option>'
    assert _option(body, s["failed_partial"]) == (f'<option value="{s["failed_partial"].pk}">#{s["failed_partial"].pk} '
                                                 "partial (sim pd, failed: its finished points)</option>")
    for key, status in (("cancelled_empty", "cancelled"), ("failed_open_loop", "failed"),
                        ("failed_no_success", "failed")):
        sweep = s[key]
        why = html.escape(sweep_refusals([sweep])[sweep.pk])
        assert _option(body, sweep) == (f'<option value="{sweep.pk}" disabled data-refusal="{why}">#{sweep.pk} '
                                        f"{sweep.name} (sim pd, {status}: cannot be projected: {why})</option>"), key
    assert _option(body, s["running"]) is None   # not finished: not listed at all, as before


def test_asking_for_a_disabled_sweep_gets_the_same_reason_from_the_page_and_the_api(viewer, viewer_api, sweeps):
    sweep = sweeps["cancelled_empty"]
    why = f"sweep #{sweep.pk} has no finished closed-loop run with fixed lengths"

    api = viewer_api.get("/api/kernel-whatif/", {"sweep": sweep.pk, "speedup": 2})
    assert api.status_code == 400 and api.json() == {"sweep": [why]}
    answer = _page(viewer, sweep=sweep.pk, speedup=2)
    body = answer.content.decode()
    assert answer.status_code == 400
    assert f"<li><code>sweep</code>: {why}</li>" in body
    assert f'<option value="{sweep.pk}" selected disabled' in body


def test_an_unknown_best_is_named_as_the_api_names_it(viewer, viewer_api, seed_pd_sweep):
    api = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "best": 999})
    assert api.status_code == 404 and "no best kernel variant with id 999" in api.content.decode()

    answer = _page(viewer, sweep=seed_pd_sweep.pk, best=999)
    body = answer.content.decode()
    assert answer.status_code == 400
    assert re.findall(r"<li><code>(\w+)</code>: ([^<]*)</li>", body) == [("best", "no best kernel variant with id 999")]
    assert "Projected (tok/s)" not in body


def test_a_best_without_a_speedup_is_named_as_the_api_names_it(viewer, viewer_api, seed_pd_sweep, measured_job):
    best = KernelBest.objects.filter(job=measured_job).order_by("pk").first()
    KernelBest.objects.filter(pk=best.pk).update(speedup=None)
    why = f"best variant #{best.pk} has no measured speedup over a baseline"

    api = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "best": best.pk})
    assert api.status_code == 400 and api.json() == {"best": [why]}
    answer = _page(viewer, sweep=seed_pd_sweep.pk, best=best.pk)
    assert answer.status_code == 400
    assert re.findall(r"<li><code>(\w+)</code>: ([^<]*)</li>", answer.content.decode()) == [("best", why)]


def test_a_known_best_with_a_speedup_still_projects(viewer, seed_pd_sweep, measured_job):
    best = KernelBest.objects.filter(job=measured_job, speedup__isnull=False).order_by("pk").first()
    answer = _page(viewer, sweep=seed_pd_sweep.pk, best=best.pk)
    assert answer.status_code == 200 and "Projected (tok/s)" in answer.content.decode()
