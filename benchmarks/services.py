"""Business logic of benchmark sweeps and runs: create, cancel, execute (the task body), analyse,
compare, export and import.

Rules and where they come from:

* A sweep runs only when its deployment is ready; it waits at most ``grid.wait_ready_s`` (default:
  the deployment's startup timeout + 60 s) and then fails with the reason (issue case C14).
* Points run one after the other; ``cancel_requested`` is checked before each point, at each
  progress tick and while waiting. Progress columns are written at most every
  :data:`PROGRESS_PERIOD_S` seconds.
* Fixed-length points send ``ignore_eos`` and check every request's length
  (``/work/shared/design/metrics.md``); a run with ``output_length_mismatch`` is never ranked
  silently against fixed-length runs (:func:`runs_compare`, case C10).
* Per-request records are files (``VAR_DIR/benchmarks/run-<id>.npz``), never database rows.
* The ceiling analysis (:mod:`benchmarks.analysis`) is stored on the sweep when it finishes,
  compared with the latest finished sweep of the same served model and lengths on the other
  topology (PD vs single) when one exists.
"""
from __future__ import annotations

import csv
import io
import json
import logging
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.analysis import SweepPoint, ceiling_analyse
from benchmarks.choices import SWEEP_ACTIVE, SWEEP_TERMINAL, RunSource, RunStatus, SweepStatus
from benchmarks.importers import import_results
from benchmarks.loadgen import Api, LoadConfig, RecordStore, Slo, loadgen_run, random_dataset, run_summary
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.sweeps import WAIT_READY_MARGIN_S, grid_points, grid_validate, recipe_gpu_count, summary_point
from controlplane.errors import Conflict, InvalidInput
from controlplane.jsonsafe import json_safe
from controlplane.redaction import redact_text

log = logging.getLogger(__name__)

PROGRESS_PERIOD_S = 0.5
# Seconds between deployment-row polls while a sweep waits for ready.
WAIT_POLL_S = 0.5
SERVER_INFO_TIMEOUT_S = 5.0
# Flags that make a run's numbers not comparable with a fixed-length run (metrics.md).
LENGTH_FLAGS = ("output_length_mismatch", "variable_lengths", "lengths_unknown")
# Engines whose servers take a prompt as token ids (exact input lengths); others get text.
TOKEN_ID_ENGINES = ("sim", "sglang", "vllm")
# Summary keys compared side by side (key path, label, unit).
COMPARE_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("output_throughput_tok_s", "output throughput", "tok/s"),
    ("tok_s_per_gpu", "output throughput per GPU", "tok/s"),
    ("request_throughput_req_s", "request throughput", "req/s"),
    ("goodput_req_s", "goodput", "req/s"),
    ("ttft_ms.mean", "TTFT mean", "ms"), ("ttft_ms.p50", "TTFT p50", "ms"), ("ttft_ms.p99", "TTFT p99", "ms"),
    ("tpot_ms.mean", "TPOT mean", "ms"), ("tpot_ms.p99", "TPOT p99", "ms"),
    ("itl_ms.mean", "ITL mean", "ms"), ("itl_ms.p99", "ITL p99", "ms"),
    ("e2e_ms.mean", "E2E mean", "ms"), ("e2e_ms.p50", "E2E p50", "ms"), ("e2e_ms.p99", "E2E p99", "ms"),
    ("failures", "failures", "requests"),
)


# ---------------------------------------------------------------------------------------- create


def sweep_create(*, deployment, user, grid: dict, name: str = "") -> BenchmarkSweep:
    """Create a sweep of ``deployment`` over ``grid`` and enqueue it on the ``control`` queue.

    ``grid`` is validated by :func:`benchmarks.sweeps.grid_validate` (the deployment's engine
    picks the default API; the default wait for ready is the recipe's ``startup_timeout_s`` + 60 s).
    The GPU count for per-GPU numbers comes from the deployment's spec snapshot
    (:func:`benchmarks.sweeps.recipe_gpu_count`). The task is sent after the transaction commits.
    Raises :class:`InvalidInput` for a bad grid and :class:`Conflict` for a stopped or failed
    deployment or one that already has an active sweep.
    """
    from deployments.choices import DEPLOYMENT_TERMINAL

    if deployment.status in DEPLOYMENT_TERMINAL:
        raise Conflict(f"deployment #{deployment.pk} is {deployment.status}; deploy it again to sweep it")
    # Two sweeps against one deployment at once would each measure the other's load.
    busy = BenchmarkSweep.objects.filter(deployment=deployment, status__in=SWEEP_ACTIVE).order_by("pk").first()
    if busy is not None:
        raise Conflict(f"sweep #{busy.pk} is already {busy.status} on deployment #{deployment.pk}; "
                       "wait for it or cancel it first (concurrent sweeps would skew each other)")
    spec = deployment.spec_snapshot or {}
    engine = deployment.recipe.engine
    startup = int(spec.get("startup_timeout_s") or 1800)
    norm = grid_validate(grid, engine=engine, default_wait_ready_s=startup + WAIT_READY_MARGIN_S)
    points = grid_points(norm)
    sweep = BenchmarkSweep.objects.create(
        deployment=deployment, grid=norm, created_by=user if getattr(user, "pk", None) else None,
        name=name or f"{deployment.recipe.name} c={','.join(map(str, norm['concurrency']))} "
                     f"{' '.join(f'{a}/{b}' for a, b in norm['lengths'])}",
        points_total=len(points), requests_total=sum(p["num_requests"] for p in points),
        num_gpus=recipe_gpu_count(spec=spec, engine=engine),
        served_model_name=spec.get("served_model_name") or deployment.recipe.name,
        topology=deployment.recipe.topology, engine=engine,
    )
    sweep_enqueue(sweep=sweep)
    return sweep


