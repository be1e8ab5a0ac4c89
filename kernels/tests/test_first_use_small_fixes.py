"""Small defects a new user found in the kernels app: each fix checked on real rows and pages."""
import html

from django.test import Client

from benchmarks.models import BenchmarkRun, BenchmarkSweep

SEED = "seed-sm120-fallback"


def _ended_sweep(status):
    sweep = BenchmarkSweep.objects.create(
        name="t", engine="sim", topology="pd", status=status, points_total=4,
        reason="deployment stopped" if status == "failed" else "",
        snapshot={"spec": {"sim": {"profile": SEED}}},
        grid={"lengths": [[256, 256]], "concurrency": [1, 2, 4, 8], "request_rates": [], "requests": 8})
    for i, (c, run_status) in enumerate([(1, "done"), (2, "done"), (4, run_status_for(status))]):
        BenchmarkRun.objects.create(sweep=sweep, ordinal=i, status=run_status, concurrency=c, input_len=256,
                                    output_len=256, num_requests=8, summary={
                                        "output_throughput_tok_s": 10.0 * c, "ttft_ms": {"mean": 900.0},
                                        "tpot_ms": {"mean": 94.0 + c}, "successes": 8, "failures": 0})
    return sweep


def run_status_for(sweep_status):
    return "cancelled" if sweep_status == "cancelled" else "failed"


def test_a_failed_or_cancelled_sweep_is_projected_with_a_note_naming_its_status_and_the_points_left_out(
        viewer_api, viewer):
    page = Client()
    page.force_login(viewer)
    for status in ("cancelled", "failed"):
        sweep = _ended_sweep(status)
        resp = viewer_api.get("/api/kernel-whatif/", {"sweep": sweep.pk, "speedup": 2})
        assert resp.status_code == 200
        out = resp.json()
        assert [r["concurrency"] for r in out["lengths"]["256/256"]] == [1, 2]
        ended = {"cancelled": "the sweep was cancelled", "failed": "the sweep failed (deployment stopped)"}[status]
        note = (f"provisional: {ended}; this projection covers only its finished points, leaving "
                f"out c=4 256/256 ({status}), c=8 256/256 (never ran)")
        assert out["notes"][0] == note
        # and, after it, only why the sim profile's running batch is not the ceiling analysis'
        assert [n.split(" (")[0] for n in out["notes"][1:]] == [
            "the running batch of the sim-profile model is not the ceiling analysis'"]
        body = page.get(f"/kernels/whatif/?sweep={sweep.pk}&speedup=2").content.decode()
        assert html.escape(note) in body



def test_an_ended_sweep_reaches_its_what_if_from_its_page_and_the_what_if_list(viewer):
    page = Client()
    page.force_login(viewer)
    for status in ("cancelled", "failed"):
        sweep = _ended_sweep(status)
        detail = page.get(f"/benchmarks/sweeps/{sweep.pk}/").content.decode()
        assert f'href="/kernels/whatif/?sweep={sweep.pk}"' in detail and "What-if: a faster kernel" in detail
        listed = page.get("/kernels/whatif/").content.decode()
        assert f'<option value="{sweep.pk}">#{sweep.pk} t (sim pd, {status}: its finished points)</option>' in listed
    running = BenchmarkSweep.objects.create(name="r", engine="sim", topology="pd", status="running", points_total=4)
    # A running sweep's link is there but hidden: its live progress reveals it when the sweep ends.
    assert (f'href="/kernels/whatif/?sweep={running.pk}" data-whatif-link hidden>What-if: a faster kernel'
            in page.get(f"/benchmarks/sweeps/{running.pk}/").content.decode())
    assert f'<option value="{running.pk}">' not in page.get("/kernels/whatif/").content.decode()

def test_a_done_sweep_gets_no_such_note(viewer_api, seed_pd_sweep):
    out = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 2}).json()
    assert not any(n.startswith("provisional") for n in out["notes"])


def test_the_jobs_list_counts_builds_as_the_job_page_does(viewer, measured_job):
    page = Client()
    page.force_login(viewer)
    job = measured_job
    kept = job.builds_ok - job.builds_discarded
    assert (job.builds_discarded, job.builds_failed) == (1, 1) and kept > 1
    detail = page.get(f"/kernels/jobs/{job.pk}/").content.decode()
    assert f"{job.builds_ok} builds: {kept} kept, 1 discarded" in detail and "1 failed to build" in detail
    for url in ("/kernels/", f"/kernels/packages/{job.package.name}/"):
        body = page.get(url).content.decode()
        assert ">Builds kept / discarded / failed</th>" in body, url
        assert f'<td class="num">{kept} / 1 / 1</td>' in body, url


def test_an_offset_past_the_last_variant_says_so_and_goes_back_to_the_last_page(viewer, measured_job):
    page = Client()
    page.force_login(viewer)
    total = measured_job.variants.count()
    for offset in (total, 4000):
        body = html.unescape(page.get(f"/kernels/jobs/{measured_job.pk}/?offset={offset}").content.decode())
        assert f"{total} variants, none shown: offset {offset} is past the last one" in body
        assert "shown" not in body.split("none shown")[1].split("CSV of this table")[0]
        assert 'class="page-previous" href="?batch=' in body and "offset=0#variant-table" in body
    body = html.unescape(page.get(f"/kernels/jobs/{measured_job.pk}/?offset={total - 1}").content.decode())
    assert f"{total} variants, {total}-{total} shown" in body
