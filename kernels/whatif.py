"""What-if: a faster kernel in a measured sweep. Projected tok/s and TPOT per concurrency.

A kernel that takes ``share`` of the decode step time (0.63 for the seed's sparse-attention
fallback) and becomes ``speedup`` times faster scales the decode step cost by

    factor = (1 - share) + share / speedup            (Amdahl's law on one step)

The decode step model comes from the sweep's deployment:

* ``sim`` engine: the sim profile of the deployment (``spec.sim.profile``; formulas in
  :mod:`deployments.engines.simcore.profile`). For a closed-loop point of concurrency ``c`` with
  ``n_in``/``n_out`` tokens: mean KV per decoding sequence ``kv = n_in + n_out / 2``; running batch
  ``b = min(c, max_running_requests, floor(kv_capacity_tokens / kv))`` (at least 1); step
  ``s = factor * (fixed_s + per_seq_s * b + per_kv_token_s * b * kv)``; TPOT ``= s * c / b``
  (sequences waiting for KV take turns); TTFT ``= prefill.fixed_s + prefill.per_token_s * n_in``,
  plus for PD the KV hand-over ``kv_transfer.fixed_s + n_in * bytes_per_token /
  bandwidth_bytes_per_s`` and the first decode step; output tok/s ``= c * n_out / (TTFT +
  (n_out - 1) * TPOT)`` (Little's law over a closed loop), bounded by the prefill: every request
  passes through prefill batches of at most ``prefill.max_batch_tokens`` tokens, ``k = min(c,
  max(1, floor(max_batch_tokens / n_in)))`` prompts per batch taking ``prefill.fixed_s +
  prefill.per_token_s * k * n_in`` (a prompt longer than the budget: one prompt per
  ``ceil(n_in / max_batch_tokens)`` batches), so output tok/s is at most ``n_out * k / batch time``
  (:func:`prefill_bound_tok_s`; the asymptotic bound of operational analysis: a closed system's
  throughput is at most its busiest station's service rate, Lazowska et al., "Quantitative System
  Performance", 1984, ch. 5). The kernel does not speed the prefill up, so a point whose Little's-law
  rate exceeds that bound is ``prefill_bound`` and its model tok/s is the bound. The projection of
  such a point is calibrated like any other (measured × bound / model as is, below), so it lies
  below the bound by the ratio its measurement lies below the model as is, and a higher concurrency
  that measured further below the model projects lower; a projection that would pass the bound (a
  measurement above the model) is held at it. Prefill queueing below the bound is not modelled (the sim profile's own
  derivation explains where it matters).
* any other engine: the ceiling analysis' fit of the sweep (:func:`benchmarks.services.sweep_analysis`),
  ``TPOT(b) = fixed_ms + per_seq_ms * b`` with the running batch ``b`` the analysis gives each point
  (:func:`benchmarks.analysis.point_running_batch`: the point's decode events, else Little's law
  for that point), scaled by ``factor``; TTFT is the measured mean (the kernel is a decode kernel).

Every row carries the analysis' running batch of its point (``measured_running_batch``, with
``running_batch_source``), whatever the model. The ceiling-fit model uses exactly that figure
(``running_batch`` is the same number). The sim-profile model cannot: its ``running_batch`` is the
profile's, the sequences decoding at once when all ``c`` requests are in decode, capped by the
engine's cap and the KV cache, and its TPOT ``step * c / b`` counts sequences taking turns for KV
by that ``b``. The analysis' figure is a time average over the run that is lower because requests
also spend time in prefill and queueing, which the model counts in its TTFT instead; putting it
into ``step * c / b`` would count that time twice. A note says so, quoting both figures.

The projection shown next to the measured numbers is calibrated on them: projected TPOT =
measured TPOT × (model TPOT with the faster kernel / model TPOT as is), and likewise for tok/s, so
whatever the model leaves out stays as measured. The model's own numbers are returned as well.
Open-loop points (request rate instead of concurrency) are left out with a note.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.analysis.model import MAX_FAILED_FRACTION
from benchmarks.choices import SWEEP_TERMINAL
from benchmarks.sweeps import failure_counts
from controlplane.errors import InvalidInput
from controlplane.jsonsafe import json_number
from kernels.templatetags.kernel_numbers import speedup_text

# The seed's measured share of decode step time spent in the sparse-attention kernel.
DEFAULT_SHARE = 0.63
# The speedup range, symmetric around 1 (as it is): at most 1000 times faster, at most 1000 times
# slower. Without a lower bound ``share / speedup`` grows without limit: 1e-300 projects a TPOT of
# 1e301 ms, which no step model means, and below about 1e-308 it overflows to infinity (a
# projection that cannot be written as JSON).
MIN_SPEEDUP = 0.001
MAX_SPEEDUP = 1000.0

#: The query keys a what-if takes (the API's and the page's): any other key is a 400 naming it and
#: these, not ignored (a misspelt ``shares=0.5`` would otherwise project with the default share).
WHATIF_KEYS = ("sweep", "share", "speedup", "best")

# The one message for a share or speedup outside its range wherever it is checked (this module,
# the API's query serializer, the what-if page), followed by the refused value (range_refusal).
SHARE_RANGE = ("must be a fraction in (0, 1]: the part of the decode step time the kernel takes "
               "(0.63 = 63%; at 0 there is nothing to speed up)")
SPEEDUP_RANGE = (f"must be a number in [{MIN_SPEEDUP:g}, {MAX_SPEEDUP:g}]: how many times faster the kernel "
                 f"becomes (2 = twice as fast, half its time; 1 = as it is; below 1 = slower, down to "
                 f"{MIN_SPEEDUP:g} = {1 / MIN_SPEEDUP:g} times slower)")
# name: (lowest allowed, whether the lowest is allowed itself, highest allowed, message)
_RANGES = {"share": (0.0, False, 1.0, SHARE_RANGE), "speedup": (MIN_SPEEDUP, True, MAX_SPEEDUP, SPEEDUP_RANGE)}


#: A decimal number as a query or form writes it: ASCII digits, optional sign, point and exponent,
#: or nan / inf (read, then refused by the range check with its one message); ``float()`` alone
#: also takes ``1_000`` and other scripts' digits.
NUMBER_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:[+-]?(?:nan|inf|infinity))")


def number_text(value: float) -> str:
    """``value`` as a refusal quotes it, the way JSON writes a number: ``0``, ``20000``, ``2.5``,
    ``1e-300``, ``1e-7`` (a whole number without ``.0``; :func:`controlplane.jsonsafe.json_number`);
    one that is not finite as every other refusal quotes it (:func:`controlplane.jsonsafe.json_spelled`):
    ``Infinity``, ``-Infinity``, ``NaN``, never Python's ``inf`` / ``nan``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return repr(value)
    return str(value) if isinstance(value, int) else json_number(value)


