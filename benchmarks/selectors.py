"""Non-trivial reads of the benchmarks app (lists with filters, related rows prefetched)."""
from __future__ import annotations

from django.db.models import QuerySet

from benchmarks.models import BenchmarkRun, BenchmarkSweep
from controlplane.errors import InvalidInput, NotFound


def sweep_list(*, deployment_id: int | None = None, status: str | None = None,
               served_model_name: str | None = None) -> QuerySet[BenchmarkSweep]:
    """Sweeps, newest first, optionally filtered by deployment, status or served model name."""
    qs = BenchmarkSweep.objects.select_related("deployment__recipe", "created_by")
    if deployment_id is not None:
        qs = qs.filter(deployment_id=deployment_id)
    if status:
        qs = qs.filter(status=status)
    if served_model_name:
        qs = qs.filter(served_model_name=served_model_name)
    return qs


def sweep_runs(*, sweep: BenchmarkSweep) -> QuerySet[BenchmarkRun]:
    """The runs of ``sweep`` in grid order."""
    return sweep.runs.order_by("ordinal", "id")


def run_list(*, sweep_id: int | None = None, source: str | None = None, status: str | None = None,
             order: str | None = None) -> QuerySet[BenchmarkRun]:
    """Runs, filtered by sweep, source (measured, imported) or status; ``order`` one of
    ``output_tok_s``, ``-output_tok_s``, ``ttft_p99_ms``, ``-ttft_p99_ms``, ``-created_at``
    (default: sweep, grid order). Raises :class:`InvalidInput` for another order."""
    qs = BenchmarkRun.objects.select_related("sweep")
    if sweep_id is not None:
        qs = qs.filter(sweep_id=sweep_id)
    if source:
        qs = qs.filter(source=source)
    if status:
        qs = qs.filter(status=status)
    if order:
        allowed = {"output_tok_s", "-output_tok_s", "ttft_p99_ms", "-ttft_p99_ms", "-created_at", "created_at"}
        if order not in allowed:
            raise InvalidInput({"order": [f"must be one of {', '.join(sorted(allowed))}"]})
        qs = qs.order_by(order, "id")
    return qs


def runs_by_ids(*, ids: list[int]) -> list[BenchmarkRun]:
    """The runs with ``ids``, in the order given; :class:`NotFound` names the missing ids."""
    found = {r.pk: r for r in BenchmarkRun.objects.filter(pk__in=ids).select_related("sweep")}
    missing = [i for i in ids if i not in found]
    if missing:
        raise NotFound(f"no run with id {', '.join(map(str, missing))}")
    return [found[i] for i in ids]


def sweep_latest_for_recipe(*, recipe_name: str) -> BenchmarkSweep | None:
    """The newest sweep of any deployment of the recipe named ``recipe_name``, or None."""
    return sweep_list().filter(deployment__recipe__name=recipe_name).first()