def sweep_enqueue(*, sweep: BenchmarkSweep) -> None:
    """Send ``sweep_run_task(sweep.id)`` to the ``control`` queue once the current transaction commits."""
    from benchmarks.tasks import sweep_run_task

    sweep_id = sweep.pk
    transaction.on_commit(lambda: sweep_run_task.apply_async(args=[sweep_id], queue="control"))


def sweep_cancel(*, sweep: BenchmarkSweep, user) -> BenchmarkSweep:
    """Request cancellation: sets ``cancel_requested`` first (the running task sees it at its next
    progress tick or between points); a sweep no task has claimed yet becomes ``cancelled`` at
    once. Raises :class:`Conflict` for a sweep that already ended."""
    if sweep.status in SWEEP_TERMINAL:
        raise Conflict(f"sweep #{sweep.pk} is already {sweep.status}")
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(cancel_requested=True)
    BenchmarkSweep.objects.filter(pk=sweep.pk, status=SweepStatus.PENDING).update(
        status=SweepStatus.CANCELLED, reason=_by("cancelled", user), ended_at=timezone.now())
    sweep.refresh_from_db()
    return sweep


def _by(what: str, user) -> str:
    return f"{what} by {user.get_username()}" if getattr(user, "pk", None) else what


# ---------------------------------------------------------------------------------------- execute


class _Cancelled(Exception):
    pass


def sweep_execute(*, sweep_id: int) -> str:
    """Run sweep ``sweep_id`` here (the body of :func:`benchmarks.tasks.sweep_run_task`); blocking.

    Claims pending → waiting with a conditional UPDATE, so a second delivery of the same task
    returns without doing anything. Waits for the deployment to be ready, stores the snapshot,
    runs every grid point with the load generator (one :class:`BenchmarkRun` each, records in a
    file), then stores the ceiling analysis. Ends done, failed (``reason``) or cancelled.
    Returns the final status.
    """
    now = timezone.now()
    claimed = BenchmarkSweep.objects.filter(pk=sweep_id, status=SweepStatus.PENDING, cancel_requested=False).update(
        status=SweepStatus.WAITING, started_at=now)
    if not claimed:
        BenchmarkSweep.objects.filter(pk=sweep_id, status=SweepStatus.PENDING, cancel_requested=True).update(
            status=SweepStatus.CANCELLED, reason="cancelled before it started", ended_at=now)
        return BenchmarkSweep.objects.filter(pk=sweep_id).values_list("status", flat=True).first() or "missing"
    sweep = BenchmarkSweep.objects.select_related("deployment__recipe", "deployment__node").get(pk=sweep_id)
    try:
        deployment = _wait_ready(sweep)
        snapshot = sweep_snapshot(sweep=sweep, deployment=deployment)
        BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=SweepStatus.RUNNING, snapshot=json_safe(snapshot))
        for ordinal, point in enumerate(grid_points(sweep.grid)):
            _check_cancel(sweep.pk)
            _run_point(sweep, deployment, ordinal, point, snapshot)
            BenchmarkSweep.objects.filter(pk=sweep.pk).update(points_done=F("points_done") + 1)
        sweep.refresh_from_db()
        analysis = sweep_analyse(sweep=sweep)
        _finish(sweep.pk, SweepStatus.DONE, "", analysis=analysis)
    except _Cancelled:
        _finish(sweep.pk, SweepStatus.CANCELLED, "cancelled on request")
    except Exception as exc:  # the row must say why; the error is also logged with its traceback
        log.exception("sweep %s failed", sweep_id)
        _finish(sweep.pk, SweepStatus.FAILED, redact_text(f"{type(exc).__name__}: {exc}"
                                                          if not isinstance(exc, _SweepFailed) else str(exc)))
    return BenchmarkSweep.objects.get(pk=sweep_id).status


class _SweepFailed(Exception):
    pass


def _finish(sweep_id: int, status: str, reason: str, *, analysis: dict | None = None) -> None:
    fields: dict[str, Any] = {"status": status, "reason": reason, "ended_at": timezone.now(), "current_point": ""}
    if analysis is not None:
        fields["analysis"] = json_safe(analysis)
    BenchmarkSweep.objects.filter(pk=sweep_id, status__in=SWEEP_ACTIVE).update(**fields)
    BenchmarkRun.objects.filter(sweep_id=sweep_id, status=RunStatus.RUNNING).update(
        status=RunStatus.CANCELLED if status == SweepStatus.CANCELLED else RunStatus.FAILED,
        reason=reason or status, ended_at=timezone.now())


def _check_cancel(sweep_id: int) -> None:
    if BenchmarkSweep.objects.filter(pk=sweep_id, cancel_requested=True).exists():
        raise _Cancelled()


