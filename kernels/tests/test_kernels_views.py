"""The kernels pages: who may see and do what, and that the numbers arrive with their units."""
from django.test import Client

from kernels.models import KernelJob


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_anonymous_users_are_sent_to_login_and_outsiders_refused(client, outsider, measured_job):
    for url in ("/kernels/", "/kernels/packages/toy_attn/", f"/kernels/jobs/{measured_job.pk}/", "/kernels/whatif/"):
        resp = client.get(url)
        assert resp.status_code == 302 and resp["Location"].startswith("/login/"), url
        assert _client(outsider).get(url).status_code == 403, url


def test_the_index_lists_packages_jobs_and_best_variants(viewer, measured_job):
    html = _client(viewer).get("/kernels/").content.decode()
    assert "toy_attn" in html and "Variants (after constraints)" in html and "Median (µs)" in html
    assert f"/kernels/jobs/{measured_job.pk}/" in html and "NVIDIA H200" in html
    assert 'href="/kernels/"' in html  # the nav link


def test_the_package_page_shows_grid_constraints_and_costs_with_units(viewer, operator, measured_job):
    html = _client(viewer).get("/kernels/packages/toy_attn/").content.decode()
    assert "12 combinations" in html and "<strong>7 variants</strong>" in html
    assert "impl != &#x27;baseline&#x27; or BLOCK == 16" in html
    assert "Bytes (MiB)" in html and "FLOPs (GFLOP)" in html and "Intensity (FLOP/byte)" in html
    assert "Start job" not in html  # viewers read
    assert "Start job" in _client(operator).get("/kernels/packages/toy_attn/").content.decode()


def test_operators_start_a_job_from_the_package_page(operator, viewer, toy_package, h200_node,
                                                     django_capture_on_commit_callbacks):
    data = {"node": "h200-box", "cc": "", "params": "impl=tiled; BLOCK=32,64", "batches": "1", "shapes": ["small"]}
    assert _client(viewer).post("/kernels/packages/toy_attn/jobs/new/", data).status_code == 403
    with django_capture_on_commit_callbacks(execute=False):
        resp = _client(operator).post("/kernels/packages/toy_attn/jobs/new/", data)
    job = KernelJob.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/kernels/jobs/{job.pk}/"
    assert job.params_subset == {"impl": ["tiled"], "BLOCK": [32, 64]} and job.target_cc == "9.0"
    assert job.variants_total == 3 and job.shapes == ["small"] and job.batches == [1]
    bad = _client(operator).post("/kernels/packages/toy_attn/jobs/new/", {**data, "params": "BLOCK=48"})
    assert bad.status_code == 400 and "48 is not one of the grid&#x27;s values" in bad.content.decode()


def test_the_job_page_shows_calibration_table_charts_and_best(viewer, measured_job):
    html = _client(viewer).get(f"/kernels/jobs/{measured_job.pk}/?batch=4&sort=-us:small").content.decode()
    assert "4000 GB/s" in html and "700.0 TFLOP/s" in html and "NVIDIA H200" in html
    assert "median (µs)" in html and "roofline (%)" in html and "shared (KiB)" in html
    assert "spills 64 bytes of registers to local memory" in html and "build failed" in html
    assert 'data-chart="chart-time-small"' in html and "roofline (measured HBM GB/s, bf16 TFLOP/s)" in html
    assert f'data-group="kernel-job-{measured_job.pk}"' in html
    assert "Export CSV" in html and "Cancel job" not in html  # done, and viewers cannot cancel anyway
    # the sorted table puts the slowest small-shape variant first
    body = html.split('<table class="variants results">', 1)[1]
    assert body.index("baseline") < body.index(">32<")


def test_the_progress_panel_polls_while_active_and_stops_when_done(viewer, operator, measured_job):
    done = _client(viewer).get(f"/kernels/jobs/{measured_job.pk}/progress/").content.decode()
    assert "hx-trigger" not in done and ">done</span>" in done
    KernelJob.objects.filter(pk=measured_job.pk).update(status="building", phase="compile", progress_done=3,
                                                        progress_total=7)
    active = _client(operator).get(f"/kernels/jobs/{measured_job.pk}/progress/").content.decode()
    assert 'hx-trigger="every 2s"' in active and "3 / 7 variants" in active and "Cancel job" in active
    resp = _client(operator).post(f"/kernels/jobs/{measured_job.pk}/cancel/")
    assert resp.status_code == 302
    assert KernelJob.objects.get(pk=measured_job.pk).cancel_requested is True
    assert _client(viewer).post(f"/kernels/jobs/{measured_job.pk}/cancel/").status_code == 403


def test_the_variant_partial_filters_on_the_server(viewer, measured_job):
    html = _client(viewer).get(f"/kernels/jobs/{measured_job.pk}/variants/?state=discarded").content.decode()
    assert html.count("data-variant=") == 1 and "discarded" in html


def test_exports_and_config_downloads(viewer, measured_job):
    c = _client(viewer)
    csv_resp = c.get(f"/kernels/jobs/{measured_job.pk}/export.csv")
    assert csv_resp.status_code == 200 and b"median_us" in csv_resp.content
    assert c.get(f"/kernels/jobs/{measured_job.pk}/export.xml").status_code == 404
    best = measured_job.best.filter(shape="small", batch=1).get()
    cfg = c.get(f"/kernels/best/{best.pk}/config.json")
    assert cfg.status_code == 200 and b'"BLOCK": 32' in cfg.content
    assert "device_name=NVIDIA_H200,shape=small,dtype=bf16.json" in cfg["Content-Disposition"]


def test_the_whatif_page_shows_measured_and_projected_numbers(viewer, seed_pd_sweep):
    sweep = seed_pd_sweep
    c = _client(viewer)
    form = c.get("/kernels/whatif/").content.decode()
    assert f'<option value="{sweep.pk}"' in form
    html = c.get(f"/kernels/whatif/?sweep={sweep.pk}&share=0.63&speedup=3").content.decode()
    assert "Projected (tok/s)" in html and "Projected TPOT (ms)" in html
    assert "<strong>16.77</strong>" in html and "<strong>54.5</strong>" in html   # 94 ms x 0.58
    assert 'data-chart="whatif-tok-256-256"' in html and "0.5800" in html
    err = c.get(f"/kernels/whatif/?sweep={sweep.pk}&share=2&speedup=3").content.decode()
    assert "must be a fraction in (0, 1]" in err
    assert "Give a speedup" in c.get(f"/kernels/whatif/?sweep={sweep.pk}").content.decode()