def range_refusal(name: str, shown: str) -> str:
    """The out-of-range message of the what-if's ``share`` or ``speedup``
    (:data:`SHARE_RANGE`, :data:`SPEEDUP_RANGE`) naming the refused value: ``…, got 0``."""
    return f"{_RANGES[name][3]}, got {shown}"


def whatif_input_errors(*, shown: dict[str, str] | None = None, **values: float) -> dict[str, list[str]]:
    """Check the ``share`` and/or ``speedup`` given (keyword arguments; only those are checked)
    against 0 < share <= 1 and :data:`MIN_SPEEDUP` <= speedup <= :data:`MAX_SPEEDUP` (×):
    ``{"share": [SHARE_RANGE + ", got 0"], …}`` for those outside (a value that is not a finite
    number included), ``{}`` when all are in range. The refused value is quoted as ``shown``
    gives it (the text of the query, ``1e9``), else as :func:`number_text` writes it."""
    errors: dict[str, list[str]] = {}
    for name, value in values.items():
        low, low_included, top, _message = _RANGES[name]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        in_range = number and math.isfinite(value) and (low <= value if low_included else low < value) \
            and value <= top
        if not in_range:
            text = (shown or {}).get(name) or number_text(value)
            errors[name] = [range_refusal(name, text[:40])]
    return errors


def decode_factor(*, share: float, speedup: float) -> float:
    """``(1 - share) + share / speedup``: the decode step cost relative to now when a kernel taking
    ``share`` (0 < share <= 1) of it becomes ``speedup`` (:data:`MIN_SPEEDUP` <= speedup <=
    :data:`MAX_SPEEDUP`) times faster. Raises :class:`InvalidInput` (``share``, ``speedup``:
    :data:`SHARE_RANGE`, :data:`SPEEDUP_RANGE`) outside those ranges."""
    errors = whatif_input_errors(share=share, speedup=speedup)
    if errors:
        raise InvalidInput(errors)
    return (1.0 - share) + share / speedup


@dataclass
class ModelPoint:
    """The model's numbers for one point: TTFT and TPOT (ms), output tok/s, running batch; for the
    sim-profile model also the prefill's bound on output tok/s and whether it binds
    (``tok_s`` is then the bound)."""

    ttft_ms: float
    tpot_ms: float
    tok_s: float
    running_batch: float
    prefill_bound_tok_s: float | None = None
    prefill_bound: bool = False


