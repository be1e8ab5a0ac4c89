"""Non-trivial reads of the kernels app: the variant table of a job (filtered and sorted on the
server), the time-vs-batch chart data, the best variants, package summaries.

Units: times in µs, bandwidth in GB/s (1e9 bytes/s), compute in TFLOP/s, memory in bytes; the
roofline fraction is 0-1 (pages show it as %).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, QuerySet

from controlplane.jsonsafe import json_spelled

from kernels.models import KernelBenchmark, KernelBest, KernelJob, KernelPackage, KernelVariant

# States a variant row can be filtered by (``?state=``).
STATES = ("all", "built", "failed", "discarded", "correct", "wrong", "timed")
# Largest number of rows the table returns at once (``limit``).
MAX_ROWS = 2000
# Query keys of the table that take one value: given twice, neither is taken.
SINGLE_KEYS = ("batch", "state", "sort", "limit", "offset")
# Build-fact columns sortable by name; per-shape columns are ``us:<shape>`` and ``roof:<shape>``.
BUILD_SORTS = ("ordinal", "key", "registers", "spills_bytes", "shared_bytes", "build_s", "tensor_core")


#: The largest ``?offset=`` of a job's variant table (page and API): no job holds that many rows.
MAX_TABLE_OFFSET = 1_000_000


def package_list() -> QuerySet[KernelPackage]:
    """Packages with their job count (``n_jobs``), by name."""
    return KernelPackage.objects.annotate(n_jobs=Count("jobs")).order_by("name")


def job_list(*, package: str | None = None, status: str | None = None, node: str | None = None) -> QuerySet[KernelJob]:
    """Jobs newest first, optionally by package name, status and node name."""
    qs = KernelJob.objects.select_related("package", "node", "created_by")
    if package:
        qs = qs.filter(package__name=package)
    if status:
        qs = qs.filter(status=status)
    if node:
        qs = qs.filter(node__name=node)
    return qs.order_by("-created_at", "-id")


def best_list(*, package: str | None = None, device: str | None = None, shape: str | None = None,
              batch: int | None = None, job: int | None = None) -> QuerySet[KernelBest]:
    """Best variants by package, device (case-insensitive substring), shape, batch and job."""
    qs = KernelBest.objects.select_related("package", "variant", "job", "benchmark")
    if package:
        qs = qs.filter(package__name=package)
    if device:
        qs = qs.filter(device_name__icontains=device)
    if shape:
        qs = qs.filter(shape=shape)
    if batch is not None:
        qs = qs.filter(batch=batch)
    if job:
        qs = qs.filter(job_id=job)
    return qs.order_by("package__name", "device_name", "shape", "batch")


def _us(value: float) -> str:
    """A time in µs as the best-variant tables write it: two decimals (``15.08``)."""
    return f"{value:.2f}"


def best_time_comparison(bests: list[KernelBest]) -> list[str]:
    """Compare the best variants of different packages listed together by time, not by speedup.

    Each best variant's speedup is over its own package's baseline implementation, and those
    baselines differ (v32 batch 1 on an H200: the Triton package's 460.66 µs, the CUDA package's
    578.66 µs), so two speedups side by side do not say which kernel is faster: their times do.
    ``bests`` are grouped by entry, the same (device, compute capability, shape, batch); in an entry
    that several packages share, each row gets ``time_fastest`` (the fastest row of the entry, by
    median µs, itself when it is) and ``time_ratio`` (its median over that one's, 1.0 for the
    fastest); a row of an entry no other package has gets neither (None). A package's rows of
    other compilers in one entry count as one, its fastest.

    Returns plain sentences for the page (empty when no entry is shared): that the speedups are
    over different baselines, with one entry's baselines in µs and what each of them is, as its
    package's manifest describes it (:func:`kernels.whatif.baseline_described`); which package is fastest by time
    in how many shared entries; and for each pair of packages, which is slower in how many of the
    entries they share, by how much, with the largest batch of each shape as the example
    (``sparse_mla_decode_fp8 takes longer than sparse_mla_decode in all 14 entries they share on
    NVIDIA H200 (1.36× to 1.98× its time; v32 batch 64: 249.26 µs vs 176.42 µs; ...)``)."""
    entries: dict[tuple, dict[str, KernelBest]] = {}
    for best in bests:
        best.time_fastest, best.time_ratio = None, None
        per_package = entries.setdefault((best.device_name, best.cc, best.shape, best.batch), {})
        kept = per_package.get(best.package.name)
        if kept is None or best.median_us < kept.median_us:
            per_package[best.package.name] = best
    shared = {key: rows for key, rows in entries.items() if len(rows) > 1}
    if not shared:
        return []
    for best in bests:
        rows = shared.get((best.device_name, best.cc, best.shape, best.batch))
        if rows:
            fastest = min(rows.values(), key=lambda row: (row.median_us, row.package.name))
            best.time_fastest = fastest
            best.time_ratio = best.median_us / fastest.median_us if fastest.median_us > 0 else None

    def where(key: tuple, devices: set) -> str:
        device, _cc, shape, batch = key
        return f"{shape} batch {batch}" + ("" if len(devices) == 1 else f" on {device}")

    notes = []
    with_baselines = next(((key, rows) for key, rows in sorted(shared.items())
                           if sum(row.baseline_us is not None for row in rows.values()) > 1), None)
    if with_baselines is not None:
        (device, _cc, shape, batch), rows = with_baselines
        listed = ", ".join(f"{name} {_us(row.baseline_us)} µs" for name, row in sorted(rows.items())
                           if row.baseline_us is not None)
        from kernels.whatif import baseline_described

        described = "".join(f" {name}'s baseline is {what}." for name, row in sorted(rows.items())
                            if row.baseline_us is not None and (what := baseline_described(row.package)))
        notes.append(f"Each speedup is over its own package's baseline implementation, and the baselines differ "
                     f"({shape} batch {batch} on {device}: {listed}): compare packages by their time (µs), not "
                     f"by their speedups.{described}")
    wins: dict[str, int] = {}
    for rows in shared.values():
        fastest = min(rows.values(), key=lambda row: (row.median_us, row.package.name))
        wins[fastest.package.name] = wins.get(fastest.package.name, 0) + 1
    counted = ", ".join(f"{name} in {count}" for name, count in sorted(wins.items(), key=lambda item: (-item[1], item[0])))
    if len(wins) == 1:
        counted = f"{next(iter(wins))} in {'all ' if len(shared) > 1 else ''}{len(shared)}"
    notes.append(f"Fastest by time in the {len(shared)} {'entry' if len(shared) == 1 else 'entries'} that several "
                 f"packages share (the same device, compute capability, shape and batch): {counted}.")
    names = sorted({name for rows in shared.values() for name in rows})
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pairs = {key: (rows[a], rows[b]) for key, rows in shared.items() if a in rows and b in rows}
            if not pairs:
                continue
            a_slower = sum(ra.median_us > rb.median_us for ra, rb in pairs.values())
            b_slower = sum(rb.median_us > ra.median_us for ra, rb in pairs.values())
            slow, fast, count = (a, b, a_slower) if (a_slower, b) >= (b_slower, a) else (b, a, b_slower)
            times = {key: (ra, rb) if slow == a else (rb, ra) for key, (ra, rb) in pairs.items()}
            devices = {(key[0], key[1]) for key in times}
            on = f" on {next(iter(devices))[0]}" if len(devices) == 1 else ""
            if count == 0:
                notes.append(f"{a} and {b} take the same time in the {len(times)} entries they share{on}.")
                continue
            ratios = [rs.median_us / rf.median_us for rs, rf in times.values() if rf.median_us > 0]
            last = {}
            for key in sorted(times):
                last[(key[0], key[1], key[2])] = key   # the largest batch of each device and shape
            examples = "; ".join(f"{where(key, devices)}: {_us(times[key][0].median_us)} µs vs "
                                 f"{_us(times[key][1].median_us)} µs" for key in sorted(last.values()))
            share = (f"all {len(times)} entries" if count == len(times) and len(times) > 1
                     else f"{count} of the {len(times)} {'entry' if len(times) == 1 else 'entries'}")
            span = (f"{min(ratios):.2f}× to {max(ratios):.2f}× its time" if len(ratios) > 1 and count == len(times)
                    else "")
            notes.append(f"{slow} takes longer than {fast} in {share} they share{on} "
                         f"({'; '.join(part for part in (span, examples) if part)}).")
    return notes


@dataclass
class VariantTable:
    """One page of a job's variant table: ``rows`` (dicts, see :func:`variant_table`), the
    ``batch`` the per-shape columns show, ``shapes`` (column groups), ``params`` (parameter
    columns), the applied ``filters`` and ``sort``, ``total`` rows before the page was cut,
    ``offset`` (rows skipped before this page), and the values each parameter takes (for filter
    menus)."""

    rows: list[dict[str, Any]]
    batch: int | None
    batches: list[int]
    shapes: list[str]
    params: list[str]
    param_values: dict[str, list[Any]]
    filters: dict[str, Any] = field(default_factory=dict)
    sort: str = "ordinal"
    total: int = 0
    offset: int = 0


def _sort_value(row: dict[str, Any], key: str) -> tuple[int, tuple[int, Any]]:
    """Sort key of ``row`` for the column ``key``: ``(0, (0, number))`` for a number (a bool
    counts as 0/1), ``(0, (1, text))`` for anything else, ``(1, (0, 0))`` for an absent value
    (None or NaN). So a column mixing numbers and text (``NUM_SPLITS = ["auto", 2, 4, 8]``) sorts
    numbers in numeric order, then text in text order, and never compares a number with a string;
    the caller keeps absent values last whatever the direction."""
    if key.startswith("us:") or key.startswith("roof:"):
        kind, shape = key.split(":", 1)
        cell = row["shapes"].get(shape) or {}
        v = cell.get("median_us" if kind == "us" else "roofline_fraction")
    elif key.startswith("param:"):
        v = row["params"].get(key[6:])
    elif key in ("key", "ordinal"):
        v = row[key]
    else:
        v = (row.get("build") or {}).get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return (1, (0, 0))
    if isinstance(v, bool):
        return (0, (0, int(v)))
    if isinstance(v, (int, float)):
        return (0, (0, v))
    return (0, (1, str(v)))


def _short(value: Any, limit: int = 80) -> str:
    """``value`` as messages quote input (:func:`controlplane.jsonsafe.json_spelled`), cut to
    ``limit`` characters, for messages that echo input back."""
    return json_spelled(value, limit)


def _cut(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters, for messages that echo input back."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def variant_filters(query) -> tuple[dict[str, str], list[str]]:
    """The variant table's parameter filters in a query string (a Django ``QueryDict``):
    ``p.<parameter>=<value>`` gives ``{parameter: value}``. The table filters on one value per
    parameter, so a parameter given more than once with a value (``p.BLOCK_N=32&p.BLOCK_N=64``)
    is not taken (neither value, never the last one silently) and gets a message naming it in the
    returned list; an empty value means no filter (the page's "any"). So is any of
    :data:`SINGLE_KEYS` given more than once (``batch=64&batch=1``)."""
    params: dict[str, str] = {}
    problems: list[str] = []
    for key, values in query.lists():
        if key in SINGLE_KEYS and len(values) > 1:
            problems.append(f"{key} is given {len(values)} times ({', '.join(_cut(v) for v in values[:8])}): "
                            "give it once")
            continue
        if not key.startswith("p."):
            continue
        given = [v for v in values if v != ""]
        if len(given) > 1:
            problems.append(f"{_cut(key)} is given {len(given)} times ({', '.join(_cut(v) for v in given[:8])}): "
                            "the table filters on one value per parameter, give it once")
            continue
        params[key[2:]] = given[0] if given else ""
    return params, problems


def variant_table(*, job: KernelJob, batch: int | None = None, state: str = "all", params: dict[str, str] | None = None,
                  sort: str = "ordinal", limit: int | None = 500, offset: int = 0) -> VariantTable:
    """The job's variants as table rows, filtered and sorted on the server.

    Row: ``id``, ``source_variant_id`` (the id in the variants.json a job made from a measurement
    was made from, else None), ``ordinal``, ``key``, ``params``, ``build`` (ok, error, registers, spills_bytes,
    shared_bytes, tensor_core, tensor_core_evidence, build_s, discarded, discard_reason; None
    before the build), ``state`` (pending, failed, discarded, built, correct, wrong, partial;
    measured without a stored build, as results ingested without their builds file are, a row
    takes its measurements' state),
    ``shapes``: ``{shape: {"correct", "median_us", "p10_us", "p90_us", "gbps", "tflops",
    "roofline_us", "roofline_fraction", "bound", "error"}}`` at ``batch`` (default: the smallest
    batch measured), and ``best_in`` (shapes where this row is the job's best at that batch).

    ``state`` is one of :data:`STATES`; ``params`` filters parameter values (``{"impl":
    "split_k"}``, compared as text); ``sort`` is ``ordinal``, ``key``, a build fact
    (:data:`BUILD_SORTS`), ``param:<name>``, ``us:<shape>`` or ``roof:<shape>``, ``-`` in front
    for descending (absent values always last; a column mixing numbers and text sorts the numbers
    in numeric order before the text in text order, and the reverse of that descending).
    ``rows`` is the page of at most ``limit`` rows (cut to :data:`MAX_ROWS`) from ``offset``;
    ``limit`` None gives every row from ``offset`` (a CSV download of the table).

    ``batches`` (the batch menu) are the batches measured; before any measurement, those the job
    selected (``job.batches``), else every batch the manifest declares for the job's shapes.

    Raises :class:`controlplane.errors.InvalidInput` naming the valid choices for a ``batch`` the
    job neither measured nor declared, a ``params`` key that is not a grid parameter or a value
    outside that parameter's grid values (compared as text), each under its query key
    ``p.<parameter>`` (``{"p.BLOCK_N": ["'48' is not one of BLOCK_N's values in this job's grid:
    16, 32, 64"]}``), or an unknown ``sort`` key (``batch`` None means the smallest batch).
    """
    from controlplane.errors import InvalidInput

    manifest, shapes, batches, errors = _variant_table_query(job=job, batch=batch, params=params, sort=sort)
    if errors:
        raise InvalidInput(errors)
    if batch is None or batch not in batches:
        batch = batches[0] if batches else None
    desc = sort.startswith("-")
    key = sort[1:] if desc else sort
    benches: dict[int, dict[str, KernelBenchmark]] = {}
    if batch is not None:
        for b in KernelBenchmark.objects.filter(variant__job=job, batch=batch):
            benches.setdefault(b.variant_id, {})[b.shape] = b
    best_at = {(r.shape, r.variant_id) for r in KernelBest.objects.filter(job=job, batch=batch)}
    params = {k: str(v) for k, v in (params or {}).items() if k in manifest.grid and v not in (None, "")}
    rows: list[dict[str, Any]] = []
    measured_as = job.source_ids()
    for v in KernelVariant.objects.filter(job=job).select_related("build").order_by("ordinal"):
        if any(str(v.params.get(k)) != val for k, val in params.items()):
            continue
        b = getattr(v, "build", None)
        build = None if b is None else {
            "ok": b.ok, "error": b.error, "registers": b.registers, "spills_bytes": b.spills_bytes,
            "shared_bytes": b.shared_bytes, "tensor_core": b.tensor_core, "tensor_core_evidence": b.tensor_core_evidence,
            "build_s": b.build_s, "discarded": b.discarded, "discard_reason": b.discard_reason, "compiler": b.compiler,
        }
        cells = {}
        for shape, m in benches.get(v.pk, {}).items():
            cells[shape] = {"correct": m.correct, "median_us": m.median_us, "p10_us": m.p10_us, "p90_us": m.p90_us,
                            "min_us": m.min_us, "gbps": m.gbps, "tflops": m.tflops, "roofline_us": m.roofline_us,
                            "roofline_fraction": m.roofline_fraction, "bound": m.bound, "error": m.error,
                            "max_abs_err": m.max_abs_err, "max_rel_err": m.max_rel_err, "reps": m.reps,
                            "timing": m.timing}
        all_cells = list(cells.values())
        if b is None and not all_cells:
            row_state = "pending"
        elif b is not None and not b.ok:
            row_state = "failed"
        elif b is not None and b.discarded:
            row_state = "discarded"
        elif not all_cells:
            row_state = "built"
        elif all(c["correct"] is True for c in all_cells):
            row_state = "correct"
        elif any(c["correct"] is False for c in all_cells):
            row_state = "wrong"
        else:
            row_state = "partial"
        rows.append({"id": v.pk, "source_variant_id": measured_as.get(v.pk), "ordinal": v.ordinal, "key": v.key,
                     "params": v.params, "build": build,
                     "state": row_state, "shapes": cells,
                     "best_in": [s for s in shapes if (s, v.pk) in best_at]})
    if state == "built":
        rows = [r for r in rows if r["build"] and r["build"]["ok"] and not r["build"]["discarded"]]
    elif state == "timed":
        rows = [r for r in rows if any(c.get("median_us") is not None for c in r["shapes"].values())]
    elif state in ("failed", "discarded", "correct", "wrong"):
        rows = [r for r in rows if r["state"] == state]
    present = [r for r in rows if _sort_value(r, key)[0] == 0]
    absent = [r for r in rows if _sort_value(r, key)[0] == 1]
    present.sort(key=lambda r: _sort_value(r, key)[1], reverse=desc)
    rows = present + absent
    total = len(rows)
    offset = max(0, int(offset))
    end = None if limit is None else offset + max(1, min(int(limit), MAX_ROWS))
    return VariantTable(
        rows=rows[offset:end], offset=offset, batch=batch, batches=batches, shapes=shapes, params=list(manifest.grid),
        param_values={k: list(v) for k, v in manifest.grid.items()},
        filters={"state": state, **{f"p.{k}": v for k, v in params.items()}},
        sort=("-" if desc else "") + key, total=total,
    )


def variant_table_query_errors(*, job: KernelJob, batch: int | None = None, params: dict[str, str] | None = None,
                               sort: str = "ordinal") -> dict[str, list[str]]:
    """``{key: [message]}`` for what :func:`variant_table` refuses of ``batch``, ``params`` and
    ``sort`` for ``job``, in its words (empty when it takes them): for a query whose other values
    are refused already, so that one 400 names them all."""
    return _variant_table_query(job=job, batch=batch, params=params, sort=sort)[3]


def _variant_table_query(*, job: KernelJob, batch: int | None, params: dict[str, str] | None,
                         sort: str) -> tuple[Any, list[str], list[int], dict[str, list[str]]]:
    """``(manifest, shapes, batches, errors)`` of :func:`variant_table` for ``job``: its manifest,
    shapes and batch menu, and every problem of ``batch``, ``params`` and ``sort`` under its query key."""
    from kernels.services import job_manifest

    manifest = job_manifest(job)
    shapes = job_shapes(job)
    measured = sorted(set(KernelBenchmark.objects.filter(variant__job=job).values_list("batch", flat=True)))
    declared = sorted({b for s in manifest.shapes if s.name in shapes for b in s.batches
                       if not job.batches or b in job.batches})
    batches = measured or declared
    errors: dict[str, list[str]] = {}
    if batch is not None and batch not in batches:
        errors["batch"] = [f"{_short(batch)} is not a batch of this job; batches: "
                           f"{', '.join(str(b) for b in batches) or 'none'}"]
    for k, v in (params or {}).items():
        if k not in manifest.grid:
            errors[f"p.{k}"] = [f"not a parameter of this job; parameters: {', '.join(manifest.grid)} "
                                "(filter as p.<parameter>=<value>)"]
            continue
        allowed = [str(x) for x in manifest.grid[k]]
        if v not in (None, "") and str(v) not in allowed:
            errors[f"p.{k}"] = [f"{_short(str(v))} is not one of {k}'s values in this job's grid: {', '.join(allowed)}"]
    desc = sort.startswith("-")
    key = sort[1:] if desc else sort
    valid = (key in BUILD_SORTS or (key.startswith("param:") and key[6:] in manifest.grid)
             or (key.split(":", 1)[0] in ("us", "roof") and key.split(":", 1)[-1] in shapes))
    if not valid:
        errors["sort"] = [f"{_short(sort)} is not a sort key; keys: {', '.join(BUILD_SORTS)}, "
                          f"{', '.join('param:' + p for p in manifest.grid)}, "
                          f"{', '.join('us:' + sh + ', roof:' + sh for sh in shapes)} ('-' in front: descending)"]
    return manifest, shapes, batches, errors


def job_shapes(job: KernelJob) -> list[str]:
    """The shapes job ``job`` benchmarks, in the manifest's order: those it selected (``job.shapes``),
    every shape of its manifest when it selected none."""
    from kernels.services import job_manifest

    return [s.name for s in job_manifest(job).shapes if not job.shapes or s.name in job.shapes]


def job_time_chart(*, job: KernelJob, shape: str) -> dict[str, Any]:
    """Time vs batch for one shape: per implementation (the ``impl`` parameter, or one series
    when the grid has none) the fastest correct median (µs) at each batch, plus the roofline
    (µs, from the job's measured HBM bandwidth and bf16 rate) at the shape's batches the job
    selected (all of the shape's when it selected none). Returns ``{"batches": [...],
    "series": [{"label", "points": [[batch, us], ...]}], "roofline": [[batch, us], ...]}``.

    Raises :class:`controlplane.errors.InvalidInput` (``shape``) naming the job's shapes
    (:func:`job_shapes`) when ``shape`` is empty or not one of them."""
    from kernels.services import job_manifest, roofline_point

    from controlplane.errors import InvalidInput

    names = job_shapes(job)
    if not shape:
        raise InvalidInput({"shape": [f"is required (one of this job's shapes: {', '.join(names)})"]})
    if shape not in names:
        raise InvalidInput({"shape": [f"{json_spelled(_cut(shape))} is not a shape of this job (its shapes: {', '.join(names)})"]})
    manifest = job_manifest(job)
    benches = (KernelBenchmark.objects.filter(variant__job=job, shape=shape, correct=True, median_us__isnull=False)
               .exclude(variant__build__discarded=True).select_related("variant"))
    best: dict[str, dict[int, float]] = {}
    for b in benches:
        impl = str(b.variant.params.get("impl", "best variant"))
        cur = best.setdefault(impl, {})
        if b.batch not in cur or b.median_us < cur[b.batch]:
            cur[b.batch] = b.median_us
    try:
        batches = [b for b in manifest.shape(shape).batches if not job.batches or b in job.batches]
    except KeyError:
        batches = []
    order = [str(v) for v in manifest.grid.get("impl", [])]
    labels = sorted(best, key=lambda k: (order.index(k) if k in order else len(order), k))
    series = [{"label": impl, "points": [[bb, best[impl][bb]] for bb in sorted(best[impl])]} for impl in labels]
    roof = []
    for bb in batches:
        us, _ = roofline_point(manifest, shape, bb, job.hbm_gbps, job.bf16_tflops)
        if us is not None:
            roof.append([bb, us])
    return {"batches": batches, "series": series, "roofline": roof}


def job_result_lines(job) -> list[str]:
    """What a stored kernel job measured, as the ingest and ``make demo`` print it (each line
    indented two spaces): the device and its measured ceilings, why there is no best variant where
    there is none, what the speedups are over, each shape and batch's best variant (µs, speedup
    over the baseline, % of roofline) and the config files written."""
    lines = []
    if job.device_name:
        lines.append(f"  device {job.device_name} (cc {job.device_cc}): HBM {job.hbm_gbps or 0:.0f} GB/s, "
                     f"bf16 {job.bf16_tflops or 0:.1f} TFLOP/s (measured)")
    if job.benchmarks_correct and not job.builds_ok:
        lines.append("  no best variant: the job holds no build facts (give --builds builds.json); a measured "
                     "variant qualifies only once its build is known not to spill or exceed shared memory")
    from kernels.templatetags.kernel_numbers import speedup_text

    bests = list(KernelBest.objects.filter(job=job).order_by("shape", "batch").select_related("package"))
    if any(best.speedup for best in bests):
        from kernels.whatif import baseline_described

        what = baseline_described(job.package)
        gpu = job.device_name or "an unrecorded GPU"
        lines.append(f"  speedups below are over package {job.package.name}'s own baseline implementation"
                     + (f" ({what})" if what else "") + f", both measured on {gpu}; not over the kernel "
                     "a deployment serves with now")
    for best in bests:
        speed = f", {speedup_text(best.speedup)} over baseline" if best.speedup else ""
        roof = f", {100 * best.roofline_fraction:.0f}% of roofline" if best.roofline_fraction else ""
        lines.append(f"  best {best.shape} batch {best.batch}: {best.median_us:.2f} us{speed}{roof}")
    for path in job.config_paths or []:
        lines.append(f"  config: {path}")
    return lines
