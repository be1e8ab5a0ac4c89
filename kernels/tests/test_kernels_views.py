"""The kernels pages: who may see and do what, and that the numbers arrive with their units."""
import json
import re

from django.test import Client

from kernels.models import KernelBuild, KernelJob
from kernels.services import kernel_job_from_measurement, kernel_package_register


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
    assert "<th>Cache dtype</th>" in html and "<td><code>bf16</code></td>" in html


def test_the_package_page_shows_grid_constraints_and_costs_with_units(viewer, operator, measured_job):
    html = _client(viewer).get("/kernels/packages/toy_attn/").content.decode()
    assert "12 combinations" in html and "<strong>7 variants</strong>" in html
    assert "impl != &#x27;baseline&#x27; or BLOCK == 16" in html
    assert "Bytes (MiB)" in html and "FLOPs (GFLOP)" in html and "Intensity (FLOP/byte)" in html
    assert "<dt>Cache dtype</dt><dd><code>bf16</code>" in html
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


def test_the_job_form_reports_every_fields_errors_in_one_response(operator, toy_package, h200_node):
    c = _client(operator)
    resp = c.post("/kernels/packages/toy_attn/jobs/new/", {"node": "h200-box", "cc": "99.9", "params": "BLOCK=48",
                                                          "batches": "1,x,3", "shapes": ["huge"]})
    html = resp.content.decode()
    assert resp.status_code == 400 and not KernelJob.objects.exists()
    for expected in ("&#x27;x&#x27; is not a positive whole number.",          # read by the form
                     "3 is not a batch size of the manifest ([1, 4])",          # checked by the service
                     "&#x27;99.9&#x27; is not a known compute capability",
                     "48 is not one of the grid&#x27;s values [16, 32, 64]",
                     "&#x27;huge&#x27; is not a shape of toy_attn"):
        assert expected in html, expected
    summary = html.split('id="job-form-errors"', 1)[1].split("</div>", 1)[0]
    assert "(4 fields to fix)" in summary  # batches, cc, params.BLOCK, shapes
    # an unknown node: its own message, and the other fields still checked
    html = c.post("/kernels/packages/toy_attn/jobs/new/", {"node": "nowhere", "cc": "", "params": "BLOCK 32",
                                                          "batches": "2"}).content.decode()
    assert "Choose a registered node." in html and "is neither of the accepted forms" in html
    assert "2 is not a batch size of the manifest ([1, 4])" in html
    assert "give the target compute capability" not in html  # it would come from the node's GPU
    assert not KernelJob.objects.exists()


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


def _facts(html: str, term: str) -> str:
    return html.split(f"<dt>{term}</dt><dd>", 1)[1].split("</dd>", 1)[0]


def test_the_job_page_names_the_built_architecture_and_only_the_languages_toolchain(viewer, measured_job,
                                                                                 real_packages):
    c = _client(viewer)
    # Triton: no command line in the build logs, so the runner's architecture for cc 9.0
    html = c.get(f"/kernels/jobs/{measured_job.pk}/").content.decode()
    assert _facts(html, "Target") == "cc 9.0, sm_90a, built with triton 3.6.0"
    assert _facts(html, "Software") == "driver 580.159.04, CUDA 13.0, torch 2.9.0, Triton 3.6.0"
    assert "nvcc" not in _facts(html, "Software") and "cuda:90" not in html
    # CUDA: the stored H200 job, built by nvcc with -gencode arch=compute_90a,code=sm_90a
    results = real_packages / "sparse_mla_decode_cuda" / "results"
    job = kernel_job_from_measurement(
        package=kernel_package_register(path=real_packages / "sparse_mla_decode_cuda"),
        variants=json.loads((results / "h200-variants.json").read_text()),
        results=json.loads((results / "h200-results.json").read_text()),
        builds=json.loads((results / "sm90a-builds.json").read_text()))
    html = c.get(f"/kernels/jobs/{job.pk}/").content.decode()
    assert _facts(html, "Target") == "cc 9.0, sm_90a, built with nvcc 13.0"
    assert _facts(html, "Software") == "driver 580.159.04, CUDA 13.0, torch 2.11.0+cu130, nvcc 13.0"
    assert "Triton" not in _facts(html, "Software")
    # the label is what the builds logged, not a rule of the page
    for build in KernelBuild.objects.filter(variant__job=job):
        build.log = build.log.replace("compute_90a,code=sm_90a", "compute_90,code=sm_90")
        build.save(update_fields=["log"])
    html = c.get(f"/kernels/jobs/{job.pk}/").content.decode()
    assert _facts(html, "Target") == "cc 9.0, sm_90, built with nvcc 13.0"


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