def _wait_ready(sweep: BenchmarkSweep):
    """Poll the deployment row until ready; raise :class:`_SweepFailed` with the reason (C14)."""
    from deployments.choices import DEPLOYMENT_TERMINAL, DeploymentStatus

    deployment = sweep.deployment
    if deployment is None:
        raise _SweepFailed("the sweep has no deployment")
    limit = float(sweep.grid.get("wait_ready_s", 0))
    start = time.monotonic()
    while True:
        deployment.refresh_from_db()
        if deployment.status == DeploymentStatus.READY and deployment.entry_url:
            return deployment
        if deployment.status in DEPLOYMENT_TERMINAL or deployment.status == DeploymentStatus.STOPPING:
            raise _SweepFailed(f"deployment #{deployment.pk} is {deployment.status}"
                               + (f": {deployment.reason}" if deployment.reason else "") + "; nothing to benchmark")
        waited = time.monotonic() - start
        if waited >= limit:
            raise _SweepFailed(f"deployment #{deployment.pk} was not ready after {limit:.0f} s of waiting "
                               f"(status {deployment.status}" + (f": {deployment.reason}" if deployment.reason else "")
                               + ")")
        _check_cancel(sweep.pk)
        time.sleep(min(WAIT_POLL_S, max(0.01, limit - waited)))


def sweep_snapshot(*, sweep: BenchmarkSweep, deployment) -> dict[str, Any]:
    """What was running, taken when the sweep starts: recipe name and version, the spec snapshot,
    each process's role, argv and env (already redacted by the agent), GPU ids, intended and
    effective pinning; engine and router versions from ``GET <url>/get_server_info`` of the entry
    URL and of each worker (``null`` with the error when a server has no such route); the node;
    the client host (this worker's ``socket.gethostname()``) and Ceiling's version."""
    processes = []
    versions: dict[str, Any] = {}
    for p in deployment.processes.order_by("role", "ordinal"):
        processes.append({
            "role": p.role, "ordinal": p.ordinal, "argv": list(p.argv), "env_redacted": dict(p.env_redacted),
            "gpu_ids": list(p.gpu_ids), "cpus": p.cpus, "numa_node": p.numa_node, "mem_nodes": p.mem_nodes,
            "pin_method": p.pin_method, "effective_cpus": p.effective_cpus, "effective_mems": p.effective_mems,
            "pinning_verified": p.pinning_verified, "ports": dict(p.ports),
        })
        if p.health_url and p.role != "router":
            base = p.health_url.rsplit("/", 1)[0]
            versions[f"{p.role}{p.ordinal}"] = _server_info(base)
    versions["entry"] = _server_info(deployment.entry_url)
    return {
        "deployment_id": deployment.pk, "recipe": deployment.recipe.name, "recipe_id": deployment.recipe_id,
        "recipe_version": deployment.recipe_version, "engine": deployment.recipe.engine,
        "topology": deployment.recipe.topology, "spec": deployment.spec_snapshot, "entry_url": deployment.entry_url,
        "processes": processes, "server_info": versions,
        "node": {"name": deployment.node.name, "hostname": deployment.node.hostname},
        "client_host": socket.gethostname(), "ceiling_version": settings.CEILING_VERSION,
        "taken_at": timezone.now().isoformat(),
    }


def _server_info(base_url: str) -> dict[str, Any]:
    """``{"version": .., "model": .., "raw_keys": [...]}`` from ``/get_server_info``, or the error."""
    if not base_url:
        return {"version": None, "error": "no URL"}
    url = base_url.rstrip("/") + "/get_server_info"
    try:
        resp = httpx.get(url, timeout=SERVER_INFO_TIMEOUT_S)
        if resp.status_code != 200:
            return {"version": None, "error": f"HTTP {resp.status_code} from {url}"}
        info = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        return {"version": None, "error": f"{type(exc).__name__}: {exc}"[:300]}
    if not isinstance(info, dict):
        return {"version": None, "error": "not a JSON object"}
    sim = info.get("sim") if isinstance(info.get("sim"), dict) else {}
    return {"version": info.get("version"), "model": info.get("served_model_name") or info.get("model_path"),
            "disaggregation_mode": info.get("disaggregation_mode"),
            "sim_profile": (sim.get("profile") or {}).get("name") if isinstance(sim.get("profile"), dict) else None}


def _metrics_urls(deployment) -> list[str]:
    """Prometheus endpoints whose generation counters cover the run: decode servers for PD,
    the single server otherwise (the router would double count). llama.cpp exposes none."""
    if deployment.recipe.engine == "llamacpp":
        return []
    roles = ("decode",) if deployment.recipe.topology == "pd" else ("single",)
    return [p.health_url.rsplit("/", 1)[0] + "/metrics"
            for p in deployment.processes.filter(role__in=roles) if p.health_url]


def _server_counters(urls: list[str]) -> tuple[float, float] | None:
    """Summed (finished requests, generated tokens) from SGLang/vLLM counters, None when absent."""
    reqs = toks = 0.0
    found = False
    for url in urls:
        try:
            text = httpx.get(url, timeout=2.0).text
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    if s.name.endswith("generation_tokens_total"):
                        toks += s.value
                        found = True
                    elif s.name in ("sglang:num_requests_total", "vllm:request_success_total"):
                        reqs += s.value
        except (httpx.HTTPError, ValueError):
            return None
    return (reqs, toks) if found else None


