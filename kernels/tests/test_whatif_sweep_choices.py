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
    assert "Output, measured → projected (tok/s)" not in body


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
    assert answer.status_code == 200 and "Output, measured → projected (tok/s)" in answer.content.decode()


def test_the_sweep_list_limit_counts_usable_sweeps_so_refused_newer_ones_do_not_push_them_off(
        viewer, seed_pd_sweep, monkeypatch):
    """Usable sweeps older than many refused ones are still offered: the page lists up to
    WHATIF_USABLE_SHOWN usable sweeps, and among them only the newest WHATIF_REFUSED_SHOWN refused
    ones, greyed out."""
    from kernels import views

    monkeypatch.setattr(views, "WHATIF_USABLE_SHOWN", 3)
    monkeypatch.setattr(views, "WHATIF_REFUSED_SHOWN", 2)
    monkeypatch.setattr(views, "WHATIF_SCAN_BATCH", 4)   # several batches are read
    usable = [seed_pd_sweep]
    for n in range(3):   # three more usable sweeps, each newer than the last
        usable.append(_sweep("failed", {"status": "done", "concurrency": 1, "summary": SUMMARY},
                             {"status": "failed", "concurrency": 4}, name=f"usable {n}"))
    refused = [_sweep("cancelled", {"status": "cancelled", "concurrency": 1}, name=f"refused {n}")
               for n in range(5)]   # the five newest sweeps, all refused

    listed = views.whatif_sweeps()
    # Newest first: the two newest refused ones, then the three newest usable ones (the seed
    # sweep, the oldest usable one, is the fourth and left out).
    assert [s.pk for s in listed] == [refused[4].pk, refused[3].pk, usable[3].pk, usable[2].pk, usable[1].pk]
    assert [s.whatif_refusal is None for s in listed] == [False, False, True, True, True]

    body = html.unescape(_page(viewer).content.decode())
    for sweep in (usable[1], usable[2], usable[3]):
        assert "disabled" not in _option(body, sweep)
    for sweep in (refused[3], refused[4]):
        assert "disabled" in _option(body, sweep) and "cannot be projected" in _option(body, sweep)
    for sweep in (usable[0], refused[0], refused[1], refused[2]):
        assert _option(body, sweep) is None

    # With room for every usable sweep, all four are listed, and still only the two newest refused ones.
    monkeypatch.setattr(views, "WHATIF_USABLE_SHOWN", 100)
    listed = views.whatif_sweeps()
    assert [s.pk for s in listed if s.whatif_refusal is None] == [s.pk for s in reversed(usable)]
    assert len([s for s in listed if s.whatif_refusal]) == 2


def test_a_sweep_asked_for_that_is_not_listed_is_still_offered_with_its_refusal(viewer, seed_pd_sweep,
                                                                                  monkeypatch):
    from kernels import views

    monkeypatch.setattr(views, "WHATIF_REFUSED_SHOWN", 0)
    old_refused = _sweep("cancelled", {"status": "cancelled", "concurrency": 1}, name="old refused")
    body = html.unescape(_page(viewer, sweep=old_refused.pk).content.decode())
    option = _option(body, old_refused)
    assert option is not None and "disabled" in option
    assert f"sweep #{old_refused.pk} has no finished closed-loop run with fixed lengths" in option


def test_a_sweep_it_would_refuse_is_refused_at_once_before_a_speedup_is_given(viewer, sweeps):
    for key in ("cancelled_empty", "running"):
        sweep = sweeps[key]
        why = html.escape(sweep_refusals([sweep])[sweep.pk])
        answer = _page(viewer, sweep=sweep.pk)
        body = answer.content.decode()
        assert answer.status_code == 400, key
        assert re.findall(r"<li><code>(\w+)</code>: ([^<]*)</li>", body) == [("sweep", why)], key
        assert "Give a speedup" not in body and "whatif-hint" not in body, key
    body = _page(viewer, sweep=sweeps["cancelled_empty"].pk).content.decode()
    assert f'<option value="{sweeps["cancelled_empty"].pk}" selected disabled' in body
    # a sweep it can project still only asks for the speedup
    usable = _page(viewer, sweep=sweeps["usable"].pk)
    assert usable.status_code == 200
    assert "Give a speedup (×) or choose a best variant to project this sweep." in usable.content.decode()


@pytest.mark.parametrize(("query", "refused", "kept"), [
    ({"speedup": "abc", "share": "0.5"}, ("speedup", "&#x27;abc&#x27; is not a number."),
     {"speedup": "abc", "share": "0.5"}),
    ({"speedup": "3", "share": "lots"}, ("share", "&#x27;lots&#x27; is not a number."),
     {"speedup": "3", "share": "lots"}),
    ({"speedup": "1e9", "share": " 0.25"}, ("speedup", None), {"speedup": "1e9", "share": " 0.25"}),
])
def test_every_field_keeps_what_was_typed_on_an_error(viewer, seed_pd_sweep, query, refused, kept):
    answer = _page(viewer, sweep=seed_pd_sweep.pk, **query)
    body = answer.content.decode()
    assert answer.status_code == 400
    errors = re.findall(r"<li><code>(\w+)</code>: ([^<]*)</li>", body)
    assert [path for path, _ in errors] == [refused[0]]
    if refused[1]:
        assert errors[0][1] == refused[1]
    for name, value in kept.items():
        assert f'id="id_{name}" name="{name}" value="{value}"' in body, name
    assert f'<option value="{seed_pd_sweep.pk}" selected>' in body