def test_a_filtered_table_puts_the_job_pages_own_url_in_the_address_bar(viewer, measured_job):
    c = _client(viewer)
    partial = c.get(f"/kernels/jobs/{measured_job.pk}/variants/?state=discarded&sort=-ordinal")
    pushed = partial["HX-Push-Url"]
    assert pushed == f"/kernels/jobs/{measured_job.pk}/?state=discarded&sort=-ordinal"
    # Reloading that URL renders the whole page with the same view of the table.
    page = c.get(pushed).content.decode()
    assert "<html" in page and page.count("data-variant=") == partial.content.decode().count("data-variant=") == 1
    assert c.get(f"/kernels/jobs/{measured_job.pk}/variants/")["HX-Push-Url"] == f"/kernels/jobs/{measured_job.pk}/"


def test_exports_and_config_downloads(viewer, measured_job):
    c = _client(viewer)
    csv_resp = c.get(f"/kernels/jobs/{measured_job.pk}/export.csv")
    assert csv_resp.status_code == 200 and b"median_us" in csv_resp.content
    refused = c.get(f"/kernels/jobs/{measured_job.pk}/export.xml")
    assert refused.status_code == 400 and "format must be one of csv, json; got &#x27;xml&#x27;" in refused.content.decode()
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
    assert "Output, measured → projected (tok/s)" in html and "TPOT mean, measured → projected (ms)" in html
    assert "<strong>16.77</strong>" in html and "<strong>54.5</strong>" in html   # 94 ms x 0.58
    assert 'data-chart="whatif-tok-256-256"' in html and "0.5800" in html
    refused = c.get(f"/kernels/whatif/?sweep={sweep.pk}&share=2&speedup=3")
    assert refused.status_code == 400 and c.get("/kernels/whatif/").status_code == 200
    err = refused.content.decode()
    assert "must be a fraction in (0, 1]" in err and "nothing to speed up), got 2" in err
    assert "Give a speedup" in c.get(f"/kernels/whatif/?sweep={sweep.pk}").content.decode()


def test_the_job_page_sorts_on_a_parameter_mixing_numbers_and_text_from_its_header(viewer, split_package):
    from kernels.services import kernel_job_create

    job = kernel_job_create(package=split_package, node=None, cc="9.0", dispatch=False)
    c = _client(viewer)
    html = c.get(f"/kernels/jobs/{job.pk}/").content.decode()
    link = "sort=param%3ANUM_SPLITS#variant-table"
    assert link in html  # the NUM_SPLITS column header
    ascending = ["2"] * 3 + ["8"] * 3 + ["auto"] * 4  # numbers in numeric order, then text
    for sort, expected in (("param:NUM_SPLITS", ascending), ("-param:NUM_SPLITS", ascending[::-1])):
        for url in (f"/kernels/jobs/{job.pk}/", f"/kernels/jobs/{job.pk}/variants/"):
            resp = c.get(url, {"sort": sort})
            assert resp.status_code == 200, (url, sort)
            body = resp.content.decode()
            assert "This table view was not applied" not in body
            rows = re.findall(r'<tr class="state-[^"]*" data-variant="\d+">(.*?)</tr>', body, re.S)
            # the parameter cells follow the state cell: impl, BLOCK, NUM_SPLITS
            assert [re.findall(r"<td>([^<]*)</td>", row)[2] for row in rows] == expected, (url, sort)