def _run_point(sweep: BenchmarkSweep, deployment, ordinal: int, point: dict, snapshot: dict) -> BenchmarkRun:
    """Run one grid point and store it; progress from the servers' counters while it runs."""
    grid = sweep.grid
    api = Api(grid["api"])
    engine = deployment.recipe.engine
    label = (f"c={point['concurrency']}" if point["concurrency"] is not None else f"{point['request_rate']:g} req/s")
    label += f" {point['input_len']}/{point['output_len']}"
    run, _ = BenchmarkRun.objects.update_or_create(
        sweep=sweep, ordinal=ordinal,
        defaults=dict(status=RunStatus.RUNNING, concurrency=point["concurrency"], request_rate=point["request_rate"],
                      input_len=point["input_len"], output_len=point["output_len"],
                      num_requests=point["num_requests"], api=api.value, served_model_name=sweep.served_model_name,
                      num_gpus=sweep.num_gpus, snapshot=json_safe(snapshot), started_at=timezone.now(),
                      created_by=sweep.created_by),
    )
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(current_point=label, current_tok_s=None)
    token_ids = engine in TOKEN_ID_ENGINES and api is not Api.CHAT
    specs = random_dataset(num=point["num_requests"], input_len=point["input_len"], output_len=point["output_len"],
                           seed=grid.get("seed", 0) + ordinal, token_ids=token_ids, chat=api is Api.CHAT)
    warmup = random_dataset(num=grid.get("warmup", 0), input_len=point["input_len"], output_len=point["output_len"],
                            seed=grid.get("seed", 0) + 10_000 + ordinal, token_ids=token_ids, chat=api is Api.CHAT)
    urls = _metrics_urls(deployment)
    cfg = LoadConfig(base_url=deployment.entry_url, api=api, model=sweep.served_model_name,
                     concurrency=point["concurrency"], rate=point["request_rate"], seed=grid.get("seed", 0),
                     warmup=len(warmup), ignore_eos=True, fixed_output=True, metrics_urls=urls)
    done_before = BenchmarkSweep.objects.filter(pk=sweep.pk).values_list("requests_done", flat=True).first() or 0
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = loadgen_run(config=cfg, specs=specs, warmup_specs=warmup)
        except BaseException as exc:  # re-raised in the sweep's thread below
            outcome["error"] = exc

    thread = threading.Thread(target=work, name=f"sweep-{sweep.pk}-point-{ordinal}", daemon=True)
    base = _server_counters(urls)
    last = (time.monotonic(), base)
    thread.start()
    while thread.is_alive():
        thread.join(PROGRESS_PERIOD_S)
        if not thread.is_alive():
            break
        if BenchmarkSweep.objects.filter(pk=sweep.pk, cancel_requested=True).exists():
            # The load generator cannot be interrupted mid-point; the point finishes (bounded by its
            # request count) and is stored as cancelled, and no further point starts.
            thread.join()
            break
        now_counters = _server_counters(urls) if base is not None else None
        if now_counters is not None and last[1] is not None:
            t = time.monotonic()
            tok_s = (now_counters[1] - last[1][1]) / max(t - last[0], 1e-6)
            reqs = max(0, min(point["num_requests"], int(now_counters[0] - base[0]) - len(warmup)))
            BenchmarkSweep.objects.filter(pk=sweep.pk).update(current_tok_s=tok_s, requests_done=done_before + reqs)
            last = (t, now_counters)
    if "error" in outcome:
        raise outcome["error"]
    result = outcome["result"]
    slo = Slo(**grid["slo"]) if grid.get("slo") else None
    summary = run_summary(result, slo=slo)
    path = records_dir() / f"run-{run.pk}.npz"
    result.records.save(path)
    _store_summary(run, summary)
    run.records_path = str(path)
    cancelled = BenchmarkSweep.objects.filter(pk=sweep.pk, cancel_requested=True).exists()
    run.status = RunStatus.CANCELLED if cancelled else RunStatus.DONE
    run.reason = "sweep cancelled while this point ran" if cancelled else ""
    run.ended_at = timezone.now()
    run.save()
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(requests_done=done_before + point["num_requests"],
                                                      current_tok_s=summary.get("output_throughput_tok_s"))
    if cancelled:
        raise _Cancelled()
    return run


def records_dir() -> Path:
    """``VAR_DIR/benchmarks/`` (created): where per-request record files live."""
    path = Path(settings.VAR_DIR) / "benchmarks"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _store_summary(run: BenchmarkRun, summary: dict[str, Any]) -> None:
    """Copy the summary and its sortable scalars onto ``run`` (not saved)."""
    summary = json_safe(summary)
    run.summary = summary
    flags = summary.get("flags") or {}
    run.flags = sorted(k for k, v in flags.items() if v) if isinstance(flags, dict) else list(flags)
    p = summary_point(summary=summary, concurrency=run.concurrency, request_rate=run.request_rate,
                      input_len=run.input_len, output_len=run.output_len, num_gpus=run.num_gpus, flags=run.flags)
    run.output_tok_s = p["output_throughput_tok_s"]
    run.request_rate_achieved = p["request_throughput"]
    run.ttft_p99_ms = (p["ttft_ms"] or {}).get("p99")
    run.tpot_mean_ms = (p["tpot_ms"] or {}).get("mean")


# ---------------------------------------------------------------------------------------- read


def run_records(*, run: BenchmarkRun) -> RecordStore:
    """The per-request records of a measured run, loaded from its ``.npz`` file.

    Raises :class:`InvalidInput` for an imported run (its per-request data, if any, is only in the
    kept original file) or a run whose file is missing."""
    if not run.records_path:
        raise InvalidInput({"records": [f"run #{run.pk} has no per-request records"
                                        + (" (imported: see its original file)" if run.source == RunSource.IMPORTED else "")]})
    path = Path(run.records_path)
    if not path.exists():
        raise InvalidInput({"records": [f"the record file of run #{run.pk} is missing ({path.name})"]})
    return RecordStore.load(path)