def prefill_bound_tok_s(prefill, *, concurrency: int, input_len: int, output_len: int) -> float:
    """The most output tok/s a closed loop of ``concurrency`` requests of ``input_len`` /
    ``output_len`` tokens can give through the profile's prefill (a
    :class:`deployments.engines.simcore.profile.PrefillModel`), which no decode kernel speeds up:
    ``output_len * k / batch_time``, with ``k`` prompts per prefill batch (formula in the module
    docstring). 1064.6 tok/s for the seed profile at 256/256 and c >= 4 (4 prompts per 0.962 s)."""
    budget = prefill.max_batch_tokens
    if input_len > budget:
        k = 1
        batch_time = math.ceil(input_len / budget) * prefill.fixed_s + prefill.per_token_s * input_len
    else:
        k = max(1, min(concurrency, budget // input_len))
        batch_time = prefill.batch_time_s(k * input_len)
    return output_len * k / batch_time


def sim_point(profile, *, concurrency: int, input_len: int, output_len: int, topology: str,
              factor: float = 1.0) -> ModelPoint:
    """The sim-profile model of one closed-loop point (formulas in the module docstring).
    ``profile`` is a :class:`deployments.engines.simcore.profile.SimProfile`."""
    d, p, kv_t = profile.decode, profile.prefill, profile.kv_transfer
    kv = input_len + output_len / 2.0
    b = max(1, min(concurrency, d.max_running_requests, int(d.kv_capacity_tokens // kv)))
    step = factor * (d.fixed_s + d.per_seq_s * b + d.per_kv_token_s * b * kv)
    tpot = step * concurrency / b
    ttft = p.fixed_s + p.per_token_s * input_len
    if topology == "pd":
        ttft += kv_t.fixed_s + input_len * kv_t.bytes_per_token / kv_t.bandwidth_bytes_per_s + step
    e2e = ttft + (output_len - 1) * tpot
    bound = prefill_bound_tok_s(p, concurrency=concurrency, input_len=input_len, output_len=output_len)
    little = concurrency * output_len / e2e
    return ModelPoint(ttft_ms=ttft * 1e3, tpot_ms=tpot * 1e3, tok_s=min(little, bound),
                      running_batch=float(b), prefill_bound_tok_s=bound, prefill_bound=little > bound)


def fit_point(*, fixed_ms: float, per_seq_ms: float, running_batch: float, concurrency: int, output_len: int,
              ttft_ms: float, factor: float = 1.0) -> ModelPoint:
    """The fitted-line model of one closed-loop point: TPOT = factor × (fixed + per_seq × b) (ms),
    TTFT as measured, tok/s = c × n_out / (TTFT + (n_out − 1) × TPOT)."""
    tpot = factor * (fixed_ms + per_seq_ms * running_batch)
    e2e_s = (ttft_ms + (output_len - 1) * tpot) / 1e3
    return ModelPoint(ttft_ms=ttft_ms, tpot_ms=tpot, tok_s=concurrency * output_len / e2e_s,
                      running_batch=running_batch)


@dataclass
class WhatIfRow:
    """One concurrency of the sweep: measured output tok/s, and TPOT and TTFT (means, ms; a point
    whose summary has no mean gives its p50, and a note of the projection names it); the model as
    is and with the faster kernel (output tok/s, TPOT in ms); the calibrated projection
    (``projected_*``: output tok/s, mean TPOT in ms) and its gain (projected / measured output tok/s).
    ``running_batch`` is the batch the model used (sequences); ``measured_running_batch`` the
    ceiling analysis' running batch of the point and ``running_batch_source`` where that came from
    (``decode_events``, ``littles_law``; None when the analysis has no figure for the point).
    ``prefill_bound_tok_s``: the sim profile's prefill bound on output tok/s (None for the
    ceiling-fit model); ``prefill_bound``: the model with the faster kernel is held at it (its
    ``model_fast_tok_s`` is the bound; the calibrated ``projected_tok_s`` is at most the bound)."""

    run_id: int
    concurrency: int
    input_len: int
    output_len: int
    measured_tok_s: float | None
    measured_tpot_ms: float | None
    measured_ttft_ms: float | None
    model_tok_s: float
    model_tpot_ms: float
    model_fast_tok_s: float
    model_fast_tpot_ms: float
    projected_tok_s: float | None
    projected_tpot_ms: float | None
    tok_s_gain: float | None
    running_batch: float
    measured_running_batch: float | None = None
    running_batch_source: str | None = None
    prefill_bound_tok_s: float | None = None
    prefill_bound: bool = False


def _central(dist: Any) -> float | None:
    if not isinstance(dist, dict):
        return None
    for key in ("mean", "p50"):
        v = dist.get(key)
        if isinstance(v, (int, float)) and math.isfinite(v):
            return float(v)
    return None


def _central_stat(dist: Any) -> str | None:
    """Which statistic :func:`_central` takes from ``dist``: ``mean``, ``p50`` (a summary that
    recorded only the median, as some imported files do) or None."""
    if not isinstance(dist, dict):
        return None
    for key in ("mean", "p50"):
        v = dist.get(key)
        if isinstance(v, (int, float)) and math.isfinite(v):
            return key
    return None


def _profile_name(sweep) -> str | None:
    spec = (sweep.snapshot or {}).get("spec") or (sweep.deployment.spec_snapshot if sweep.deployment else {}) or {}
    sim = spec.get("sim") if isinstance(spec, dict) else None
    if isinstance(sim, dict) and isinstance(sim.get("profile"), str):
        return sim["profile"]
    return None


def _sweep_hardware(sweep) -> str:
    """What the sweep's engine ran on, naming its ``sm_XX``: a sim profile's ``hardware`` text
    ("8x sm_120 GPUs, TP4 per role"), or the GPUs of the deployment's node ("NVIDIA H200 (sm_90)");
    "" when unknown."""
    name = _profile_name(sweep)
    if name:
        from deployments.engines.simcore.profile import ProfileError, profile_load

        try:
            return profile_load(name).hardware
        except (ProfileError, OSError):
            return ""
    node = getattr(getattr(sweep, "deployment", None), "node", None)
    if node is None:
        return ""
    gpus = sorted({(g.name, g.compute_capability) for g in node.gpus.exclude(compute_capability="")})
    return ", ".join(f"{n or 'GPU'} (sm_{cc.replace('.', '')})" for n, cc in gpus)


def _unreadable(summary: dict[str, Any]) -> bool:
    """The ceiling analysis's rule for leaving a point out: zero output tok/s, no successful
    request, or more than MAX_FAILED_FRACTION of the finished requests (successes + failures)
    failed. Requests a stop ended in flight are not failures of the server and count in neither
    (:func:`benchmarks.sweeps.failure_counts`). A summary without counts (imported, hand-made) is
    taken as measured."""
    tok_s = summary.get("output_throughput_tok_s")
    if tok_s is not None and tok_s <= 0:
        return True
    ok, failed = summary.get("successes"), failure_counts(summary)[0] or 0
    if ok is None:
        return False
    return not ok or failed / (ok + failed) > MAX_FAILED_FRACTION


def _analysis_batches(analysis: dict[str, Any]) -> dict[str, dict[str, tuple[float | None, str | None]]]:
    """The ceiling analysis' running batch of each point (sequences) and its source, by length pair
    and point label: ``{"256/256": {"c=4": (3.9, "decode_events")}}``. Taken from the report's
    ``points`` (:func:`benchmarks.analysis.point_running_batch` computed them), else, for a stored
    report that has only its fit, from the fit's ``labels`` and ``running_batch``."""
    out: dict[str, dict[str, tuple[float | None, str | None]]] = {}
    for key, report in (analysis.get("lengths") or {}).items():
        found: dict[str, tuple[float | None, str | None]] = {}
        for point in report.get("points") or []:
            if isinstance(point, dict) and point.get("running_batch") is not None:
                found[point.get("label")] = (point["running_batch"], point.get("running_batch_source"))
        fit = report.get("fit") or {}
        sources = fit.get("batch_sources") or []
        for i, (label, b) in enumerate(zip(fit.get("labels") or [], fit.get("running_batch") or [])):
            found.setdefault(label, (b, sources[i] if i < len(sources) else fit.get("batch_source")))
        out[key] = found
    return out


def _label(run) -> str:
    return f"c={run.concurrency} {run.input_len}/{run.output_len}"


def _unfinished_note(sweep) -> str | None:
    """For a sweep that ended failed or cancelled: its status and the points the projection leaves
    out, each with why ("c=4 64/16 (cancelled)", "c=8 64/16 (never ran)"); None for a done sweep."""
    if sweep.status not in ("failed", "cancelled"):
        return None
    from benchmarks.sweeps import grid_points

    runs = {r.ordinal: r for r in sweep.runs.all()}
    left = [f"{_point_label(r.concurrency, r.request_rate, r.input_len, r.output_len)} ({r.status})"
            for _, r in sorted(runs.items()) if r.status != "done"]
    try:
        planned = grid_points(sweep.grid)
    except (KeyError, TypeError, ValueError):
        planned = []
    never = [p for i, p in enumerate(planned) if i not in runs]
    left += [f"{_point_label(p['concurrency'], p['request_rate'], p['input_len'], p['output_len'])} (never ran)"
             for p in never]
    if not planned and sweep.points_total > len(runs):
        left.append(f"{sweep.points_total - len(runs)} point(s) that never ran")
    return (f"provisional: {sweep.ending_text}; this projection covers only its finished points"
            + (f", leaving out {', '.join(left)}" if left else ""))


def _unfinished_refusal(sweep) -> str:
    return (f"sweep #{sweep.pk} has not finished ({sweep.get_status_display()}, {sweep.points_done} of "
            f"{sweep.points_total} points done): project it once it is done")


def _no_runs_refusal(sweep, *, empty: bool) -> str:
    return (f"sweep #{sweep.pk} has no finished closed-loop run with fixed lengths"
            + (" and a successful request" if empty else ""))


def sweep_refusals(sweeps) -> dict[int, str]:
    """``{sweep id: why}`` for each of ``sweeps`` that :func:`whatif_compute` refuses for its
    status or its runs, with the message it raises (``sweep #7 has no finished closed-loop run
    with fixed lengths``; a sweep that has not finished, one whose points were all cancelled or
    failed, one with only open-loop points, one whose points all failed their requests: ``... and
    a successful request``), or for its model (:func:`model_refusal`: a sim sweep whose profile
    cannot be loaded, another engine's sweep whose ceiling analysis has no usable decode cost fit,
    such as a llama.cpp sweep whose throughput is flat from c=1). One query for all the runs, then
    the model of each sweep those leave: what the what-if page's sweep list marks as not projectable."""
    from benchmarks.models import BenchmarkRun

    out: dict[int, str] = {}
    judged = []
    for sweep in sweeps:
        if sweep.status not in SWEEP_TERMINAL:
            out[sweep.pk] = _unfinished_refusal(sweep)
        else:
            judged.append(sweep)
    closed: dict[int, list[bool]] = {}   # sweep id -> unreadable?, per finished closed-loop run
    runs = (BenchmarkRun.objects.filter(sweep__in=[s.pk for s in judged], status="done", concurrency__isnull=False)
            .only("sweep_id", "concurrency", "input_len", "output_len", "summary"))
    for run in runs:
        if run.concurrency and run.input_len and run.output_len:
            closed.setdefault(run.sweep_id, []).append(_unreadable(run.summary or {}))
    for sweep in judged:
        flags = closed.get(sweep.pk, [])
        if all(flags):   # none, or none with a successful request
            out[sweep.pk] = _no_runs_refusal(sweep, empty=bool(flags))
        elif (why := model_refusal(sweep)) is not None:
            out[sweep.pk] = why
    return out


def _engine(sweep) -> str:
    return sweep.engine or ((sweep.snapshot or {}).get("engine") or "")


def _sim_profile(sweep):
    """The sim profile a ``sim`` sweep's projection models its decode step with. Raises
    :class:`InvalidInput` (under ``sweep``) when its snapshot names none or it cannot be loaded."""
    from deployments.engines.simcore.profile import ProfileError, profile_load

    name = _profile_name(sweep)
    if not name:
        raise InvalidInput({"sweep": [f"sweep #{sweep.pk} is a sim sweep without a profile in its snapshot"]})
    try:
        return profile_load(name)
    except ProfileError as exc:
        raise InvalidInput({"sweep": [f"sim profile of sweep #{sweep.pk}: {exc}"]}) from None


def _decode_fits(sweep, analysis: dict[str, Any]) -> dict[str, dict]:
    """The usable decode cost fits of ``analysis`` (the ceiling report of a sweep of another engine
    than ``sim``), by length pair: ``{"256/256": {"fixed_ms", "per_seq_ms", "r_squared",
    "batches"}}``, a fit being usable when it was possible and gives a positive per-sequence and a
    non-negative fixed cost. Raises :class:`InvalidInput` (under ``sweep``) when no length pair has one."""
    fits: dict[str, dict] = {}
    for key, report in (analysis.get("lengths") or {}).items():
        fit = report.get("fit") or {}
        if fit.get("possible") and fit.get("fixed_ms") is not None and (fit.get("per_seq_ms") or 0) > 0 \
                and fit["fixed_ms"] >= 0:
            batches = dict(zip(fit.get("labels") or [], fit.get("running_batch") or []))
            fits[key] = {"fixed_ms": fit["fixed_ms"], "per_seq_ms": fit["per_seq_ms"],
                         "r_squared": fit.get("r_squared"), "batches": batches}
    if not fits:
        raise InvalidInput({"sweep": [f"the ceiling analysis of sweep #{sweep.pk} has no decode cost fit "
                                      "(it needs at least 3 points whose TPOT grows with the running batch)"]})
    return fits


def model_refusal(sweep) -> str | None:
    """Why the projection of ``sweep`` has no decode step model, with the message
    :func:`whatif_compute` raises (the same functions decide: :func:`_sim_profile` for a ``sim``
    sweep, :func:`_decode_fits` over its ceiling analysis for any other engine); None when it has one."""
    from benchmarks.services import sweep_analysis

    try:
        if _engine(sweep) == "sim":
            _sim_profile(sweep)
        else:
            _decode_fits(sweep, sweep_analysis(sweep=sweep))
    except InvalidInput as exc:
        return exc.errors["sweep"][0]
    return None


def _point_label(concurrency, request_rate, input_len, output_len) -> str:
    load = f"c={concurrency}" if concurrency is not None else f"{request_rate:g} req/s"
    return f"{load} {input_len}/{output_len}"


def baseline_described(package) -> str | None:
    """What ``package`` (a :class:`kernels.models.KernelPackage`) says its ``baseline``
    implementation is: its manifest's ``baseline`` (``one program per (request, head) on the CUDA
    cores: the seed deployment's fallback kernel``), else the parenthesis after "baseline" in its
    manifest description, whitespace collapsed; None when it says neither."""
    manifest = getattr(package, "manifest", None)
    said = manifest.get("baseline") if isinstance(manifest, dict) else None
    if isinstance(said, str) and said.strip():
        return " ".join(said.split())
    text = " ".join((getattr(package, "description", "") or "").split())
    m = re.search(r"\bbaseline \(", text)
    if not m:
        return None
    depth, start = 1, m.end()
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i].strip() or None
    return None


def speedup_basis(best) -> str:
    """One sentence on what the stored speedup of ``best`` (a :class:`kernels.models.KernelBest`)
    is measured against and where: its package's own ``baseline`` implementation (the variants
    with ``impl = "baseline"`` of the same job, shape and batch; :func:`kernels.services.kernel_best_select`),
    described as the package's manifest describes it, on ``best.device_name``. Not the kernel a
    running deployment uses, which may already be faster than that baseline."""
    what = baseline_described(best.package)
    gpu = best.device_name or "an unrecorded GPU"
    cc = f" (sm_{best.cc.replace('.', '')})" if best.cc else ""
    return (f"the speedup {speedup_text(best.speedup)} is over package {best.package.name}'s own baseline implementation"
            + (f" ({what}, as its manifest describes it)" if what else " (its variants with impl = 'baseline')")
            + f", both measured on {gpu}{cc}; it is not a speedup over the kernel a deployment serves with now, "
            "which may already be faster than that baseline")


def best_speedup_notes(*, best, sweep) -> list[str]:
    """What a projection with best variant ``best`` (a :class:`kernels.models.KernelBest` with a
    ``speedup``) should say about where its speedup comes from. Always first: the shape and batch
    it was measured at ("the speedup 4.00× was measured at batch 16 of shape v32; ..."), followed
    by the same job's best speedups at the other batches of that shape when it holds any (a decode
    step's batch decides which applies), or by saying that it holds none. Then what it is measured
    against and on which GPU (:func:`speedup_basis`). Then a note when it was
    measured on another ``sm_XX`` than the sweep's GPUs (or the GPU its sim profile models), and a
    warning when the shape's name does not appear in the sweep's model name."""
    from kernels.models import KernelBest

    notes = []
    same = list(KernelBest.objects.filter(job_id=best.job_id, package_id=best.package_id, shape=best.shape,
                                          device_name=best.device_name, compiler=best.compiler,
                                          speedup__isnull=False).order_by("batch").values_list("batch", "speedup"))
    measured_at = f"the speedup {speedup_text(best.speedup)} was measured at batch {best.batch} of shape {best.shape}"
    if len(same) > 1:
        spread = ", ".join(f"{speedup_text(sp)} at batch {b}" for b, sp in same)
        notes.append(f"{measured_at}; the same job's best variants give {spread}: the decode batch of a point "
                     "decides which applies, so pick the best variant of the batch you care about")
    else:
        # One measured batch is no reason to keep quiet about it: a decode step at another batch
        # may gain more or less (a best variant of another job may hold the other batches).
        notes.append(f"{measured_at}; kernel job #{best.job_id} holds no best variant of that shape with a "
                     "speedup at another batch: the decode batch of a point decides how much it gains, so read "
                     f"the projection as batch {best.batch}'s speedup applied to every point")
    notes.append(speedup_basis(best))
    where = _sweep_hardware(sweep)
    if where and best.cc:
        sm = best.cc.replace(".", "")
        from kernels.references import sm_numbers

        sms = sm_numbers(where)
        if sms and sm not in sms:
            # A sim sweep ran on CPUs: its profile models the hardware its costs were measured on.
            ran = (f"the sweep's sim profile models {where}" if _profile_name(sweep)
                   else f"the sweep ran on {where}")
            notes.append(f"the speedup was measured on {best.device_name} (sm_{sm}); {ran}: "
                         f"a kernel's speedup on another GPU differs, so read the projection as what sm_{sm}'s "
                         "speedup would give there")
    from benchmarks.models import served_model_name_shown

    flat = re.sub(r"[^a-z0-9]", "", (best.shape or "").lower())
    model = re.sub(r"[^a-z0-9]", "", (sweep.served_model_name or "").lower())
    if flat and model and flat not in model:
        notes.append(f"the kernel's shape '{best.shape}' is not named in the sweep's model "
                     f"'{served_model_name_shown(sweep.served_model_name)}': check that this model runs that shape")
    return notes


def whatif_compute(*, sweep, share: float = DEFAULT_SHARE, speedup: float, best=None) -> dict[str, Any]:
    """Project ``sweep`` (a :class:`benchmarks.models.BenchmarkSweep`) with a kernel taking
    ``share`` of the decode step made ``speedup`` times faster (see the module docstring).
    ``best``: the :class:`kernels.models.KernelBest` the speedup was taken from, if any; its
    :func:`best_speedup_notes` join the notes.

    Returns ``{"sweep", "engine", "topology", "share", "speedup", "factor", "model": "sim-profile"
    | "ceiling-fit", "profile", "fit", "lengths": {"256/256": [WhatIfRow as dict, ...]}, "notes",
    "speedup_measured_at"}`` (rows by concurrency). ``speedup_measured_at`` says where a speedup
    taken from ``best`` was measured: ``{"best", "job", "package", "shape", "batch", "device_name",
    "cc", "compiler"}`` (ids, names, the batch in sequences); None for a speedup given as a number.
    A sweep that ended failed or cancelled is projected from its finished points, its first note
    naming its status and each point left out ("c=4 64/16 (cancelled)", "c=8 64/16 (never ran)").
    Raises :class:`InvalidInput` for a bad share or speedup, a sweep that
    has not finished (pending, waiting or running: its points so far are not the sweep, and the
    what-if page lists finished sweeps only; the message says how many points are done), a sweep
    with no finished closed-loop run, a sim sweep whose profile cannot be loaded, or a non-sim sweep
    whose analysis has no usable decode fit.
    """
    from benchmarks.services import run_metrics, sweep_analysis

    factor = decode_factor(share=share, speedup=speedup)
    if sweep.status not in SWEEP_TERMINAL:
        raise InvalidInput({"sweep": [_unfinished_refusal(sweep)]})
    engine = _engine(sweep)
    topology = sweep.topology if sweep.topology in ("pd", "single") else "single"
    notes: list[str] = []
    unfinished = _unfinished_note(sweep)
    if unfinished:
        notes.append(unfinished)
    runs = [r for r in sweep.runs.filter(status="done").order_by("input_len", "output_len", "concurrency", "ordinal")]
    open_loop = [r for r in runs if r.concurrency is None]
    runs = [r for r in runs if r.concurrency and r.input_len and r.output_len]
    # A point the ceiling analysis leaves out (no successful request, or more than
    # MAX_FAILED_FRACTION of its requests failed) has no measurement to stand beside a projection.
    empty = [r for r in runs if _unreadable(r.summary or {})]
    runs = [r for r in runs if r not in empty]
    if empty:
        notes.append(f"{len(empty)} point(s) not projected: no successful request, or more than "
                     f"{MAX_FAILED_FRACTION:.0%} of the requests failed ({', '.join(_label(r) for r in empty)})")
    if open_loop:
        notes.append(f"{len(open_loop)} open-loop point(s) (request rate) are not projected: the model is a closed loop")
    if not runs:
        raise InvalidInput({"sweep": [_no_runs_refusal(sweep, empty=bool(empty))]})
    out: dict[str, Any] = {"sweep": sweep.pk, "engine": engine, "topology": topology, "share": share,
                           "speedup": speedup, "factor": factor, "profile": None, "fit": None,
                           "lengths": {}, "notes": notes, "speedup_measured_at": None if best is None else {
                               "best": best.pk, "job": best.job_id, "package": best.package.name,
                               "shape": best.shape, "batch": best.batch, "device_name": best.device_name,
                               "cc": best.cc, "compiler": best.compiler}}
    profile = None
    fits: dict[str, dict] = {}
    bound_at: list[str] = []
    if engine == "sim":
        profile = _sim_profile(sweep)
        out["model"], out["profile"] = "sim-profile", profile.name
        out["decode"] = {"fixed_s": profile.decode.fixed_s, "per_seq_s": profile.decode.per_seq_s,
                         "per_kv_token_s": profile.decode.per_kv_token_s,
                         "kv_capacity_tokens": profile.decode.kv_capacity_tokens,
                         "max_running_requests": profile.decode.max_running_requests}
    analysis = sweep_analysis(sweep=sweep)
    measured = _analysis_batches(analysis)
    if profile is None:
        out["model"] = "ceiling-fit"
        fits = _decode_fits(sweep, analysis)
        out["fit"] = {k: {kk: vv for kk, vv in v.items() if kk != "batches"} for k, v in fits.items()}
    medians: list[str] = []
    for run in runs:
        key = f"{run.input_len}/{run.output_len}"
        m = run_metrics(run=run)
        tok = m.get("output_throughput_tok_s")
        tpot = _central(m.get("tpot_ms"))
        ttft = _central(m.get("ttft_ms"))
        if on_p50 := [name for name, field in (("TPOT", "tpot_ms"), ("TTFT", "ttft_ms"))
                      if _central_stat(m.get(field)) == "p50"]:
            medians.append(f"c={run.concurrency} {key} ({', '.join(on_p50)})")
        if profile is not None:
            base = sim_point(profile, concurrency=run.concurrency, input_len=run.input_len,
                             output_len=run.output_len, topology=topology)
            fast = sim_point(profile, concurrency=run.concurrency, input_len=run.input_len,
                             output_len=run.output_len, topology=topology, factor=factor)
        else:
            fit = fits.get(key)
            if fit is None or ttft is None:
                notes.append(f"{key} c={run.concurrency}: no decode fit or TTFT for this length pair; not projected")
                continue
            b = (measured.get(key, {}).get(f"c={run.concurrency}") or (None, None))[0]
            if b is None:
                b = fit["batches"].get(f"c={run.concurrency}")
            if b is None:
                b = float(run.concurrency)
                notes.append(f"{key} c={run.concurrency}: the ceiling analysis gives no running batch for this point; "
                             "the concurrency is used as the running batch")
            base = fit_point(fixed_ms=fit["fixed_ms"], per_seq_ms=fit["per_seq_ms"], running_batch=b,
                             concurrency=run.concurrency, output_len=run.output_len, ttft_ms=ttft)
            fast = fit_point(fixed_ms=fit["fixed_ms"], per_seq_ms=fit["per_seq_ms"], running_batch=b,
                             concurrency=run.concurrency, output_len=run.output_len, ttft_ms=ttft, factor=factor)
        proj_tpot = tpot * fast.tpot_ms / base.tpot_ms if tpot is not None else None
        proj_tok = tok * fast.tok_s / base.tok_s if tok is not None else None
        held = fast.prefill_bound
        if proj_tok is not None and fast.prefill_bound_tok_s is not None and proj_tok > fast.prefill_bound_tok_s:
            # a measurement above the model would otherwise carry the projection past the prefill
            proj_tok, held = fast.prefill_bound_tok_s, True
        row = WhatIfRow(
            run_id=run.pk, concurrency=run.concurrency, input_len=run.input_len, output_len=run.output_len,
            measured_tok_s=tok, measured_tpot_ms=tpot, measured_ttft_ms=ttft, model_tok_s=base.tok_s,
            model_tpot_ms=base.tpot_ms, model_fast_tok_s=fast.tok_s, model_fast_tpot_ms=fast.tpot_ms,
            projected_tok_s=proj_tok, projected_tpot_ms=proj_tpot,
            tok_s_gain=(proj_tok / tok) if proj_tok is not None and tok else None, running_batch=base.running_batch,
        )
        row.measured_running_batch, row.running_batch_source = \
            measured.get(key, {}).get(f"c={run.concurrency}") or (None, None)
        row.prefill_bound_tok_s, row.prefill_bound = fast.prefill_bound_tok_s, held
        if held:
            bound_at.append((f"c={run.concurrency} {key}", fast.prefill_bound_tok_s,
                             (tok / base.tok_s) if tok is not None and base.tok_s else None))
        out["lengths"].setdefault(key, []).append(asdict(row))
    if medians:
        notes.append(f"no mean in the summary of {', '.join(medians)}: the p50 stands in the mean column there, and "
                     "the projection is calibrated on it")
    if bound_at:
        pf = profile.prefill
        bounds = ", ".join(f"{label} {bound:.2f}" for label, bound, _ in bound_at)
        ratios = ", ".join(f"{label} {ratio:.3f}" for label, _, ratio in bound_at if ratio is not None)
        notes.append(f"prefill-bound at {', '.join(label for label, _, _ in bound_at)}: the kernel does not speed up "
                     f"the prefill, whose batches of at most {pf.max_batch_tokens} prompt tokens "
                     f"({pf.fixed_s * 1e3:.0f} ms + {pf.per_token_s * 1e3:.3f} ms per token each, in sim profile "
                     f"{profile.name}) cap the model's output tok/s with the faster kernel at the row's "
                     f"prefill_bound_tok_s ({bounds} tok/s). The projection is calibrated on the measurement like "
                     "every other row: measured tok/s × that bound / the model's tok/s as is, so it stays below the "
                     "bound by the ratio the point measured below the model as is"
                     + (f" (measured / model as is: {ratios})" if ratios else "")
                     + ", and a higher concurrency projects lower where its measurement falls further short of the "
                     "model; a projection that would pass the bound is held at it")
    if best is not None:
        notes += best_speedup_notes(best=best, sweep=sweep)
    if profile is not None:
        differs = [f"{key} c={r['concurrency']}: model {r['running_batch']:.1f}, analysis {r['measured_running_batch']:.2f}"
                   for key, rows in out["lengths"].items() for r in rows
                   if r["measured_running_batch"] is not None
                   and abs(r["measured_running_batch"] - r["running_batch"]) >= 0.05]
        if differs:
            notes.append("the running batch of the sim-profile model is not the ceiling analysis' ("
                         + "; ".join(differs) + "): the model's is the sequences decoding at once when every request "
                         "of the point is in decode, capped by the engine and the KV cache, and its TPOT (step × c / "
                         "running batch) needs that figure; the analysis' is a time average over the run, lower "
                         "because requests also spend time in prefill and queueing, which the model counts in its "
                         "TTFT instead, so using it there would count that time twice")
    return out
