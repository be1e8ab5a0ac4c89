"""The stored ceiling analysis of a sweep (:func:`benchmarks.services.sweep_analyse`): a comparison
sweep with no usable point leaves this sweep's own findings standing, and a sweep without a GPU
count quotes no per-GPU figure."""
from __future__ import annotations

import pytest
from django.utils import timezone

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_analyse
from benchmarks.tests.test_export_import import _measured_run

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