def run_records_rows(*, run: BenchmarkRun, offset: int = 0, limit: int = 1000) -> dict[str, Any]:
    """Per-request rows of ``run`` as JSON-ready dicts, ``limit`` at most from ``offset``.

    Each row: ``index`` (dataset position), ``ok``, ``http_status``, ``input_tokens``,
    ``output_tokens``, ``requested_input``/``requested_output``, ``ttft_ms``, ``e2e_ms``,
    ``tpot_ms`` (None when undefined), ``events``, ``finish_reason``, ``error``, ``start_ms``
    (relative to the first request). Returns ``{"count", "offset", "limit", "rows"}``.
    """
    rec = run_records(run=run)
    n = len(rec)
    cols = {c: rec.column(c) for c in ("index", "start", "first", "last", "output_tokens", "input_tokens",
                                       "requested_input", "requested_output", "http_status", "ok", "ev_len")}
    t0 = int(cols["start"].min()) if n else 0
    rows = []
    for i in range(offset, min(n, offset + limit)):
        ok = bool(cols["ok"][i])
        start = int(cols["start"][i])
        ttft = (int(cols["first"][i]) - start) / 1e6 if ok else None
        e2e = (int(cols["last"][i]) - start) / 1e6 if ok else None
        out = int(cols["output_tokens"][i])
        rows.append({
            "index": int(cols["index"][i]), "ok": ok, "http_status": int(cols["http_status"][i]),
            "input_tokens": int(cols["input_tokens"][i]), "output_tokens": out,
            "requested_input": int(cols["requested_input"][i]), "requested_output": int(cols["requested_output"][i]),
            "start_ms": (start - t0) / 1e6, "ttft_ms": ttft, "e2e_ms": e2e,
            "tpot_ms": (e2e - ttft) / (out - 1) if ok and out >= 2 else None, "events": int(cols["ev_len"][i]),
            "finish_reason": rec.finish_reason(i), "error": rec.errors.get(i),
        })
    return {"count": n, "offset": offset, "limit": limit, "rows": rows}


def _path(d: Mapping[str, Any], key: str) -> Any:
    cur: Any = d
    for part in key.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def run_metrics(*, run: BenchmarkRun) -> dict[str, Any]:
    """The run's headline numbers in one vocabulary (latencies ms, throughputs per second) for
    tables, comparison and export, whether measured or imported: the keys of
    :data:`COMPARE_FIELDS` plus ``successes``, ``requests``, ``input_tokens_mean``,
    ``output_tokens_mean``, ``duration_s``, ``slo_attainment``, ``errors`` (reason → count)."""
    s = run.summary or {}
    p = summary_point(summary=s, concurrency=run.concurrency, request_rate=run.request_rate, input_len=run.input_len,
                      output_len=run.output_len, num_gpus=run.num_gpus, flags=run.flags)
    tok = p["output_throughput_tok_s"]
    return {
        "output_throughput_tok_s": tok,
        "tok_s_per_gpu": tok / run.num_gpus if tok is not None and run.num_gpus else None,
        "request_throughput_req_s": p["request_throughput"],
        "goodput_req_s": s.get("goodput_req_s"),
        "slo_attainment": s.get("slo_attainment"),
        "ttft_ms": p["ttft_ms"], "tpot_ms": p["tpot_ms"], "itl_ms": p["itl_ms"], "e2e_ms": p["e2e_ms"],
        "requests": s.get("requests"), "successes": p["completed"], "failures": p["failed"],
        "input_tokens_mean": s.get("input_tokens_actual_mean", s.get("mean_input_tokens")),
        "output_tokens_mean": s.get("output_tokens_mean", s.get("mean_output_tokens")),
        "duration_s": s.get("duration_s"), "errors": s.get("errors") or {},
    }


def _config_fields(run: BenchmarkRun) -> dict[str, Any]:
    snap = run.snapshot or {}
    spec = snap.get("spec") or {}
    return {
        "source": run.source, "import_format": run.import_format or None,
        "served_model_name": run.served_model_name or None, "engine": snap.get("engine"),
        "topology": snap.get("topology"), "recipe": snap.get("recipe"), "recipe_version": snap.get("recipe_version"),
        "node": (snap.get("node") or {}).get("name"), "num_gpus": run.num_gpus, "concurrency": run.concurrency,
        "request_rate": run.request_rate, "input_len": run.input_len, "output_len": run.output_len,
        "num_requests": run.num_requests, "api": run.api or None,
        "sim_profile": (spec.get("sim") or {}).get("profile"),
        "engine_version": ((snap.get("server_info") or {}).get("entry") or {}).get("version"),
        "ceiling_version": snap.get("ceiling_version"),
        "roles": json.dumps(spec.get("roles"), sort_keys=True) if spec.get("roles") else None,
        "env": json.dumps(spec.get("env"), sort_keys=True) if spec.get("env") else None,
    }


