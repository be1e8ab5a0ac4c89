"""Import other harnesses' result files as runs in Ceiling's vocabulary, keeping the original text.

Supported: SGLang ``python -m sglang.bench_serving --output-file x.jsonl`` (one JSON object per
line, appended per run; older and newer key sets) and vLLM ``vllm bench serve --save-result``
(one JSON object; ``--append-result`` writes one per line). Pure functions, no database; the
caller stores :class:`ImportedRun` rows and the verbatim file.

Mapping, by formula (``/work/shared/design/metrics.md``):

* **TPOT**: SGLang's and vLLM's ``*_tpot_ms`` are per request (E2E - TTFT) / (output tokens - 1),
  summarised over requests with at least 2 tokens: the same formula as Ceiling's TPOT, so they map
  to ``tpot_ms`` unchanged.
* **ITL**: their ``*_itl_ms`` are gaps between consecutive streamed events (a chunk carrying
  several tokens is one gap), summarised over all gaps of all requests: Ceiling's per-event ITL,
  mapped to ``itl_ms`` (not per-token).
* **TTFT** ``*_ttft_ms`` -> ``ttft_ms``; **E2E** SGLang ``*_e2e_latency_ms`` and vLLM ``*_e2el_ms`` ->
  ``e2e_ms``. ``median`` -> ``p50``; ``pNN`` (also ``p99.9``), ``std``, ``max`` keep their names.
* For later importers: GuideLLM's "TPOT" is E2E / output tokens, first token included, so it is not
  Ceiling's TPOT; GuideLLM's and AIPerf's "ITL" is (E2E - TTFT) / (output tokens - 1), which *is*
  Ceiling's TPOT.
* Means per request: ``mean_input_tokens = total_input_tokens / completed`` and likewise for output
  (the files give totals only). Throughputs the file lacks are computed from totals / ``duration``
  and say so in ``notes``.
* Request lengths: SGLang's random dataset draws each length uniformly from
  ``[max(int(L * r), 1), L]`` with ``r = --random-range-ratio`` (default 0.0), unlike Ceiling's
  ``[L(1 - r), L(1 + r)]``; so ``random_input_len`` 1024 with r 0 means lengths in [1, 1024]
  (mean about 512), and the import says so instead of presenting a 1024-token run. vLLM's result
  file does not record the requested lengths; they stay null.
* Absent or null values stay None, never 0 (vLLM's ``"request_goodput": null``). vLLM's older key
  ``"request_goodput:"`` (trailing colon) is read as ``request_goodput``. NaN values become None with
  a note (SGLang writes NaN for a statistic over no values, e.g. ``mean_ttft_ms`` of a run whose
  requests all failed), except in ``completed`` and ``duration``, which a run cannot do without,
  where NaN is refused. Keys not mapped are listed in ``unmapped_keys`` and stay in the kept
  original text.

Consistency checks (a file that fails one is refused, not imported with a note): the statistics
of each latency (TTFT, TPOT, ITL, E2E) must not decrease along min <= p50 (median) <= p90 <= p95
<= p99 <= max, over the ones present (a percentile is a non-decreasing function of its rank, by
definition; values within a relative 1e-9 count as equal, for float rounding); and
``completed + failed`` may not exceed ``num_prompts`` where the file has them (a request is sent
once and ends once).

Errors: :class:`ResultImportError` names the line and key (``line 3, key 'completed': ...``).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from benchmarks.analysis import LatencyStats, SweepPoint
from controlplane.errors import InvalidInput

SGLANG_BENCH_SERVING = "sglang-bench-serving"
VLLM_BENCH_SERVE = "vllm-bench-serve"
SourceFormat = Literal["sglang-bench-serving", "vllm-bench-serve"]

# Summary statistic keys: ``<stat>_<metric>_ms``. SGLang: e2e_latency; vLLM: e2el.
_STAT_KEY = re.compile(r"^(mean|median|std|min|max|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el|e2e_latency)_ms$")
_METRIC_FIELD = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2e_ms", "e2e_latency": "e2e_ms"}
_ALWAYS_STATS = ("mean", "std", "p50", "p90", "p99")
# Keys only vLLM writes, and keys only SGLang writes: used by detect_format.
_VLLM_MARKERS = {"endpoint_type", "model_id", "tokenizer_id", "burstiness", "request_goodput:", "request_goodput",
                 "max_concurrent_requests", "total_token_throughput", "mean_e2el_ms", "median_e2el_ms"}
_SGLANG_MARKERS = {"total_output_tokens_retokenized", "random_range_ratio", "random_input_len",
                   "mean_e2e_latency_ms", "median_e2e_latency_ms", "sharegpt_output_len", "accept_length"}
# Per-request arrays a detailed vLLM / SGLang result may carry; kept only in the original text.
_PER_REQUEST_KEYS = {"input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors", "start_times"}


class ResultImportError(InvalidInput):
    """A result file that cannot be imported: not JSON, not an object, a wrong type for a known key,
    or a missing ``completed`` / ``duration``. ``line`` (1-based, None for the whole file) and
    ``key`` say where; maps to HTTP 400 with the field path ``line 3.completed``."""

    def __init__(self, message: str, *, line: int | None = None, key: str | None = None) -> None:
        self.line = line
        self.key = key
        self.message = message
        where = [f"line {line}" if line is not None else "file"]
        if key is not None:
            where.append(f"key '{key}'")
        path = f"line {line}" if line is not None else "file"
        super().__init__({f"{path}.{key}" if key else path: [message]})
        self.args = (f"{', '.join(where)}: {message}",)

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass
class ImportedRun:
    """One benchmark run read from another harness's file, in Ceiling's field names and units.

    Counts are requests or tokens; ``duration_s`` seconds; throughputs per second as named; latency
    summaries are dicts in ms with keys ``mean``, ``std``, ``p50``, ``p90``, ``p99`` always present
    (None when the file lacks them) plus any other statistic the file had (``p95``, ``p99.9``,
    ``max``). ``mean_input_tokens`` / ``mean_output_tokens`` are totals / ``completed``.
    ``requested_input_len`` / ``requested_output_len`` are the harness's length arguments and
    ``input_len_range`` / ``output_len_range`` the inclusive range the lengths were drawn from
    (None when unknown); ``length_distribution_note`` says it in words. ``original_text`` is the
    whole file verbatim and ``original_record`` this run's own line/object verbatim;
    ``source_line`` its 1-based line. ``notes`` record every derived or dropped value;
    ``nan_keys`` the file's keys whose value was NaN (kept as None).
    """

    source_format: SourceFormat
    source_line: int | None
    original_text: str
    original_record: str
    backend: str | None = None
    model_id: str | None = None
    tokenizer_id: str | None = None
    label: str | None = None
    date: str | None = None
    dataset_name: str | None = None
    num_prompts: int | None = None
    concurrency: int | None = None
    request_rate_req_s: float | None = None
    request_rate_unbounded: bool = False
    burstiness: float | None = None
    requested_input_len: int | None = None
    requested_output_len: int | None = None
    range_ratio: float | None = None
    input_len_range: tuple[int, int] | None = None
    output_len_range: tuple[int, int] | None = None
    length_distribution_note: str | None = None
    completed: int | None = None
    failed: int | None = None
    duration_s: float | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    total_output_tokens_retokenized: int | None = None
    mean_input_tokens: float | None = None
    mean_output_tokens: float | None = None
    request_throughput_req_s: float | None = None
    input_throughput_tok_s: float | None = None
    output_throughput_tok_s: float | None = None
    total_token_throughput_tok_s: float | None = None
    request_goodput_req_s: float | None = None
    peak_output_throughput_tok_s: float | None = None
    max_concurrent_requests: int | None = None
    mean_concurrency: float | None = None
    ttft_ms: dict[str, float | None] = field(default_factory=dict)
    tpot_ms: dict[str, float | None] = field(default_factory=dict)
    itl_ms: dict[str, float | None] = field(default_factory=dict)
    e2e_ms: dict[str, float | None] = field(default_factory=dict)
    unmapped_keys: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    nan_keys: list[str] = field(default_factory=list)

    def as_dict(self, *, with_original: bool = False) -> dict[str, Any]:
        """JSON-ready dict; the (possibly large) original text only when ``with_original``."""
        out = asdict(self)
        if not with_original:
            out.pop("original_text")
            out.pop("original_record")
        return out

    def as_sweep_point(self, *, num_gpus: int | None = None) -> SweepPoint:
        """This run as a :class:`SweepPoint` for :func:`benchmarks.analysis.ceiling_analyse`.

        Lengths are the requested ones only when every request had exactly that length; otherwise
        they are None with the flag ``variable_lengths`` (a range) or ``lengths_unknown`` (not
        recorded), so the run is never grouped with fixed-length runs. Raises
        :class:`ResultImportError` naming the run's line when the file had no output throughput
        (absent or NaN) and none could be computed from ``total_output_tokens`` / ``duration``.
        """
        if self.output_throughput_tok_s is None:
            nan = [k for k in ("output_throughput", "total_output_tokens", "duration") if k in self.nan_keys]
            why = (f"{' and '.join(nan)} {'is' if len(nan) == 1 else 'are'} NaN in the file, so "
                   if nan else "is missing and ")
            raise ResultImportError(f"{why}no output throughput can be read or computed (total_output_tokens / "
                                    "duration); a run needs one", line=self.source_line, key="output_throughput")
        flags: list[str] = []
        in_len = _fixed_len(self.input_len_range)
        out_len = _fixed_len(self.output_len_range)
        if self.input_len_range is None or self.output_len_range is None:
            flags.append("lengths_unknown")
        elif in_len is None or out_len is None:
            flags.append("variable_lengths")

        def stats(d: dict[str, float | None]) -> LatencyStats:
            return LatencyStats(mean=d.get("mean"), p50=d.get("p50"), p90=d.get("p90"), p99=d.get("p99"))

        return SweepPoint(
            concurrency=self.concurrency, output_throughput_tok_s=self.output_throughput_tok_s,
            ttft_ms=stats(self.ttft_ms), tpot_ms=stats(self.tpot_ms), itl_ms=stats(self.itl_ms),
            e2e_ms=stats(self.e2e_ms), request_rate=self.request_rate_req_s, input_len=in_len, output_len=out_len,
            request_throughput=self.request_throughput_req_s, num_gpus=num_gpus, completed=self.completed,
            failed=self.failed, flags=tuple(flags),
        )


def detect_format(text: str) -> SourceFormat:
    """Which harness wrote ``text``: ``"sglang-bench-serving"`` or ``"vllm-bench-serve"``.

    Decided from keys only one of them writes (vLLM: ``endpoint_type``, ``model_id``, ``*_e2el_ms``,
    ``request_goodput``; SGLang: ``*_e2e_latency_ms``, ``random_range_ratio``,
    ``total_output_tokens_retokenized``) in the whole text as one JSON object, else in its first
    non-empty line. Raises :class:`ResultImportError` when neither matches.
    """
    records = _records(text)
    keys = set(records[0][1])
    if keys & _VLLM_MARKERS:
        return VLLM_BENCH_SERVE
    if keys & _SGLANG_MARKERS:
        return SGLANG_BENCH_SERVING
    raise ResultImportError("not a SGLang bench_serving or vLLM bench serve result (no key either writes)",
                            line=records[0][0])


def import_results(text: str) -> list[ImportedRun]:
    """Import any supported file: :func:`detect_format`, then one :class:`ImportedRun` per run."""
    if detect_format(text) == SGLANG_BENCH_SERVING:
        return import_sglang_bench_serving(text)
    return [_vllm_run(obj, raw, line, text) for line, obj, raw in _records(text)]


def import_sglang_bench_serving(text: str) -> list[ImportedRun]:
    """Import a SGLang ``bench_serving`` JSONL file: one run per non-empty line, in file order.

    Each run keeps the whole file (``original_text``) and its own line (``original_record``).
    Raises :class:`ResultImportError` naming the line (and key) for invalid JSON, a non-object line,
    a wrongly typed known key, or a line without ``completed`` / ``duration``.
    """
    return [_sglang_run(obj, raw, line, text) for line, obj, raw in _jsonl(text)]


def import_vllm_bench_serve(text: str) -> ImportedRun:
    """Import one vLLM ``bench serve --save-result`` JSON object (pretty-printed or on one line).

    Reads both ``request_goodput`` and the older ``"request_goodput:"`` key; null stays None.
    Raises :class:`ResultImportError` for invalid JSON, several objects (use :func:`import_results`
    for an ``--append-result`` file), a wrongly typed known key or a missing ``completed`` /
    ``duration``.
    """
    records = _records(text)
    if len(records) != 1:
        raise ResultImportError(f"{len(records)} result objects; import_results reads one run per line",
                                line=records[1][0])
    line, obj, raw = records[0]
    return _vllm_run(obj, raw, line, text)


# --- parsing --------------------------------------------------------------------------------------


def _records(text: str) -> list[tuple[int | None, dict[str, Any], str]]:
    """The file as one JSON object (line None), else as JSON lines."""
    if not text.strip():
        raise ResultImportError("the file is empty")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        return _jsonl(text)
    if not isinstance(whole, dict):
        raise ResultImportError(f"expected a JSON object, got {_json_type(whole)}")
    return [(None, whole, text.strip())]


def _jsonl(text: str) -> list[tuple[int | None, dict[str, Any], str]]:
    out: list[tuple[int | None, dict[str, Any], str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ResultImportError(f"not valid JSON ({exc.msg} at column {exc.colno})", line=number) from None
        if not isinstance(obj, dict):
            raise ResultImportError(f"expected a JSON object, got {_json_type(obj)}", line=number)
        out.append((number, obj, raw))
    if not out:
        raise ResultImportError("the file is empty")
    return out


class _Reader:
    """Typed access to one record's keys, remembering which were used and noting NaNs."""

    def __init__(self, obj: dict[str, Any], line: int | None, notes: list[str], nan_keys: list[str]) -> None:
        self.obj = obj
        self.line = line
        self.notes = notes
        self.nan_keys = nan_keys
        self.used: set[str] = set()

    def _raw(self, key: str) -> Any:
        self.used.add(key)
        return self.obj.get(key)

    def number(self, key: str) -> float | None:
        v = self._raw(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ResultImportError(f"expected a number, got {v!r}", line=self.line, key=key)
        if math.isnan(v):
            self.notes.append(f"{key} was NaN in the file; kept as null.")
            self.nan_keys.append(key)
            return None
        return float(v)

    def count(self, key: str) -> int | None:
        v = self.number(key)
        if v is None:
            return None
        if v < 0 or not math.isfinite(v) or v != int(v):
            raise ResultImportError(f"expected a whole number >= 0, got {self.obj[key]!r}", line=self.line, key=key)
        return int(v)

    def text(self, key: str) -> str | None:
        v = self._raw(key)
        if v is None:
            return None
        if not isinstance(v, str):
            raise ResultImportError(f"expected a string, got {v!r}", line=self.line, key=key)
        return v

    def rate(self, key: str) -> tuple[float | None, bool]:
        """A request rate: a number, ``Infinity`` or the string ``"inf"`` (vLLM) for unbounded."""
        v = self._raw(key)
        if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
            return None, True
        n = self.number(key)
        if n is not None and math.isinf(n):
            return None, True
        return n, False

    def required(self, *keys: str) -> None:
        for key in keys:
            value = self.obj.get(key)
            if value is None:
                raise ResultImportError("is missing; a run needs it", line=self.line, key=key)
            if isinstance(value, float) and math.isnan(value):
                raise ResultImportError(f"{key} is NaN; a run cannot be imported without a number here",
                                        line=self.line, key=key)


def _common(r: _Reader, run: ImportedRun) -> None:
    """Keys both harnesses write with the same meaning, then the statistics and derived values."""
    r.required("completed", "duration")
    run.backend = r.text("backend")
    run.dataset_name = r.text("dataset_name")
    run.concurrency = r.count("max_concurrency")
    run.request_rate_req_s, run.request_rate_unbounded = r.rate("request_rate")
    run.completed = r.count("completed")
    run.duration_s = r.number("duration")
    run.total_input_tokens = r.count("total_input_tokens")
    run.total_output_tokens = r.count("total_output_tokens")
    run.request_throughput_req_s = r.number("request_throughput")
    run.input_throughput_tok_s = r.number("input_throughput")
    run.output_throughput_tok_s = r.number("output_throughput")
    run.total_token_throughput_tok_s = r.number("total_token_throughput")
    if run.total_token_throughput_tok_s is None:
        run.total_token_throughput_tok_s = r.number("total_throughput")  # SGLang's newer name
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        setattr(run, metric, {k: None for k in _ALWAYS_STATS})
    sources: dict[tuple[str, str], str] = {}
    for key in list(r.obj):
        m = _STAT_KEY.match(key)
        if m:
            stat = "p50" if m.group(1) == "median" else m.group(1)
            getattr(run, _METRIC_FIELD[m.group(2)])[stat] = r.number(key)
            sources[(_METRIC_FIELD[m.group(2)], stat)] = key
    _percentiles_check(run, sources, r.line)
    _derive(run)


# Order of the statistics that must not decrease; pNN in between are placed by their rank.
_METRIC_LABEL = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2e_ms": "E2E"}
_PERCENTILE = re.compile(r"p(\d+(?:\.\d+)?)")
# Relative slack for float rounding when comparing neighbouring statistics (a p99 interpolated next
# to the maximum may land an ulp above it).
_ORDER_SLACK = 1e-9


def _percentiles_check(run: ImportedRun, sources: dict[tuple[str, str], str], line: int | None) -> None:
    """Refuse statistics that decrease along min <= p50 <= ... <= p99 <= max (the ones present, per
    latency). Raises :class:`ResultImportError` naming the key that is too small and both values."""
    for metric, label in _METRIC_LABEL.items():
        stats: dict[str, float | None] = getattr(run, metric)
        ranked = sorted((float(m.group(1)), k) for k in stats if (m := _PERCENTILE.fullmatch(k)))
        order = ["min"] + [k for _, k in ranked] + ["max"]
        present = [k for k in order if stats.get(k) is not None]
        for lo, hi in zip(present, present[1:]):
            a, b = float(stats[lo]), float(stats[hi])  # type: ignore[arg-type]
            if b < a - _ORDER_SLACK * max(abs(a), abs(b)):
                lo_key, hi_key = sources.get((metric, lo), lo), sources.get((metric, hi), hi)
                raise ResultImportError(
                    f"{hi_key} = {b:g} ms is less than {lo_key} = {a:g} ms; {label} statistics must not decrease "
                    "(min <= p50 <= p90 <= p95 <= p99 <= max)", line=line, key=hi_key)


def _counts_check(run: ImportedRun, line: int | None) -> None:
    """Refuse ``completed + failed > num_prompts`` (each prompt is sent once and ends once)."""
    if run.num_prompts is None or run.completed is None:
        return
    failed = run.failed or 0
    if run.completed + failed > run.num_prompts:
        raise ResultImportError(
            f"completed {run.completed} + failed {failed} = {run.completed + failed} is more than num_prompts "
            f"{run.num_prompts}; every prompt is sent once and ends once", line=line, key="completed")


def _derive(run: ImportedRun) -> None:
    """Means from totals, and throughputs from totals / duration where the file lacks them."""
    if run.completed:
        if run.total_input_tokens is not None:
            run.mean_input_tokens = run.total_input_tokens / run.completed
        if run.total_output_tokens is not None:
            run.mean_output_tokens = run.total_output_tokens / run.completed
    if not run.duration_s or run.duration_s <= 0:
        return
    derived = {
        "request_throughput_req_s": run.completed,
        "input_throughput_tok_s": run.total_input_tokens,
        "output_throughput_tok_s": run.total_output_tokens,
        "total_token_throughput_tok_s": (run.total_input_tokens + run.total_output_tokens
                                         if run.total_input_tokens is not None
                                         and run.total_output_tokens is not None else None),
    }
    for name, total in derived.items():
        if getattr(run, name) is None and total is not None:
            setattr(run, name, total / run.duration_s)
            run.notes.append(f"{name} is not in the file; computed as its total / duration.")


def _finish(r: _Reader, run: ImportedRun) -> ImportedRun:
    per_request = sorted(k for k in r.obj if k in _PER_REQUEST_KEYS)
    if per_request:
        run.notes.append(f"Per-request arrays ({', '.join(per_request)}) are kept in the original file only.")
    run.unmapped_keys = sorted(k for k in r.obj if k not in r.used and not _STAT_KEY.match(k))
    return run


def _sglang_run(obj: dict[str, Any], raw: str, line: int | None, text: str) -> ImportedRun:
    run = ImportedRun(source_format=SGLANG_BENCH_SERVING, source_line=line, original_text=text, original_record=raw)
    r = _Reader(obj, line, run.notes, run.nan_keys)
    _common(r, run)
    run.total_output_tokens_retokenized = r.count("total_output_tokens_retokenized")
    run.mean_concurrency = r.number("concurrency")
    random_in = r.count("random_input_len")
    random_out = r.count("random_output_len")
    ratio = r.number("random_range_ratio")
    sharegpt_out = r.count("sharegpt_output_len")
    fixed_out = r.count("fixed_output_len")
    dataset = (run.dataset_name or "").lower()
    if dataset.startswith("random"):
        run.requested_input_len, run.requested_output_len, run.range_ratio = random_in, random_out, ratio
        _sglang_lengths(run)
    elif run.dataset_name is None:
        run.notes.append(
            "dataset_name is not recorded; random_input_len / random_output_len apply only to SGLang's random "
            "dataset, so no requested length is shown.")
    else:
        run.requested_output_len = sharegpt_out if sharegpt_out is not None else fixed_out
        run.length_distribution_note = (
            f"Prompts from the {run.dataset_name} dataset: input lengths come from the data"
            + (f", output fixed at {run.requested_output_len} tokens." if run.requested_output_len else
               ", output lengths too."))
    return _finish(r, run)


def _sglang_lengths(run: ImportedRun) -> None:
    """Ranges and the note for SGLang's random dataset: lengths uniform in [max(int(L*r), 1), L]."""
    r = run.range_ratio
    if r is None:
        run.length_distribution_note = (
            f"random_range_ratio is {'NaN in the file' if 'random_range_ratio' in run.nan_keys else 'not recorded'}, "
            "so the length distribution is unknown: SGLang draws lengths from [L*r, L] for its "
            "--random-range-ratio r.")
        run.notes.append(run.length_distribution_note)
        return
    if not 0 <= r <= 1:
        run.length_distribution_note = f"random_range_ratio {r} is outside [0, 1]; the length range is unknown."
        run.notes.append(run.length_distribution_note)
        return
    parts = []
    for which, length, attr in (("Input", run.requested_input_len, "input_len_range"),
                                ("Output", run.requested_output_len, "output_len_range")):
        if length is None:
            continue
        lo, hi = max(int(length * r), 1), length
        setattr(run, attr, (lo, hi))
        mean = run.mean_input_tokens if which == "Input" else run.mean_output_tokens
        measured = f", measured mean {mean:.1f}" if mean is not None else ""
        if lo == hi:
            parts.append(f"{which} length fixed at {hi} tokens{measured}.")
        else:
            parts.append(f"{which} lengths were drawn uniformly from [{lo}, {hi}] tokens{measured}, "
                         f"so this is not a {hi}-token {which.lower()} run.")
    if parts:
        run.length_distribution_note = (
            " ".join(parts) + f" (SGLang's --random-range-ratio r draws lengths from [max(L*r, 1), L]; r was {r:g}.)")
        run.notes.append(run.length_distribution_note)


def _vllm_run(obj: dict[str, Any], raw: str, line: int | None, text: str) -> ImportedRun:
    run = ImportedRun(source_format=VLLM_BENCH_SERVE, source_line=line, original_text=text, original_record=raw)
    r = _Reader(obj, line, run.notes, run.nan_keys)
    _common(r, run)
    run.model_id = r.text("model_id")
    run.tokenizer_id = r.text("tokenizer_id")
    run.label = r.text("label")
    run.date = r.text("date")
    run.num_prompts = r.count("num_prompts")
    run.burstiness = r.number("burstiness")
    run.failed = r.count("failed")
    run.peak_output_throughput_tok_s = r.number("max_output_tokens_per_s")
    run.max_concurrent_requests = r.count("max_concurrent_requests")
    # Older vLLM wrote the key with a trailing colon; the newer name wins when both are present.
    goodput = r.number("request_goodput")
    old_goodput = r.number("request_goodput:")
    run.request_goodput_req_s = goodput if goodput is not None else old_goodput
    if goodput is None and old_goodput is not None:
        run.notes.append('request_goodput read from the older key "request_goodput:".')
    _counts_check(run, line)
    if run.failed is None and run.num_prompts is not None and run.completed is not None:
        run.failed = run.num_prompts - run.completed
        run.notes.append("failed is not in the file; computed as num_prompts - completed.")
    run.length_distribution_note = (
        "vLLM's result file does not record the requested input/output lengths; the measured means are "
        "total tokens / completed requests.")
    return _finish(r, run)


def _fixed_len(span: tuple[int, int] | None) -> int | None:
    return span[0] if span is not None and span[0] == span[1] else None


def _json_type(v: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(v), "a number")
