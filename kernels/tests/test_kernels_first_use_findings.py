"""What a first-time user ran into, as specs: made-up compute capabilities refused, variant-table
queries the table cannot honour refused with the valid choices, the job form's errors visible and
short, both forms of the grid subset, why a pending job waits, ingested jobs' progress, and the
what-if page refusing what the API refuses."""
import re

from django.test import Client

from kernels.models import KernelBest, KernelJob
from kernels.services import (
    KNOWN_CCS,
    SHARED_MEM_LIMIT_BYTES,
    kernel_job_create,
    kernel_job_ingest,
)
from kernels.tests.conftest import H200_DEVICE, build_fact, result_row


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


# --- compute capabilities ---------------------------------------------------------------------


def test_it_refuses_a_made_up_compute_capability_naming_the_known_ones(operator_api, operator, toy_package, cpu_node):
    resp = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "cpu-box", "cc": "99.9"},
                             format="json")
    assert resp.status_code == 400
    msg = resp.json()["cc"][0]
    assert msg.startswith("'99.9' is not a known compute capability") and "9.0" in msg and "12.1" in msg
    assert not KernelJob.objects.exists()
    page = _client(operator).post("/kernels/packages/toy_attn/jobs/new/", {"node": "cpu-box", "cc": "99.9"})
    assert page.status_code == 400 and "is not a known compute capability" in page.content.decode()
    ok = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "cpu-box", "cc": "10.3"},
                           format="json")
    assert ok.status_code == 201 and ok.json()["target_cc"] == "10.3"


def test_it_knows_the_shared_memory_limit_of_every_accepted_compute_capability():
    assert set(KNOWN_CCS) <= set(SHARED_MEM_LIMIT_BYTES)
    assert SHARED_MEM_LIMIT_BYTES["10.0"] == 227 * 1024 and SHARED_MEM_LIMIT_BYTES["12.1"] == 99 * 1024


# --- variant table ----------------------------------------------------------------------------


def test_it_answers_an_unknown_sort_parameter_or_batch_with_400_naming_the_valid_ones(viewer_api, measured_job):
    url = f"/api/kernel-jobs/{measured_job.pk}/variants/"
    for sort in ("bogus", "-us"):
        resp = viewer_api.get(url, {"sort": sort})
        assert resp.status_code == 400, sort
        assert resp.json()["sort"][0].startswith(f"'{sort}' is not a sort key; keys: ordinal")
        assert "us:small" in resp.json()["sort"][0]
    resp = viewer_api.get(url, {"p.nope": "1"})
    assert resp.status_code == 400
    assert resp.json() == {"p.nope": ["not a parameter of this job; parameters: impl, BLOCK, num_warps "
                                      "(filter as p.<parameter>=<value>)"]}
    resp = viewer_api.get(url, {"batch": 999})
    assert resp.status_code == 400 and resp.json()["batch"] == ["999 is not a batch of this job; batches: 1, 4"]


def test_it_sorts_by_the_tensor_core_column_its_header_links_to(viewer_api, viewer, measured_job):
    url = f"/api/kernel-jobs/{measured_job.pk}/variants/"
    table = viewer_api.get(url, {"sort": "-tensor_core"}).json()
    assert table["sort"] == "-tensor_core"
    values = [r["build"]["tensor_core"] for r in table["rows"] if r["build"] and r["build"]["tensor_core"] is not None]
    assert values == sorted(values, reverse=True)
    html = _client(viewer).get(f"/kernels/jobs/{measured_job.pk}/").content.decode()
    link = re.search(r'<a href="([^"]*sort=tensor_core[^"]*)">tensor cores', html)
    assert link, "the tensor cores header links to its sort key"
    assert "hx-get" not in link.group(0)  # a plain link: the URL changes, a sorted view can be shared


def test_the_job_page_shows_why_a_table_query_was_not_applied(viewer, measured_job):
    c = _client(viewer)
    html = c.get(f"/kernels/jobs/{measured_job.pk}/?sort=bogus&p.nope=1&batch=999").content.decode()
    assert "This table view was not applied as asked" in html
    assert "&#x27;bogus&#x27; is not a sort key" in html
    assert "not a parameter of this job; parameters: impl, BLOCK, num_warps" in html
    assert "999 is not a batch of this job; batches: 1, 4" in html
    assert html.count("data-variant=") == measured_job.variants_total  # the default view is shown
    partial = c.get(f"/kernels/jobs/{measured_job.pk}/variants/?sort={'x' * 5000}").content.decode()
    assert "is not a sort key" in partial and "x" * 100 not in partial


def test_the_key_columns_come_first_in_the_best_and_variant_tables(viewer, measured_job):
    html = _client(viewer).get(f"/kernels/jobs/{measured_job.pk}/").content.decode()
    best_head = html.split('<table class="kernel-best">', 1)[1].split("</thead>", 1)[0]
    heads = re.findall(r"<th[^>]*>([^<]+)</th>", best_head)
    assert heads[:5] == ["Shape", "Batch", "Median (µs)", "Speedup over own baseline", "Roofline (%)"]
    variant_head = html.split('<table class="variants results">', 1)[1].split("</thead>", 1)[0]
    first_row = variant_head.split("</tr>", 1)[0]
    assert first_row.index("small at batch 1") < first_row.index("State") < first_row.index("registers")