def runs_compare(*, runs: list[BenchmarkRun]) -> dict[str, Any]:
    """Side-by-side comparison of ``runs`` (any sweeps, measured or imported).

    Returns ``{"runs": [{"id", "label", "sweep_id", "status", "flags", "metrics", "config",
    "rankable", "refusal"}], "fields": [{"key", "label", "unit", "values": [...]}],
    "config_differs": [{"field", "values": [...]}], "best": {"output_throughput_tok_s": run id | None, ...},
    "notes": [...]}``. A run flagged ``output_length_mismatch`` (or with variable or unknown
    lengths) is shown but not ranked against fixed-length runs; ``refusal`` and ``notes`` say so
    (case C10). Raises :class:`InvalidInput` for fewer than 2 runs.
    """
    if len(runs) < 2:
        raise InvalidInput({"ids": ["give at least two runs to compare"]})
    entries = []
    notes: list[str] = []
    for run in runs:
        length_flags = [f for f in run.flags if f in LENGTH_FLAGS]
        if run.input_len is None or run.output_len is None:
            length_flags = length_flags or ["lengths_unknown"]
        refusal = None
        if length_flags:
            refusal = (f"run #{run.pk} is not ranked: {', '.join(length_flags)} — its requests did not all have the "
                       f"requested fixed lengths, so its tok/s and latencies are not comparable with fixed-length runs")
            notes.append(refusal)
        entries.append({"id": run.pk, "label": run.label, "sweep_id": run.sweep_id, "status": run.status,
                        "flags": list(run.flags), "metrics": run_metrics(run=run), "config": _config_fields(run),
                        "rankable": refusal is None, "refusal": refusal})
    fields = [{"key": key, "label": label, "unit": unit, "values": [_path(e["metrics"], key) for e in entries]}
              for key, label, unit in COMPARE_FIELDS]
    config_keys = list(entries[0]["config"].keys())
    differs = [{"field": k, "values": [e["config"][k] for e in entries]} for k in config_keys
               if len({json.dumps(e["config"][k], sort_keys=True) for e in entries}) > 1]
    rankable = [e for e in entries if e["rankable"]]
    lengths = {(e["config"]["input_len"], e["config"]["output_len"]) for e in rankable}
    best: dict[str, int | None] = {}
    if len(lengths) > 1:
        notes.append("the rankable runs have different input/output lengths "
                     f"({', '.join(f'{a}/{b}' for a, b in sorted(lengths))}); no best run is named")
    for key, higher_better in (("output_throughput_tok_s", True), ("tok_s_per_gpu", True),
                               ("ttft_ms.p99", False), ("tpot_ms.mean", False)):
        vals = [(_path(e["metrics"], key), e["id"]) for e in rankable if _path(e["metrics"], key) is not None]
        if len(lengths) > 1 or len(vals) < 2:
            best[key] = None
            continue
        best[key] = (max(vals) if higher_better else min(vals))[1]
    return {"runs": entries, "fields": fields, "config_differs": differs, "best": best, "notes": notes}


# ---------------------------------------------------------------------------------------- analysis


def _points_of(runs: Iterable[BenchmarkRun], num_gpus: int | None) -> list[SweepPoint]:
    out = []
    for run in runs:
        if run.status != RunStatus.DONE or not run.summary:
            continue
        d = summary_point(summary=run.summary, concurrency=run.concurrency, request_rate=run.request_rate,
                          input_len=run.input_len, output_len=run.output_len, num_gpus=num_gpus, flags=run.flags)
        if d["output_throughput_tok_s"] is None:
            continue
        out.append(SweepPoint.from_summary(d))
    return out


def sweep_analyse(*, sweep: BenchmarkSweep) -> dict[str, Any]:
    """Compute the ceiling report of ``sweep`` (not stored; :func:`sweep_execute` stores it).

    One report per input/output length pair: ``{"lengths": {"256/256": report-dict, ...},
    "findings": [sentence, ...], "compared_with": sweep id | None, "errors": {...}}``. The
    comparison sweep is the latest done sweep of the same served model on the other topology
    (PD vs single) with a report for the same lengths. GPU count: ``sweep.num_gpus``, else 1 with
    a note (per-GPU numbers are then per server).
    """
    num_gpus = sweep.num_gpus or 1
    topology = sweep.topology if sweep.topology in ("pd", "single") else "single"
    runs = list(sweep.runs.all())
    by_len: dict[tuple[int | None, int | None], list[BenchmarkRun]] = {}
    for run in runs:
        by_len.setdefault((run.input_len, run.output_len), []).append(run)
    other = None
    if sweep.served_model_name and topology in ("pd", "single"):
        other = (BenchmarkSweep.objects.filter(served_model_name=sweep.served_model_name, status=SweepStatus.DONE)
                 .exclude(pk=sweep.pk).exclude(topology=topology).exclude(topology="")
                 .order_by("-ended_at", "-id").first())
    out: dict[str, Any] = {"lengths": {}, "findings": [], "compared_with": None, "errors": {}, "notes": []}
    if not sweep.num_gpus:
        out["notes"].append("the GPU count is unknown; per-GPU numbers are per deployment (1)")
    for (in_len, out_len), group in sorted(by_len.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or 0)):
        key = f"{in_len}/{out_len}"
        points = _points_of(group, sweep.num_gpus)
        if not points:
            out["errors"][key] = "no finished point with output"
            continue
        kwargs: dict[str, Any] = {}
        if other is not None:
            other_points = _points_of(other.runs.filter(input_len=in_len, output_len=out_len), other.num_gpus)
            if other_points:
                kwargs = {"compare_with": other_points, "compare_num_gpus": other.num_gpus or 1,
                          "compare_topology": other.topology}
                out["compared_with"] = other.pk
        try:
            report = ceiling_analyse(points, num_gpus=num_gpus, topology=topology, **kwargs).as_dict()
        except InvalidInput as exc:
            out["errors"][key] = str(exc)
            continue
        out["lengths"][key] = report
        prefix = f"[{key}] " if len(by_len) > 1 else ""
        out["findings"].extend(prefix + f for f in report["findings"])
    return out


