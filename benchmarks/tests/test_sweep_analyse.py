"""The stored ceiling analysis of a sweep (:func:`benchmarks.services.sweep_analyse`): a comparison
sweep with no usable point leaves this sweep's own findings standing, and a sweep without a GPU
count quotes no per-GPU figure, saying whether the count is unknown or zero (CPU-only)."""
from __future__ import annotations

import pytest
from django.utils import timezone

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_analyse, sweep_report_text
from benchmarks.sweeps import recipe_gpu_count
from benchmarks.tests.page_support import json_script, page_text
from benchmarks.tests.test_export_import import _measured_run
from deployments.examples import example_recipe

pytestmark = pytest.mark.django_db

MODEL = "DeepSeek-V4-Flash"


def _sweep(topology: str, num_gpus: int | None) -> BenchmarkSweep:
    return BenchmarkSweep.objects.create(name=f"{topology} sweep", status=SweepStatus.DONE, topology=topology,
                                         num_gpus=num_gpus, served_model_name=MODEL, ended_at=timezone.now())


def _plateau(sweep: BenchmarkSweep) -> None:
    for ordinal, (c, tok_s) in enumerate(((1, 9.95), (8, 24.5), (16, 25.5))):
        _measured_run(sweep, c=c, tok_s=tok_s, ordinal=ordinal)


def test_it_keeps_its_own_findings_when_the_other_topologys_sweep_has_no_usable_point() -> None:
    baseline = _sweep("single", 4)
    BenchmarkRun.objects.create(
        sweep=baseline, ordinal=0, status=RunStatus.DONE, concurrency=1, input_len=256, output_len=256,
        num_requests=1, num_gpus=4, served_model_name=MODEL, output_tok_s=0.0,
        summary={"requests": 1, "successes": 0, "failures": 1, "duration_s": 3.0, "output_throughput_tok_s": 0.0,
                 "errors": {"server closed the connection inside the response body": 1}})
    pd = _sweep("pd", 8)
    _plateau(pd)

    analysis = sweep_analyse(sweep=pd)

    assert analysis["errors"] == {} and analysis["compared_with"] is None
    assert any(f.startswith("The ceiling is about 25.5 tok/s") for f in analysis["findings"]), analysis["findings"]
    [note] = analysis["notes"]
    assert note.startswith(f"256/256: no single-vs-pd comparison with sweep #{baseline.pk}: ")
    assert note.endswith("no point has successful output; nothing to analyse")


def test_it_quotes_no_per_gpu_figure_when_the_gpu_count_is_unknown() -> None:
    known, unknown = _sweep("single", 4), _sweep("single", None)
    _plateau(known)
    _plateau(unknown)

    with_gpus = " ".join(sweep_analyse(sweep=known)["findings"])
    without = sweep_analyse(sweep=unknown)

    assert "6.38 tok/s per GPU on 4 GPUs" in with_gpus
    assert "per GPU" not in " ".join(without["findings"])
    assert [p["tok_s_per_gpu"] for p in without["lengths"]["256/256"]["points"]] == [None, None, None]
    assert without["lengths"]["256/256"]["num_gpus"] is None and without["lengths"]["256/256"]["gpus_known"] is False
    assert any("The ceiling is about 25.5 tok/s (observed at c=16)" in f for f in without["findings"])
    assert without["notes"] == ["the GPU count is unknown: no per-GPU figure is given and no per-GPU comparison made"]


def test_a_cpu_only_recipe_counts_zero_gpus_and_a_sim_one_without_gpus_modelled_counts_none() -> None:
    llama = example_recipe("local-llamacpp")
    assert recipe_gpu_count(spec=llama["spec"], engine=llama["engine"]) == 0
    sim = example_recipe("local-sim-single")
    assert recipe_gpu_count(spec=sim["spec"], engine="sim") == sim["spec"]["sim"]["gpus_modelled"]
    sim["spec"]["sim"].pop("gpus_modelled")
    assert recipe_gpu_count(spec=sim["spec"], engine="sim") is None
    assert recipe_gpu_count(spec={}, engine="llamacpp") is None


def test_a_cpu_only_sweep_says_it_has_no_gpus_not_that_the_count_is_unknown(viewer) -> None:
    cpu = BenchmarkSweep.objects.create(name="llama sweep", status=SweepStatus.DONE, topology="single", num_gpus=0,
                                        engine="llamacpp", served_model_name="tiny-random", ended_at=timezone.now())
    _plateau(cpu)
    cpu.runs.update(num_gpus=0)
    analysis = sweep_analyse(sweep=cpu)
    assert analysis["notes"] == ["no GPUs (CPU-only): no per-GPU figure is given and no per-GPU comparison made"]
    assert "per GPU" not in " ".join(analysis["findings"])
    assert [p["tok_s_per_gpu"] for p in analysis["lengths"]["256/256"]["points"]] == [None, None, None]
    cpu.analysis = analysis
    cpu.save(update_fields=["analysis"])

    report = sweep_report_text(sweep=cpu)
    assert "llamacpp single, no GPUs (CPU-only);" in report
    assert "unknown" not in report

    html = page_text(viewer, f"/benchmarks/sweeps/{cpu.pk}/")
    assert "GPU count unknown" not in html and "GPU count is unknown" not in html
    assert '0 <span class="muted small" data-gpus-none>(CPU-only: no per-GPU figure)</span>' in html
    charts = json_script(html, "chart-sweep-tok-s-per-gpu")
    assert charts["empty"] == "No GPUs (CPU-only): no per-GPU figure." and charts["series"] == []

    unknown = _sweep("single", None)
    _plateau(unknown)
    assert "single, GPU count unknown;" in sweep_report_text(sweep=unknown)
