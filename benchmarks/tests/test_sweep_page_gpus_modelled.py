"""A sim deployment takes no GPUs: its sweep's GPU count is the one its sim profile models
(``spec.sim.gpus_modelled``), and the sweep page, its runs' pages and the API's field help say so,
as the command line does ("8 GPUs modelled"); a sweep of a GPU engine shows its count as the GPUs
it used. A run page's load reads "concurrency 4 (closed loop)", no unit to get wrong for one."""
import re

import pytest
from django.test import Client

from benchmarks.models import BenchmarkRun, BenchmarkSweep

pytestmark = pytest.mark.django_db


def _fact(viewer, url: str, name: str = "GPUs") -> str:
    page = Client()
    page.force_login(viewer)
    body = page.get(url).content.decode()
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", re.search(rf"<dt>{name}</dt><dd[^>]*>(.*?)</dd>", body).group(1)))


def _gpus_fact(viewer, sweep) -> str:
    return _fact(viewer, f"/benchmarks/sweeps/{sweep.pk}/")


def test_a_sim_sweeps_gpus_are_said_to_be_modelled_by_its_sim_profile(viewer):
    sim = BenchmarkSweep.objects.create(name="sim", engine="sim", topology="pd", status="done", num_gpus=8)
    assert _gpus_fact(viewer, sim) == "8 modelled (by the sim profile, not GPUs it ran on; used for tok/s per GPU)"
    gpu = BenchmarkSweep.objects.create(name="gpu", engine="sglang", topology="single", status="done", num_gpus=2)
    assert _gpus_fact(viewer, gpu) == "2 (used for tok/s per GPU)"
    none = BenchmarkSweep.objects.create(name="cpu", engine="llamacpp", topology="single", status="done")
    assert _gpus_fact(viewer, none) == "—"


def test_the_api_field_help_says_a_sim_deployments_gpus_are_modelled(viewer_api):
    schema = viewer_api.get("/api/schema/", {"format": "json"})
    assert schema.status_code == 200, schema.status_code
    text = schema.content.decode()
    assert "for a sim deployment (engine sim) the GPUs its sim profile models (spec.sim.gpus_modelled), not GPUs it " \
           "ran on" in text


def test_a_sim_runs_page_says_its_gpus_are_modelled_as_its_sweep_page_does(viewer):
    sim = BenchmarkSweep.objects.create(name="sim", engine="sim", topology="pd", status="done", num_gpus=8)
    run = BenchmarkRun.objects.create(sweep=sim, status="done", concurrency=1, input_len=64, output_len=64,
                                      num_gpus=8, snapshot={"engine": "sim"})
    assert _fact(viewer, f"/benchmarks/runs/{run.pk}/") == \
        "8 modelled (by the sim profile, not GPUs it ran on; used for tok/s per GPU)"
    gpu = BenchmarkSweep.objects.create(name="gpu", engine="sglang", topology="single", status="done", num_gpus=2)
    run = BenchmarkRun.objects.create(sweep=gpu, status="done", concurrency=4, input_len=64, output_len=64,
                                      num_gpus=2, snapshot={"engine": "sglang"})
    assert _fact(viewer, f"/benchmarks/runs/{run.pk}/") == "2 (used for tok/s per GPU)"


def test_a_runs_load_names_its_concurrency_without_a_unit_that_disagrees_in_number(viewer):
    for concurrency in (1, 4):
        run = BenchmarkRun.objects.create(status="done", concurrency=concurrency, input_len=64, output_len=64)
        assert _fact(viewer, f"/benchmarks/runs/{run.pk}/", "Load") == f"concurrency {concurrency} (closed loop)"