def sweep_analysis(*, sweep: BenchmarkSweep) -> dict[str, Any]:
    """The ceiling report of ``sweep``: the stored one when the sweep finished, else computed now
    from the runs stored so far (``"provisional": true``). Shape: :func:`sweep_analyse`."""
    if sweep.analysis:
        return {**sweep.analysis, "provisional": False}
    if not sweep.runs.filter(status=RunStatus.DONE).exists():
        return {"lengths": {}, "findings": [], "compared_with": None, "errors": {}, "notes": ["no finished run yet"],
                "provisional": True}
    return {**sweep_analyse(sweep=sweep), "provisional": True}


# ---------------------------------------------------------------------------------------- export

EXPORT_COLUMNS = (
    "run_id", "sweep_id", "source", "status", "served_model_name", "concurrency", "request_rate", "input_len",
    "output_len", "num_requests", "num_gpus", "requests", "successes", "failures", "duration_s",
    "output_throughput_tok_s", "tok_s_per_gpu", "request_throughput_req_s", "goodput_req_s",
    "ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "tpot_ms_mean", "tpot_ms_p50", "tpot_ms_p90",
    "tpot_ms_p99", "itl_ms_mean", "itl_ms_p50", "itl_ms_p90", "itl_ms_p99", "e2e_ms_mean", "e2e_ms_p50",
    "e2e_ms_p90", "e2e_ms_p99", "input_tokens_mean", "output_tokens_mean", "flags",
)


def _export_row(run: BenchmarkRun) -> dict[str, Any]:
    m = run_metrics(run=run)
    row: dict[str, Any] = {
        "run_id": run.pk, "sweep_id": run.sweep_id, "source": run.source, "status": run.status,
        "served_model_name": run.served_model_name, "concurrency": run.concurrency,
        "request_rate": run.request_rate, "input_len": run.input_len, "output_len": run.output_len,
        "num_requests": run.num_requests, "num_gpus": run.num_gpus, "flags": ";".join(run.flags),
    }
    for key in ("requests", "successes", "failures", "duration_s", "output_throughput_tok_s", "tok_s_per_gpu",
                "request_throughput_req_s", "goodput_req_s", "input_tokens_mean", "output_tokens_mean"):
        row[key] = m[key]
    for metric in ("ttft", "tpot", "itl", "e2e"):
        for stat in ("mean", "p50", "p90", "p99"):
            row[f"{metric}_ms_{stat}"] = (m[f"{metric}_ms"] or {}).get(stat)
    return row