def test_non_ascii_digits_in_the_query_or_the_form_are_refused_like_any_malformed_number(
        viewer, operator, measured_job, seed_pd_sweep, h200_node):
    c = _client(viewer)
    for url in (f"/kernels/jobs/{measured_job.pk}/", f"/kernels/jobs/{measured_job.pk}/variants/"):
        resp = c.get(url + "?batch=%C2%B2")
        assert resp.status_code == 200
        assert "batch: &#x27;\u00b2&#x27; is not a positive whole number." in resp.content.decode()
    html = c.get("/kernels/whatif/?sweep=%C2%B2&speedup=3").content.decode()
    assert "&#x27;\u00b2&#x27; is not a sweep id (a whole number)." in html and "Output, measured → projected (tok/s)" not in html
    html = c.get(f"/kernels/whatif/?sweep={seed_pd_sweep.pk}&best=%C2%B2").content.decode()
    assert "Choose a best variant with a measured speedup over its baseline." in html
    resp = _client(operator).post("/kernels/packages/toy_attn/jobs/new/", {
        "node": "h200-box", "cc": "", "params": "BLOCK=\u00b2", "batches": "1,\u00b2", "shapes": ["small"]})
    body = resp.content.decode()
    assert resp.status_code == 400 and KernelJob.objects.count() == 1  # the measured job only
    assert "&#x27;\u00b2&#x27; is not a positive whole number." in body
    assert "&#x27;\u00b2&#x27; is not one of the grid&#x27;s values [16, 32, 64]" in body


def test_the_batch_menu_of_an_unmeasured_job_lists_only_the_batches_it_selected(viewer, toy_package, h200_node):
    from kernels.services import kernel_job_create

    job = kernel_job_create(package=toy_package, node=h200_node, shapes=["small"], batches=[1], dispatch=False)
    html = _client(viewer).get(f"/kernels/jobs/{job.pk}/").content.decode()
    menu = re.search(r'<select name="batch">(.*?)</select>', html, re.S).group(1)
    assert re.findall(r'<option value="(\d+)"', menu) == ["1"]
    assert "small at batch 1" in html and "wide at batch" not in html


def test_rows_measured_without_a_builds_file_take_their_measurements_state(viewer_api, real_packages):
    """Results ingested without their builds file: each measured row is correct (or wrong), not
    pending, and the state filter finds it."""
    results = real_packages / "sparse_mla_decode_cuda" / "results"
    job = kernel_job_from_measurement(
        package=kernel_package_register(path=real_packages / "sparse_mla_decode_cuda"),
        variants=json.loads((results / "h200-variants.json").read_text()),
        results=json.loads((results / "h200-results.json").read_text()))
    assert not KernelBuild.objects.filter(variant__job=job).exists()
    rows = viewer_api.get(f"/api/kernel-jobs/{job.pk}/variants/").json()["rows"]
    assert {r["state"] for r in rows} == {"correct"} and len(rows) == 27
    correct = viewer_api.get(f"/api/kernel-jobs/{job.pk}/variants/", {"state": "correct"}).json()["rows"]
    assert len(correct) == 27


def test_a_filter_that_cannot_be_read_leaves_the_others_applied(viewer, measured_job):
    c = _client(viewer)
    tiled = c.get(f"/kernels/jobs/{measured_job.pk}/variants/?p.impl=tiled").content.decode()
    both = c.get(f"/kernels/jobs/{measured_job.pk}/variants/?p.impl=tiled&p.BLOCK=999").content.decode()
    everything = c.get(f"/kernels/jobs/{measured_job.pk}/variants/").content.decode()
    assert "p.BLOCK: &#x27;999&#x27; is not one of BLOCK&#x27;s values" in both
    assert both.count("data-variant=") == tiled.count("data-variant=") < everything.count("data-variant=")


def test_the_job_pages_variant_table_pages_through_every_row(viewer, measured_job, monkeypatch):
    from kernels import views

    monkeypatch.setattr(views, "PAGE_ROWS", 3)
    c = _client(viewer)
    total = measured_job.variants.count()
    first = c.get(f"/kernels/jobs/{measured_job.pk}/").content.decode()
    assert f"{total} variants, 1-3 shown" in first and 'class="page-previous"' not in first
    nxt = re.search(r'class="page-next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    assert "offset=3" in nxt
    second = c.get(f"/kernels/jobs/{measured_job.pk}/{nxt}").content.decode()
    assert f"{total} variants, 4-6 shown" in second and 'class="page-previous"' in second
    ids = [v.pk for v in measured_job.variants.order_by("ordinal")]
    assert f'data-variant="{ids[3]}"' in second and f'data-variant="{ids[0]}"' not in second
    bad = c.get(f"/kernels/jobs/{measured_job.pk}/?offset=-1").content.decode()
    assert "offset: &#x27;-1&#x27; is not a whole number &gt;= 0." in bad