# --- job form ---------------------------------------------------------------------------------


def test_the_job_form_takes_the_apis_json_and_says_which_forms_it_takes(operator, toy_package, h200_node,
                                                                         django_capture_on_commit_callbacks):
    c = _client(operator)
    with django_capture_on_commit_callbacks(execute=False):
        resp = c.post("/kernels/packages/toy_attn/jobs/new/",
                      {"node": "h200-box", "params": '{"impl": ["tiled"], "BLOCK": [32]}'})
    job = KernelJob.objects.get()
    assert resp.status_code == 302 and job.params_subset == {"impl": ["tiled"], "BLOCK": [32]}
    # a bare value is refused in the JSON form, as the API refuses it
    bare = c.post("/kernels/packages/toy_attn/jobs/new/", {"node": "h200-box", "params": '{"BLOCK": 32}'})
    assert bare.status_code == 400 and KernelJob.objects.count() == 1
    assert "&#x27;BLOCK&#x27; must be a list of grid values in the JSON form" in bare.content.decode()
    bad = c.post("/kernels/packages/toy_attn/jobs/new/", {"node": "h200-box", "params": "BLOCK 32"}).content.decode()
    assert "&#x27;BLOCK 32&#x27; is neither of the accepted forms: PARAM=v1,v2; PARAM2=v" in bad
    assert "{&quot;BLOCK_H&quot;: [64]}" in bad
    broken = c.post("/kernels/packages/toy_attn/jobs/new/", {"node": "h200-box", "params": '{"BLOCK": [32'})
    assert broken.status_code == 400 and "is not valid JSON" in broken.content.decode()


def test_the_job_forms_errors_are_summarised_at_the_top_and_never_echo_a_huge_input(operator, toy_package, h200_node):
    c = _client(operator)
    huge = "BLOCK=" + "7," * 344_000  # ~688 KB, as a pasted file would be
    resp = c.post("/kernels/packages/toy_attn/jobs/new/", {"node": "h200-box", "params": huge})
    html = resp.content.decode()
    assert resp.status_code == 400 and len(html) < 100_000 and "7,7,7,7,7,7,7,7,7,7" not in html
    assert "the grid subset is 688006 characters long; at most 10000 are read" in html
    summary = html.index('id="job-form-errors"')
    assert summary < html.index("<h2>Grid</h2>") and 'href="#start-job"' in html and 'id="start-job"' in html
    long_value = c.post("/kernels/packages/toy_attn/jobs/new/",
                        {"node": "h200-box", "params": "BLOCK=" + "9" * 3000}).content.decode()
    assert "9" * 300 not in long_value.split('id="id_params"', 1)[0]  # messages are cut


# --- waiting, ingest, what-if -----------------------------------------------------------------


def test_a_pending_job_says_it_waits_for_the_node_agent(operator_api, viewer, toy_package, cpu_node,
                                                        django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        resp = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "cpu-box", "cc": "9.0"},
                                 format="json")
    body = resp.json()
    assert body["status"] == "pending"
    assert body["waiting_reason"] == "waiting for node agent cpu-box (last heartbeat never)"
    html = _client(viewer).get(f"/kernels/jobs/{body['id']}/progress/").content.decode()
    assert "waiting for node agent cpu-box (last heartbeat never)" in html
    from django.utils import timezone

    cpu_node.agent_heartbeat_at = timezone.now()
    cpu_node.save(update_fields=["agent_heartbeat_at"])
    assert operator_api.get(f"/api/kernel-jobs/{body['id']}/").json()["waiting_reason"] is None


def test_an_ingested_job_shows_what_was_ingested_as_its_progress(toy_package, h200_node):
    job = kernel_job_create(package=toy_package, node=h200_node, dispatch=False)
    ids = [v.pk for v in job.variants.order_by("ordinal")]
    kernel_job_ingest(job=job, builds=[build_fact(pk) for pk in ids])
    job.refresh_from_db()
    assert (job.phase, job.progress_done, job.progress_total) == ("compile", 7, 7)
    rows = [result_row(ids[0], "small", 1, median_us=20.0), result_row(ids[1], "small", 1, median_us=10.0)]
    kernel_job_ingest(job=job, results={"device": H200_DEVICE, "results": rows})
    job.refresh_from_db()
    assert (job.status, job.phase, job.progress_done, job.progress_total) == ("done", "bench", 2, 2)


def test_the_whatif_page_refuses_both_sources_and_says_why_a_speedup_is_refused(viewer, measured_job,
                                                                               seed_pd_sweep):
    sweep = seed_pd_sweep
    best = KernelBest.objects.filter(job=measured_job, shape="small", batch=1).get()
    c = _client(viewer)
    both = c.get(f"/kernels/whatif/?sweep={sweep.pk}&speedup=3&best={best.pk}").content.decode()
    assert "Give speedup (a number) or best (a best-variant id), exactly one: both were given." in both
    assert "Output, measured → projected (tok/s)" not in both
    for raw in ("nan", "inf"):
        html = c.get(f"/kernels/whatif/?sweep={sweep.pk}&speedup={raw}").content.decode()
        assert f"&#x27;{raw}&#x27; is not a finite number." in html and "Give a speedup" not in html