def _csv(runs: Iterable[BenchmarkRun]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(EXPORT_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for run in runs:
        writer.writerow({k: ("" if v is None else v) for k, v in _export_row(run).items()})
    return buf.getvalue()


def run_export_dict(*, run: BenchmarkRun) -> dict[str, Any]:
    """One run as a JSON-ready dict: point parameters, the full summary, flags, metrics
    (:func:`run_metrics`), snapshot, source and timestamps (not the original imported file)."""
    return {
        "id": run.pk, "sweep_id": run.sweep_id, "ordinal": run.ordinal, "status": run.status, "reason": run.reason,
        "source": run.source, "import_format": run.import_format or None,
        "original_filename": run.original_filename or None, "concurrency": run.concurrency,
        "request_rate": run.request_rate, "input_len": run.input_len, "output_len": run.output_len,
        "num_requests": run.num_requests, "api": run.api or None, "served_model_name": run.served_model_name,
        "num_gpus": run.num_gpus, "flags": list(run.flags), "metrics": run_metrics(run=run), "summary": run.summary,
        "snapshot": run.snapshot, "started_at": _iso(run.started_at), "ended_at": _iso(run.ended_at),
    }


def _iso(dt) -> str | None:
    return dt.isoformat() if dt else None


def run_export_csv(*, run: BenchmarkRun) -> str:
    """The run as CSV: a header of :data:`EXPORT_COLUMNS` (latencies ms, throughputs per second)
    and one row; empty cells for absent values."""
    return _csv([run])


def run_export_json(*, run: BenchmarkRun) -> str:
    """The run as indented JSON (:func:`run_export_dict`)."""
    return json.dumps(run_export_dict(run=run), indent=2, default=str)


def sweep_export_csv(*, sweep: BenchmarkSweep) -> str:
    """The sweep's runs as CSV, one row per run in grid order (columns: :data:`EXPORT_COLUMNS`)."""
    return _csv(sweep.runs.all())


def sweep_export_json(*, sweep: BenchmarkSweep) -> str:
    """The sweep as indented JSON: ``{"sweep": {...grid, status, progress, snapshot, num_gpus},
    "analysis": {...}, "runs": [run_export_dict, ...]}``."""
    body = {
        "sweep": {"id": sweep.pk, "name": sweep.name, "deployment_id": sweep.deployment_id, "status": sweep.status,
                  "reason": sweep.reason, "grid": sweep.grid, "num_gpus": sweep.num_gpus,
                  "served_model_name": sweep.served_model_name, "topology": sweep.topology, "engine": sweep.engine,
                  "points_total": sweep.points_total, "points_done": sweep.points_done,
                  "snapshot": sweep.snapshot, "started_at": _iso(sweep.started_at), "ended_at": _iso(sweep.ended_at)},
        "analysis": sweep.analysis or None,
        "runs": [run_export_dict(run=r) for r in sweep.runs.all()],
    }
    return json.dumps(body, indent=2, default=str)


# ---------------------------------------------------------------------------------------- import

MAX_IMPORT_BYTES = 16 * 1024 * 1024


def run_import(*, text: str, filename: str, user) -> list[BenchmarkRun]:
    """Import a SGLang ``bench_serving`` JSONL or vLLM ``bench serve`` JSON file as runs.

    One :class:`BenchmarkRun` per run in the file (``source`` imported, status done), each keeping
    the whole original file (``original_text``) and ``filename``; the summary holds the importer's
    fields (:class:`benchmarks.importers.ImportedRun`) plus the measured-run keys (``successes``,
    ``failures``, ``output_throughput_tok_s``, ``goodput_req_s``, ``input_tokens_actual_mean`` ...);
    values absent from the file stay null. Lengths are set only when every request had the same
    length. Raises :class:`InvalidInput` naming the line and key for a malformed file (nothing is
    stored then).
    """
    if len(text.encode()) > MAX_IMPORT_BYTES:
        raise InvalidInput({"file": [f"larger than {MAX_IMPORT_BYTES} bytes"]})
    imported = import_results(text)
    created = []
    with transaction.atomic():
        for item in imported:
            point = item.as_sweep_point()
            d = item.as_dict()
            summary = {
                **d,
                "requests": (item.completed or 0) + (item.failed or 0) if item.completed is not None else None,
                "successes": item.completed, "failures": item.failed, "duration_s": item.duration_s,
                "request_throughput_req_s": item.request_throughput_req_s,
                "goodput_req_s": item.request_goodput_req_s,
                "input_tokens_actual_mean": item.mean_input_tokens, "output_tokens_mean": item.mean_output_tokens,
                "flags": {f: True for f in point.flags},
            }
            run = BenchmarkRun(
                status=RunStatus.DONE, source=RunSource.IMPORTED, import_format=item.source_format,
                original_filename=(filename or "")[:255], original_text=text, source_line=item.source_line,
                concurrency=item.concurrency, request_rate=item.request_rate_req_s,
                input_len=point.input_len, output_len=point.output_len, num_requests=item.num_prompts,
                api=item.backend or "", served_model_name=item.model_id or "",
                created_by=user if getattr(user, "pk", None) else None, ended_at=timezone.now(),
            )
            _store_summary(run, summary)
            run.save()
            created.append(run)
    return created



# ---------------------------------------------------------------------------------------- CLI helpers


# A line every 15 s while nothing but tok/s changes: alive, without flooding a terminal.
PROGRESS_HEARTBEAT_S = 15.0


def sweep_wait(*, sweep: BenchmarkSweep, timeout_s: float, progress=None, poll_s: float = 1.0) -> BenchmarkSweep:
    """Poll ``sweep``'s row until it is terminal or ``timeout_s`` passes; ``progress(text)`` gets a
    line whenever the status, point or requests-done count changes, and otherwise at most every
    ``PROGRESS_HEARTBEAT_S`` seconds with the current tok/s. Returns the refreshed row."""
    start = time.monotonic()
    last_key = None
    last_said = 0.0
    while True:
        sweep.refresh_from_db()
        key = (sweep.status, sweep.points_done, sweep.current_point, sweep.requests_done)
        line = (f"  sweep #{sweep.pk}: {sweep.status}"
                + (f", point {sweep.points_done + (sweep.status == SweepStatus.RUNNING)}/{sweep.points_total}"
                   f" ({sweep.current_point})" if sweep.current_point else "")
                + (f", requests {sweep.requests_done}/{sweep.requests_total}" if sweep.status == SweepStatus.RUNNING else "")
                + (f", {sweep.current_tok_s:.1f} tok/s" if sweep.current_tok_s is not None
                   and sweep.status == SweepStatus.RUNNING else ""))
        now = time.monotonic()
        if progress and (key != last_key or now - last_said >= PROGRESS_HEARTBEAT_S):
            progress(line)
            last_said = now
        last_key = key
        if sweep.status in SWEEP_TERMINAL or now - start > timeout_s:
            return sweep
        time.sleep(poll_s)


def sweep_report_text(*, sweep: BenchmarkSweep) -> str:
    """The sweep as plain text: a heading, the results table (:func:`benchmarks.sweeps.results_table`)
    and the ceiling findings (or the failure reason)."""
    from benchmarks.sweeps import results_table

    sweep.refresh_from_db()
    gpus = f"{sweep.num_gpus} GPUs" + (" modelled" if sweep.engine == "sim" else "") if sweep.num_gpus else "GPUs: none"
    lines = [f"Sweep #{sweep.pk} {sweep.name} — {sweep.status}" + (f" ({sweep.reason})" if sweep.reason else ""),
             f"  model {sweep.served_model_name}, {sweep.engine} {sweep.topology}, {gpus}; "
             f"client host {(sweep.snapshot or {}).get('client_host', '-')}"]
    runs = list(sweep.runs.order_by("ordinal"))
    if runs:
        lines += ["  " + row for row in results_table(runs, num_gpus=sweep.num_gpus).splitlines()]
    analysis = sweep.analysis or {}
    if analysis.get("findings"):
        lines.append("  Ceiling findings:")
        lines += [f"   - {f}" for f in analysis["findings"]]
    for key, err in (analysis.get("errors") or {}).items():
        lines.append(f"  analysis {key}: {err}")
    for note in analysis.get("notes") or []:
        lines.append(f"  note: {note}")
    return "\n".join(lines)
