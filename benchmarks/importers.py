"""Import other harnesses' result files as runs in Ceiling's vocabulary, keeping the original text.

Supported: SGLang ``python -m sglang.bench_serving --output-file x.jsonl`` (one JSON object per
line, appended per run; older and newer key sets) and vLLM ``vllm bench serve --save-result``
(one JSON object, pretty-printed or not; ``--append-result`` writes one per line). A file of
either that is one JSON value is read as such: one object, pretty-printed or not (an SGLang line
passed through ``python -m json.tool``), or an array of objects, one run each in order, at the
line its object starts on and its place in the array (``item 2 (line 22)``). Pure
functions, no database; the caller stores :class:`ImportedRun` rows and the verbatim file.

Lines end at ``"\n"`` (a ``"\r"`` before it is part of the ending), as JSON counts them, and
nowhere else: U+2028, U+2029, U+0085, a form feed or a vertical tab is text a JSON string may
hold unescaped (``json.dumps(..., ensure_ascii=False)`` writes them so), not a line break. A
line of nothing but JSON white space (space, tab, ``"\r"``) is blank and skipped. Each run keeps
its line as the file has it, its line ending included (``original_record``). A UTF-8 byte order
mark at the start of the file (:data:`BOM`) is skipped when reading and kept in the original text.

One run's record is its JSON object (its line, its item of a JSON array, or the file that is one
object); :func:`record_digest` fingerprints it as canonical JSON (keys sorted, no white space,
numbers as Python reads them, every non-ASCII character escaped), so the same result has one
digest whatever file it is in, at whatever line, with whatever white space, line endings, key
order or byte order mark: SGLang appends each run to its output file, and the grown file is
imported again. The caller refuses or skips a record whose digest an imported run already has.

Times: neither harness records when a run started or ended. vLLM writes ``date``, the moment it
saved the result, as ``%Y%m%d-%H%M%S`` (``datetime.now().strftime(...)`` in ``vllm bench serve``):
the benchmarking host's local time, without a zone. :func:`result_date` reads it as that, an ISO
8601 local time with no offset (``2026-07-22T04:18:43``), never as UTC; a ``date`` in another form
gets a note and is not read. SGLang's ``bench_serving`` writes no date.

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
  (mean about 512), and the import says so instead of presenting a 1024-token run.
* vLLM's result file records no length argument. With ``--save-detailed`` it holds per-request
  arrays: ``input_lens``, each request's prompt length as the benchmark's tokenizer counted the
  prompt it built (every request sent, failed ones included), and ``output_lens``, the tokens
  each completed request *produced* (the server's usage count, else the generated text
  re-tokenized; 0 for a failed request), not the ``max_tokens`` it asked for. When all of an
  array's entries are equal the run has that length (the requests' input length, or the output
  length every completed request produced: what ``--ignore-eos`` with a fixed output length gives;
  without it, a cap every request reached looks the same, so the note says "produced"); when
  they differ the run is flagged ``variable_lengths`` with their shortest and longest
  (``input_lens_min_max``, ``output_lens_min_max``), which are observed, not a range the lengths
  were drawn from; without the arrays the lengths are unknown (``lengths_unknown``). An array
  that disagrees with the file's totals is not used (:func:`_vllm_lengths`). An SGLang random run
  without a usable ``random_range_ratio`` reads its arrays (``--output-details``) the same way;
  without them it is flagged ``range_ratio_unknown``: its lengths L are recorded, the range is not.
* Absent or null values stay None, never 0 (vLLM's ``"request_goodput": null``). vLLM's older key
  ``"request_goodput:"`` (trailing colon) is read as ``request_goodput``. Keys not mapped are listed
  in ``unmapped_keys`` and stay in the kept original text.
* Values that are not finite numbers: ``NaN`` (SGLang writes it for a statistic over no values,
  e.g. ``mean_ttft_ms`` of a run whose requests all failed), ``Infinity`` / ``-Infinity`` (what
  Python's ``json.dumps`` writes for an infinite float, e.g. a numpy rate over a zero duration)
  and a number too large for a 64-bit float (``1e400``, which parses as infinity) are all treated
  alike: None with a note naming the key and the value as written (``output_throughput was
  Infinity in the file; kept as null.``), listed in ``nan_keys`` or ``inf_keys``; except in
  ``completed`` and ``duration``, which a run cannot do without, where they are refused.
  ``request_rate`` is the exception the other way: vLLM writes ``Infinity`` (or ``"inf"``) for
  "all requests at once", read as ``request_rate_unbounded``.

Consistency checks (a file that fails one is refused, not imported with a note): the statistics
of each latency (TTFT, TPOT, ITL, E2E) must not decrease along min <= p50 (median) <= p90 <= p95
<= p99 <= max, over the ones present (a percentile is a non-decreasing function of its rank, by
definition; values within a relative 1e-9 count as equal, for float rounding); latencies (ms) and
throughputs (per second) are >= 0 and ``duration`` (s) is > 0 (a time or a rate cannot be
negative, and a run takes time); and ``completed + failed`` may not exceed ``num_prompts`` where the file has them (a
request is sent once and ends once). A check that needs a value which was itself refused is
skipped for that value. Also refused, as a file that disagrees with itself or a value no real run
has:

* a key given more than once in one object, the result object or any object nested in it (read
  with ``object_pairs_hook``; JSON readers silently keep one of the values), at the line it is
  given again and under its dotted path (``line 3.server_info.tp``; array items by index,
  ``errors[2].code``); the same key in two different objects is not repeated;
* a ``duration`` longer than :data:`MAX_DURATION_S` (30 days), a latency statistic longer than
  that in ms (:data:`MAX_LATENCY_MS`) and a count above :data:`MAX_COUNT` (2^53): ``1e308`` is a
  finite number, but no run lasted 10^300 years;
* an ``output_throughput`` (tokens/s) off ``total_output_tokens`` / ``duration`` by more than 1 %
  of it plus 0.01 tokens/s (:data:`THROUGHPUT_TOLERANCE`, :data:`THROUGHPUT_ROUNDING_TOK_S`),
  where all three are finite numbers: both harnesses compute it as exactly that quotient;
* a mean E2E (``mean_e2e_latency_ms``, ``mean_e2el_ms``; ms) that puts more requests in flight than
  ``max_concurrency`` c allows: by Little's law (L = lambda W, mean in flight = throughput x mean
  E2E) the mean in flight is ``completed`` x mean E2E / ``duration``, and a run held to c requests
  at once averages at most c, so ``completed`` x mean E2E / 1000 <= c x ``duration`` (in
  request-seconds; failed requests held slots too, so the bound is exact), allowed 1 % of c over
  it (:data:`LITTLES_LAW_TOLERANCE`); refused at the mean E2E key, and skipped where the run had
  no bound (``max_concurrency`` null, absent or 0, which both harnesses read as none) or one of
  the four values is missing, not finite or refused;
* vLLM's ``max_concurrent_requests`` above ``completed``: vLLM counts the successful requests
  active within each one-second bucket of the run and writes the largest count, so it cannot
  exceed the requests that completed (:func:`_max_concurrent_check`). Above ``max_concurrency``
  it is kept, with a note: requests that end and start within one second add up in a bucket, so
  the count is not the most in flight at one instant and may exceed the cap;
* in :func:`import_results`, a later line whose keys say the other harness wrote it (it would be
  read in the first line's format), at the first such line.

Errors: :class:`ResultImportError` names the line and key (``line 3, key 'completed': ...``). The
file is read to its end before it is refused (or :data:`MAX_LINES_COUNTED_AFTER_CAP` lines past the
first problem not listed), and every problem found is reported at once, per line and key, as
``{"line 3.duration": [...], "file.output_throughput": [...]}``: the first
:data:`MAX_REPORTED_PROBLEMS`, then a count of the rest under ``file``. Arrays and objects nested
more than :data:`MAX_JSON_NESTING` levels deep are refused as JSON that cannot be read, at the
bracket that opens one level too many (``line 1: not valid JSON (nested more than 100 levels deep
at column 101)``).
"""
from __future__ import annotations

import datetime
import hashlib
import json
import math
import re
import sys
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from benchmarks.analysis import LatencyStats, SweepPoint
from benchmarks.sweeps import json_shown
from controlplane.drf_defaults import BOM
from controlplane.errors import InvalidInput
from controlplane.jsonsafe import query_text

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
# One run's record: its 1-based line (None for a file that is one JSON object), the object, the raw text.
Record = tuple[int | None, dict[str, Any], str]


# Sanity bounds: a value past one cannot come from a real run and is refused (a duration of
# 1e308 s is finite, yet no benchmark ran for 10^300 years). A run, and any request of it, lasts at
# most 30 days; a count (requests, tokens) is at most 2^53, the largest integer a 64-bit float (and
# so a browser's JSON reader) holds exactly.
MAX_DURATION_S = 30 * 24 * 3600
MAX_LATENCY_MS = MAX_DURATION_S * 1000
MAX_COUNT = 2**53
_MAX_DURATION = (MAX_DURATION_S, f"{MAX_DURATION_S} (30 days)")
_MAX_LATENCY = (MAX_LATENCY_MS, f"{MAX_LATENCY_MS} (30 days)")
# output_throughput (tokens/s) may differ from total_output_tokens / duration by this fraction of
# the quotient plus this many tokens/s (a value written with two decimals) before the file is
# refused as disagreeing with itself; both harnesses compute it as exactly that quotient.
THROUGHPUT_TOLERANCE = 0.01
THROUGHPUT_ROUNDING_TOK_S = 0.01
# A closed-loop run bounded at ``max_concurrency`` c never has more than c requests in flight, so
# the in-flight count integrated over the run, completed x mean E2E (request-seconds; failed
# requests only add to it), is at most c x duration. That is Little's law, L = lambda W: mean in
# flight = throughput (completed / duration) x mean E2E <= c. The mean may exceed c by this
# fraction of c before the file is refused, for float rounding and the per-request clocks (both
# harnesses time each request and the run with separate perf_counter() readings).
LITTLES_LAW_TOLERANCE = 0.01

# At most this many problems of one file are listed; the rest are counted (a file of a million bad
# lines must give a readable answer, not a million messages).
MAX_REPORTED_PROBLEMS = 50
# Lines still read, only to count problems, after the first one not listed. Counting every line of
# a 16 MiB file of bad lines took over two minutes on the 2-core development host (each line is
# parsed and checked like a run); 10,000 more lines take one or two seconds there and give an
# exact count for all but such files.
MAX_LINES_COUNTED_AFTER_CAP = 10_000


def empty_upload_message(name: str) -> str:
    """What an import says of an uploaded file of 0 bytes named ``name`` (in quotes, cut to 40
    characters, as a refused form value is quoted): ``the file 'bench.json' is empty (0 bytes)``.
    The API and the import form refuse such an upload with it before reading it."""
    return f"the file {query_text(name)} is empty (0 bytes)"


class _ItemLine(int):
    """The line a result object of a JSON array starts on, remembering its 1-based place in the
    array (``item``): two objects of a compact array start on one line."""

    item: int

    def __new__(cls, line: int, item: int) -> _ItemLine:
        obj = super().__new__(cls, line)
        obj.item = item
        return obj

    def __reduce__(self) -> tuple[type[_ItemLine], tuple[int, int]]:
        return _ItemLine, (int(self), self.item)  # copied with the run (dataclasses.asdict)


def _where(line: int | None) -> str:
    """Where a record is, in words: ``line 3``, ``item 2 (line 14)`` for an array's object,
    ``file`` for a file that is one object."""
    if line is None:
        return "file"
    item = getattr(line, "item", None)
    return f"item {item} (line {int(line)})" if item is not None else f"line {line}"


@dataclass(frozen=True)
class ImportProblem:
    """One reason a result file cannot be imported: ``line`` (1-based, None for the whole file),
    ``key`` (None when the line or file as a whole is wrong) and the message."""

    message: str
    line: int | None = None
    key: str | None = None

    @property
    def path(self) -> str:
        """The API's field path: ``line 3.completed``, ``file.duration``, ``line 2``, ``file``;
        a result object of a JSON array is its item and the line it starts on
        (``item 2 (line 14).duration``)."""
        where = _where(self.line)
        return f"{where}.{self.key}" if self.key is not None else where

    def __str__(self) -> str:
        where = [_where(self.line)]
        if self.key is not None:
            where.append(f"key '{self.key}'")
        return f"{', '.join(where)}: {self.message}"


class ResultImportError(InvalidInput):
    """A result file that cannot be imported: not JSON, not an object, a wrong type or an
    impossible value for a known key, statistics out of order, or a missing ``completed`` /
    ``duration``. Maps to HTTP 400 with ``errors`` ``{path: [messages]}`` (paths as
    :attr:`ImportProblem.path`: ``line 3.completed``, ``file.duration``) holding every problem
    found, in file order: at most :data:`MAX_REPORTED_PROBLEMS`, then ``"… and N more …"`` under
    ``file``. ``problems`` lists the reported ones, ``omitted`` counts the others and
    ``stopped_at`` is the line where counting them stopped (None when the whole file was read);
    ``line``, ``key`` and ``message`` are the first problem's; ``str()`` has a line per problem."""

    def __init__(self, message: str, *, line: int | None = None, key: str | None = None) -> None:
        self._set([ImportProblem(message, line, key)], omitted=0, stopped_at=None)

    @classmethod
    def of(cls, problems: Iterable[ImportProblem], *, omitted: int = 0,
           stopped_at: int | None = None) -> ResultImportError:
        """One error reporting ``problems`` (at least one), ``omitted`` more not listed, and the
        line ``stopped_at`` where counting stopped, if it did."""
        exc = cls.__new__(cls)
        exc._set(list(problems), omitted=omitted, stopped_at=stopped_at)
        return exc

    def _set(self, problems: list[ImportProblem], *, omitted: int, stopped_at: int | None) -> None:
        first = problems[0]
        self.problems, self.omitted, self.stopped_at = problems, omitted, stopped_at
        self.line, self.key, self.message = first.line, first.key, first.message
        errors: dict[str, list[str]] = {}
        for problem in problems:
            errors.setdefault(problem.path, []).append(problem.message)
        more = ""
        if omitted and stopped_at is not None:
            more = (f"… and at least {omitted:,} more problem{'s' if omitted != 1 else ''}; counting stopped at "
                    f"line {stopped_at:,} (the first {len(problems)} are listed)")
        elif omitted:
            more = (f"… and {omitted:,} more problem{'s' if omitted != 1 else ''} in this file (the first "
                    f"{len(problems)} are listed)")
        if more:
            errors.setdefault("file", []).append(more)
        InvalidInput.__init__(self, errors)
        self.args = ("\n".join([str(p) for p in problems] + ([more] if more else [])),)

    def __str__(self) -> str:
        return str(self.args[0])


class _Problems:
    """The problems of one file, added in file order (whole-file ones first, then line by line):
    the first :data:`MAX_REPORTED_PROBLEMS` are kept, later ones only counted, and
    :meth:`keep_reading` ends the reading :data:`MAX_LINES_COUNTED_AFTER_CAP` lines after the
    first problem not kept."""

    def __init__(self) -> None:
        self.listed: list[ImportProblem] = []
        self.unlisted = 0
        self.stopped_at: int | None = None
        self._first_unlisted_line: int | None = None

    def add(self, message: str, *, line: int | None = None, key: str | None = None) -> None:
        if len(self.listed) < MAX_REPORTED_PROBLEMS:
            self.listed.append(ImportProblem(message, line, key))
            return
        self.unlisted += 1
        if self._first_unlisted_line is None:
            self._first_unlisted_line = line or 0

    def keep_reading(self, line: int) -> bool:
        """Whether to read ``line``; False (remembering where) once the count has gone far enough."""
        if self._first_unlisted_line is not None and line - self._first_unlisted_line > MAX_LINES_COUNTED_AFTER_CAP:
            self.stopped_at = line
            return False
        return True

    def clear(self) -> None:
        """Forget everything collected (for a problem that replaces them all)."""
        self.listed.clear()
        self.unlisted = 0
        self.stopped_at = self._first_unlisted_line = None

    def raise_if_any(self) -> None:
        """Raise :class:`ResultImportError` with everything collected; nothing when empty."""
        if self.listed:
            raise ResultImportError.of(self.listed, omitted=self.unlisted, stopped_at=self.stopped_at)


class _NonFinite(float):
    """A float from the file that is not finite (NaN, ±Infinity, or a number beyond a 64-bit float
    such as ``1e400``), remembering how the file wrote it, for messages."""

    written: str

    def __new__(cls, value: float, written: str) -> _NonFinite:
        obj = super().__new__(cls, value)
        obj.written = written
        return obj

    def __repr__(self) -> str:
        return self.written


_CONSTANTS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# More digits than this cannot be a finite double (1.8e308 has 309); such an int also need not be
# parsed at all, and Python refuses to parse one of more than 4300 digits.
_MAX_FINITE_DIGITS = 309


def _parse_float(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(value, text)


def _parse_int(text: str) -> int | float:
    digits = text.lstrip("-")
    if len(digits) <= _MAX_FINITE_DIGITS:
        value = int(text)
        if abs(value) <= sys.float_info.max:
            return value
    return _NonFinite(-math.inf if text.startswith("-") else math.inf, text)


class _Object(dict):
    """A JSON object of the file in which some key is given more than once: the last value wins, as
    in any JSON reader, and ``repeated`` maps each such key to all its values in file order (the
    file disagrees with itself about that key, so it is refused)."""

    repeated: dict[str, list[Any]]


# The objects with a repeated key that :func:`_loads` met in the text it is reading, when its
# caller asked for them: a context variable, so two threads reading two files keep theirs apart.
_REPEATS: ContextVar[list[_Object] | None] = ContextVar("_REPEATS", default=None)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: a plain dict, or an :class:`_Object` remembering the repeated keys
    (also added to the list :func:`_loads` was given, when it was given one)."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: dict[str, list[Any]] = {}
    for key, value in pairs:
        seen.setdefault(key, []).append(value)
    out = _Object(obj)
    out.repeated = {key: values for key, values in seen.items() if len(values) > 1}
    found = _REPEATS.get()
    if found is not None:
        found.append(out)
    return out


_DECODER = json.JSONDecoder(parse_float=_parse_float, parse_int=_parse_int, object_pairs_hook=_object,
                            parse_constant=lambda name: _NonFinite(_CONSTANTS[name], name))


# Deepest nesting of arrays and objects a result file may have. The harnesses write at most three
# levels (vLLM's per-request ``itls`` is a list of lists in the result object). Python's JSON
# parser recurses once per level and raises RecursionError (not a JSONDecodeError) some hundreds of
# levels down, the exact depth depending on the stack already in use; a value that did parse that
# deep could still overflow the stack of whatever walks or stores it next. A fixed limit far above
# any real file and far below the parser's makes the refusal the same wherever it is read.
MAX_JSON_NESTING = 100

# A JSON string (escapes included) or one bracket: what :func:`_too_deep_at` needs to follow the
# nesting without counting brackets inside strings.
_NESTING_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)


class _TooDeep(json.JSONDecodeError):
    """JSON nested more than :data:`MAX_JSON_NESTING` levels deep, reported as the parser reports
    a syntax error (``msg``, ``lineno``, ``colno`` of the bracket that opens one level too many), so
    every place that reads a line names it like any other JSON that cannot be read."""

    def __init__(self, text: str, pos: int) -> None:
        super().__init__(f"nested more than {MAX_JSON_NESTING} levels deep", text, pos)


def _too_deep_at(text: str) -> int | None:
    """Index in ``text`` of the first ``[`` or ``{`` (outside strings) that opens level
    :data:`MAX_JSON_NESTING` + 1; None when the nesting stays within the limit. A text with no
    more brackets than the limit is not scanned."""
    if text.count("[") + text.count("{") <= MAX_JSON_NESTING:
        return None
    depth = 0
    for match in _NESTING_TOKEN.finditer(text):
        token = match.group()
        if token == "[" or token == "{":
            depth += 1
            if depth > MAX_JSON_NESTING:
                return match.start()
        elif token == "]" or token == "}":
            depth -= 1
    return None


def _loads(text: str, repeats: list[_Object] | None = None) -> Any:
    """``json.loads`` that keeps how a non-finite number was written (:class:`_NonFinite`) and
    turns an integer beyond a double into one, instead of failing on it. Every object of the text
    with a key given more than once, at any depth, is an :class:`_Object`, and is added to
    ``repeats`` when given (in the order the parser closes them: inner objects first). Raises
    :class:`json.JSONDecodeError` for text that is not JSON, and its subclass :class:`_TooDeep`
    for JSON nested more than :data:`MAX_JSON_NESTING` levels deep, whether or not Python's
    parser could follow it (where it cannot, it raises RecursionError, caught here)."""
    token = _REPEATS.set(repeats)
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise _TooDeep(text, _too_deep_at(text) or 0) from None
    finally:
        _REPEATS.reset(token)
    deep = _too_deep_at(text)
    if deep is not None:
        raise _TooDeep(text, deep)
    return value


def _written(value: float) -> tuple[str, str]:
    """A non-finite value as the file wrote it (shortened past 24 characters) and, for a number
    too large rather than a literal, the reason: ``("Infinity", "")``,
    ``("1e400", " (too large for a 64-bit float)")``."""
    text = getattr(value, "written", None) or ("NaN" if math.isnan(value) else
                                               "Infinity" if value > 0 else "-Infinity")
    short = text if len(text) <= 24 else f"{text[:12]}… ({len(text)} characters)"
    return short, "" if text in _CONSTANTS else " (too large for a 64-bit float)"


@dataclass
class ImportedRun:
    """One benchmark run read from another harness's file, in Ceiling's field names and units.

    Counts are requests or tokens; ``duration_s`` seconds; throughputs per second as named; latency
    summaries are dicts in ms with keys ``mean``, ``std``, ``p50``, ``p90``, ``p99`` always present
    (None when the file lacks them) plus any other statistic the file had (``p95``, ``p99.9``,
    ``max``). ``mean_input_tokens`` / ``mean_output_tokens`` are totals / ``completed``.
    ``requested_input_len`` / ``requested_output_len`` are the harness's length arguments and
    ``input_len_range`` / ``output_len_range`` the inclusive range the lengths were drawn from
    (None when unknown); ``input_lens_min_max`` / ``output_lens_min_max`` the shortest and longest
    length of the file's per-request arrays (vLLM's ``input_lens`` and the completed requests'
    ``output_lens``, tokens; None without them): what the requests had, not a range they were drawn
    from; ``length_distribution_note`` says it in words. ``original_text`` is the
    whole file verbatim and ``original_record`` this run's own line verbatim, its line ending
    included (for a file that is one object: the file less leading and trailing white space);
    ``source_line`` its 1-based line. ``notes`` record every derived or dropped value;
    ``nan_keys`` the file's keys whose value was NaN and ``inf_keys`` those whose value was
    ±Infinity or too large for a 64-bit float, mapped to the value as written (all kept as None).
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
    input_lens_min_max: tuple[int, int] | None = None
    output_lens_min_max: tuple[int, int] | None = None
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
    inf_keys: dict[str, str] = field(default_factory=dict)

    def as_dict(self, *, with_original: bool = False) -> dict[str, Any]:
        """JSON-ready dict; the (possibly large) original text only when ``with_original``."""
        out = asdict(self)
        if not with_original:
            out.pop("original_text")
            out.pop("original_record")
        return out

    def as_sweep_point(self, *, num_gpus: int | None = None) -> SweepPoint:
        """This run as a :class:`SweepPoint` for :func:`benchmarks.analysis.ceiling_analyse`.

        Lengths are set only when every request had exactly that length; otherwise they are None
        with the flag ``variable_lengths`` (drawn from a range, or per-request lengths that differ)
        or ``lengths_unknown`` (not recorded; ``range_ratio_unknown`` for an SGLang random run that records
        its lengths but no usable ``random_range_ratio``), so the run is never grouped with fixed-length runs. Raises
        :class:`ResultImportError` naming the run's line when the file had no output throughput
        (absent, NaN or infinite) and none could be computed from ``total_output_tokens`` /
        ``duration``.
        """
        if self.output_throughput_tok_s is None:
            keys = ("output_throughput", "total_output_tokens", "duration")
            nan = [k for k in keys if k in self.nan_keys]
            said = [f"{' and '.join(nan)} {'is' if len(nan) == 1 else 'are'} NaN"] if nan else []
            said += [f"{k} is {self.inf_keys[k]}" for k in keys if k in self.inf_keys]
            why = f"{' and '.join(said)} in the file, so " if said else "is missing and "
            raise ResultImportError(f"{why}no output throughput can be read or computed (total_output_tokens / "
                                    "duration); a run needs one", line=self.source_line, key="output_throughput")
        flags: list[str] = []
        in_len = _fixed_len(self.input_len_range)
        out_len = _fixed_len(self.output_len_range)
        known_in = self.input_len_range is not None or self.input_lens_min_max is not None
        known_out = self.output_len_range is not None or self.output_lens_min_max is not None
        if not (known_in and known_out):
            # An SGLang random run records its lengths L but not always the r of [L*r, L] they were
            # drawn from: only the range is unknown, and the flag says so.
            ratio_unknown = (self.source_format == SGLANG_BENCH_SERVING and self.requested_input_len is not None
                             and self.requested_output_len is not None
                             and (self.range_ratio is None or not 0 <= self.range_ratio <= 1))
            flags.append("range_ratio_unknown" if ratio_unknown else "lengths_unknown")
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


def record_digest(record: str) -> str:
    """SHA-256 (hex) of one run's record (its JSON object as the file has it: a line, with its line
    ending and a byte order mark if any, an array's item, a file that is one object) read as JSON
    and written canonically: keys sorted, no white space, ASCII only (``json.dumps(...,
    sort_keys=True, separators=(",", ":"))``), numbers as Python reads them (``1.50`` and ``1.5``
    alike; ``NaN``, ``Infinity`` and ``1e400``, which reads as infinity, as ``NaN`` and
    ``Infinity``). A text that is an array of exactly one object is that object (a run imported
    from such a file kept the whole file). "" for a text that is not such JSON."""
    try:
        value = json.loads(record.removeprefix(BOM))
    except (ValueError, RecursionError):
        return ""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, dict):
        return ""
    try:
        canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    except (ValueError, RecursionError):
        return ""
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


_VLLM_DATE = re.compile(r"(\d{4})(\d{2})(\d{2})-(\d{2})(\d{2})(\d{2})")


def result_date(date: Any) -> str | None:
    """vLLM's ``date`` (``20260722-041843``: ``%Y%m%d-%H%M%S``, the benchmarking host's local time,
    no zone) as an ISO 8601 local time without an offset (``2026-07-22T04:18:43``), since the zone
    is not recorded; None for anything else (absent, another form, no such day or time)."""
    match = _VLLM_DATE.fullmatch(date) if isinstance(date, str) else None
    if match is None:
        return None
    try:
        return datetime.datetime(*(int(g) for g in match.groups())).isoformat()
    except ValueError:
        return None


def detect_format(text: str) -> SourceFormat:
    """Which harness wrote ``text``: ``"sglang-bench-serving"`` or ``"vllm-bench-serve"``.

    Decided from keys only one of them writes (vLLM: ``endpoint_type``, ``model_id``, ``*_e2el_ms``,
    ``request_goodput``; SGLang: ``*_e2e_latency_ms``, ``random_range_ratio``,
    ``total_output_tokens_retokenized``) in the whole text as one JSON object, else in its first
    line that is a JSON object. Raises :class:`ResultImportError` when neither matches, naming the
    lines before it that are not JSON objects.
    """
    problems = _Problems()
    first = next(_records(text, problems), None)
    fmt = _detect(first, problems) if first is not None else None
    problems.raise_if_any()  # a file with no object line, or an unknown first record, has problems
    return fmt  # type: ignore[return-value]


def _format_of(obj: dict[str, Any]) -> SourceFormat | None:
    """The format of one record by its keys (vLLM's markers first); None when neither matches."""
    keys = set(obj)
    if keys & _VLLM_MARKERS:
        return VLLM_BENCH_SERVE
    if keys & _SGLANG_MARKERS:
        return SGLANG_BENCH_SERVING
    return None


_FORMAT_NAME = {SGLANG_BENCH_SERVING: "SGLang bench_serving", VLLM_BENCH_SERVE: "vLLM bench serve"}


# Keys both harnesses write (besides the ``<stat>_<metric>_ms`` statistics of TTFT, TPOT and ITL),
# and keys one of them writes that do not tell it apart for sure (other tools write them too):
# a record with only these is a result of one of them, short of the keys that say which.
_SHARED_KEYS = {"backend", "request_rate", "max_concurrency", "duration", "completed", "total_input_tokens",
                "total_output_tokens", "request_throughput", "input_throughput",
                "output_throughput"} | _PER_REQUEST_KEYS
_SGLANG_ONLY_KEYS = {"tag", "dataset_name", "concurrency", "random_output_len", "fixed_output_len"}
_VLLM_ONLY_KEYS = {"date", "label", "num_prompts", "failed", "max_output_tokens_per_s"}
# What each harness writes in every result that says it wrote it (:func:`_format_of` reads them).
_ALWAYS_MARKERS = {SGLANG_BENCH_SERVING: ("mean_e2e_latency_ms", "median_e2e_latency_ms"),
                   VLLM_BENCH_SERVE: ("model_id", "tokenizer_id")}
_RUN_NEEDS = ("completed", "duration")


def _shared_stat_key(key: str) -> bool:
    match = _STAT_KEY.match(key)
    return match is not None and match.group(2) in ("ttft", "tpot", "itl")


def _unknown_format(obj: dict[str, Any]) -> str:
    """Why a record with no key only one harness writes (:func:`_format_of`) is refused: with
    none of their keys at all, that it is no result of either; else the keys it lacks, for the
    harness its keys point to (by keys only that one writes), or for each when they fit both."""
    keys = sorted(obj)
    sglang = [k for k in keys if k in _SGLANG_ONLY_KEYS]
    vllm = [k for k in keys if k in _VLLM_ONLY_KEYS]
    theirs = [k for k in keys if k in _SHARED_KEYS or _shared_stat_key(k) or k in _SGLANG_ONLY_KEYS
              or k in _VLLM_ONLY_KEYS]
    if not theirs:
        return "not a SGLang bench_serving or vLLM bench serve result (no key either writes)"
    needs = [k for k in _RUN_NEEDS if obj.get(k) is None]
    shown = ", ".join(theirs)

    def lacks(fmt: str) -> str:
        return " and ".join(_ALWAYS_MARKERS[fmt])

    if sglang and not vllm or vllm and not sglang:
        fmt = SGLANG_BENCH_SERVING if sglang else VLLM_BENCH_SERVE
        missing = [*_ALWAYS_MARKERS[fmt], *needs]
        missing = f"{', '.join(missing[:-1])} and {missing[-1]}"
        return (f"an incomplete {_FORMAT_NAME[fmt]} result: it has keys {_FORMAT_NAME[fmt]} writes ({shown}) but "
                f"lacks {missing}, which every {_FORMAT_NAME[fmt]} result has")
    also = f"; either needs {' and '.join(needs)} too" if needs else ""
    return (f"an incomplete result: its keys ({shown}) are ones both SGLang bench_serving and vLLM bench serve "
            f"write, and none tells which wrote it: it lacks {lacks(SGLANG_BENCH_SERVING)}, which every "
            f"SGLang bench_serving result has, or {lacks(VLLM_BENCH_SERVE)}, which every vLLM bench serve "
            f"result has{also}")


def _detect(record: Record, problems: _Problems) -> SourceFormat | None:
    """The format of one record by its keys; None, with the problem added (:func:`_unknown_format`),
    when neither matches."""
    fmt = _format_of(record[1])
    if fmt is None:
        problems.add(_unknown_format(record[1]), line=record[0])
    return fmt


def import_results(text: str) -> list[ImportedRun]:
    """Import any supported file: the format as :func:`detect_format` decides it from the first
    record, then one :class:`ImportedRun` per run. The file is read to its end before anything is
    refused: :class:`ResultImportError` reports the problems of every line and key at once, among
    them the first later line that another harness wrote (by its keys, as the first line's
    format is decided: ``line 4: a vLLM bench serve result, unlike line 1 (SGLang
    bench_serving); ...``). A line with neither harness's keys is read in the first line's format."""
    problems = _Problems()
    records = _records(text, problems)
    first = next(records, None)
    fmt = _detect(first, problems) if first is not None else None
    if fmt is None:
        problems.raise_if_any()
    if fmt == SGLANG_BENCH_SERVING and first is not None and _one_line_object(text, first):
        records, first = _sglang_lines(text, problems)
    make = _sglang_run if fmt == SGLANG_BENCH_SERVING else _vllm_run
    runs = [make(obj, raw, line, text, problems) for line, obj, raw in ([first] if first else [])]
    mixed = False
    for line, obj, raw in records:
        other = _format_of(obj)
        if not mixed and other is not None and other != fmt and first is not None:
            # Read with the first line's format, its keys would mean other things (or nothing):
            # refused at the first such line, once.
            mixed = True
            problems.add(f"a {_FORMAT_NAME[other]} result, unlike {_where(first[0])} ({_FORMAT_NAME[fmt]}); a "
                         "file is read in its first line's format, so it must hold one harness's results: split it",
                         line=line)
        runs.append(make(obj, raw, line, text, problems))
    problems.raise_if_any()
    return runs


def import_sglang_bench_serving(text: str) -> list[ImportedRun]:
    """Import a SGLang ``bench_serving`` JSONL file: one run per non-empty line, in file order.

    Each run keeps the whole file (``original_text``) and its own line (``original_record``).
    Raises :class:`ResultImportError` naming every line (and key) with invalid JSON, a non-object
    line, a wrongly typed or impossible value of a known key, or no ``completed`` / ``duration``.
    """
    problems = _Problems()
    records = _records(text, problems)
    first = next(records, None)
    if first is not None and _one_line_object(text, first):
        records, first = _sglang_lines(text, problems)
    runs = [_sglang_run(obj, raw, line, text, problems) for line, obj, raw in ([first] if first else [])]
    runs += [_sglang_run(obj, raw, line, text, problems) for line, obj, raw in records]
    problems.raise_if_any()
    return runs


def _one_line_object(text: str, first: Record) -> bool:
    """Whether ``first``, the record :func:`_records` read first, is a file that is one JSON object
    on one line (blank lines around it aside), which SGLang, writing JSON lines, numbers line N."""
    return first[0] is None and "\n" not in first[2]


def _sglang_lines(text: str, problems: _Problems) -> tuple[Iterator[Record], Record | None]:
    """``text``, one JSON object on one line, read again as JSON lines (:func:`_lines`): the
    records and the first of them. Its problems so far (a repeated key) are found again, with
    that line."""
    problems.clear()
    records = _lines(text, problems)
    return records, next(records, None)


def import_vllm_bench_serve(text: str) -> ImportedRun:
    """Import one vLLM ``bench serve --save-result`` JSON object (pretty-printed or on one line).

    Reads both ``request_goodput`` and the older ``"request_goodput:"`` key; null stays None.
    Raises :class:`ResultImportError` for invalid JSON, several objects (use :func:`import_results`
    for an ``--append-result`` file), or naming every wrongly typed or impossible value of a known
    key and a missing ``completed`` / ``duration``.
    """
    problems = _Problems()
    records = list(_records(text, problems))
    problems.raise_if_any()
    if len(records) != 1:
        raise ResultImportError(f"{len(records)} result objects; import_results reads one run per line",
                                line=records[1][0])
    line, obj, raw = records[0]
    run = _vllm_run(obj, raw, line, text, problems)
    problems.raise_if_any()
    return run


# --- parsing --------------------------------------------------------------------------------------


# The importers skip a byte order mark (BOM) at the start of a file; the stored original text
# keeps it, so the file downloads byte for byte and its SHA-256 is the file's.

# What JSON counts as white space (RFC 8259): a line of nothing else is blank. ``str.strip()``
# would also take U+2028, U+0085, a form feed and others, which JSON allows unescaped only
# inside strings.
_JSON_SPACE = " \t\r\n"


def _records(text: str, problems: _Problems) -> Iterator[Record]:
    """The file as one JSON object (line None), else its JSON lines (:func:`_lines`). A text whose
    first line is not JSON and that has no line that is a JSON object gets one problem, where
    the parser stopped in the whole text: a pretty-printed object with one typo would otherwise
    get a complaint for each of its lines. A leading UTF-8 byte order mark (:data:`BOM`) is not
    read as JSON (the single object's record leaves it out; the caller keeps it in the original
    text). Raises at once for an empty file (nothing but JSON white space, after a byte order
    mark if any) or a whole text that is JSON but not an object."""
    body = text.removeprefix(BOM)
    if not body.strip(_JSON_SPACE):
        raise ResultImportError("the file is empty")
    repeats: list[_Object] = []
    try:
        whole = _loads(body, repeats)
    except json.JSONDecodeError as exc:
        whole_error = exc
    else:
        if isinstance(whole, list):
            return _array_items(whole, repeats, body, problems)
        if not isinstance(whole, dict):
            raise ResultImportError(f"expected a JSON object or an array of them, got {_json_type(whole)}")
        _repeated_keys(whole, repeats, None, problems, text=body)
        return iter([(None, whole, body.strip(_JSON_SPACE))])
    return _lines(text, problems, whole_error=whole_error)


def _array_items(items: list[Any], repeats: list[_Object], body: str, problems: _Problems) -> Iterator[Record]:
    """The result objects of ``body``, a file that is one JSON array (``items``, as parsed, with
    ``repeats`` its objects with a key given twice), in order: each at the line its object starts
    on, remembering its place in the array (:class:`_ItemLine`), with its own text as the file
    has it. An item that is not an object is a problem at that item; an empty array is refused."""
    if not items:
        raise ResultImportError("the file is an empty JSON array: it holds no result object")
    for number, (item, (start, end)) in enumerate(zip(items, _array_spans(body), strict=True), start=1):
        line = _ItemLine(body.count("\n", 0, start) + 1, number)
        if not isinstance(item, dict):
            problems.add(f"expected a JSON object, got {_json_type(item)}", line=line)
            continue
        _repeated_keys(item, repeats, line, problems)
        yield line, item, body[start:end]


def _array_spans(body: str) -> list[tuple[int, int]]:
    """Where each item of ``body``, valid JSON that is one array, starts and ends (offsets of its
    first character and just past its last): between the array's brackets and commas, JSON
    white space around it left out."""
    cuts: list[int] = []  # the array's own "[", each comma between its items, its "]"
    depth = 0
    for match in _PATH_TOKEN.finditer(body):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth == 1:
                cuts.append(match.start())
        elif token in "]}":
            depth -= 1
            if depth == 0:
                cuts.append(match.start())
        elif token == "," and depth == 1:
            cuts.append(match.start())
    spans = []
    for before, after in zip(cuts, cuts[1:]):
        start, end = before + 1, after
        while start < end and body[start] in _JSON_SPACE:
            start += 1
        while end > start and body[end - 1] in _JSON_SPACE:
            end -= 1
        spans.append((start, end))
    return spans


def _split_lines(text: str) -> Iterator[tuple[int, str, str]]:
    """``(line, content, raw)`` for each line of ``text``, 1-based: lines end at ``"\n"`` only,
    ``raw`` is the line as the file has it, its ``"\n"`` or ``"\r\n"`` included (none on a last
    line without one), and ``content`` the same without that ending. ``str.splitlines()`` would
    also end a line at U+2028, U+2029, U+0085, a form feed and other characters that a JSON
    string may hold unescaped (``json.dumps(..., ensure_ascii=False)`` writes them as they are),
    cutting one result in two; JSON's own line numbers count ``"\n"`` alone too. The raw lines,
    joined, give back ``text``."""
    parts = text.split("\n")
    last = len(parts) - 1
    for index, part in enumerate(parts):
        if index == last and not part:
            return  # the text ended with a line break: no further line
        raw = part + "\n" if index < last else part
        yield index + 1, part[:-1] if part.endswith("\r") else part, raw


def _lines(text: str, problems: _Problems, *, whole_error: json.JSONDecodeError | None = None) -> Iterator[Record]:
    """Yield ``(line, object, raw line)`` for each non-blank line (:func:`_split_lines`; the raw
    line with its line ending, as the file has it) that is a JSON object, adding every other
    non-blank line to ``problems``, until :meth:`_Problems.keep_reading` says stop. With
    ``whole_error`` (the text's own parse error), a text that yields nothing and whose first
    line is not JSON gets that one error instead of one per line. A byte order mark (:data:`BOM`)
    at the start of line 1 is not read as JSON; the raw line keeps it, so the raw lines, joined,
    still give back ``text``. Raises at the end for a text with no non-blank line."""
    first: str | None = None
    yielded = False
    for number, content, raw in _split_lines(text):
        if number == 1:
            content = content.removeprefix(BOM)  # the file's byte order mark, not the line's JSON
        if not content.strip(_JSON_SPACE):
            continue
        if not problems.keep_reading(number):
            break
        first = content if first is None else first
        repeats: list[_Object] = []
        try:
            obj = _loads(content, repeats)
        except json.JSONDecodeError as exc:
            problems.add(f"not valid JSON ({exc.msg} at column {exc.colno})", line=number)
            continue
        if not isinstance(obj, dict):
            problems.add(f"expected a JSON object, got {_json_type(obj)}", line=number)
            continue
        _repeated_keys(obj, repeats, number, problems)
        yielded = True
        yield number, obj, raw
    if first is None:
        raise ResultImportError("the file is empty")
    if whole_error is not None and not yielded and not _is_json(first):
        problems.clear()
        problems.add(f"not valid JSON ({whole_error.msg} at column {whole_error.colno})", line=whole_error.lineno)


Path = tuple[str | int, ...]


def _dotted(path: Path) -> str:
    """A key's path in words: keys joined by dots, array indices in brackets
    (``server_info.args.tp``, ``errors[2].code``)."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _nested_paths(obj: dict[str, Any], repeats: list[_Object]) -> list[tuple[Path, _Object]]:
    """The path of each object of ``repeats`` inside ``obj`` (not ``obj`` itself), in file order.
    Walks the values only until every one is found, and not at all when there is none."""
    wanted = {id(o) for o in repeats if o is not obj}
    found: list[tuple[Path, _Object]] = []
    stack: list[tuple[Path, Any]] = [((), obj)]
    while stack and len(found) < len(wanted):
        path, value = stack.pop()
        if isinstance(value, dict):
            if id(value) in wanted:
                found.append((path, value))  # type: ignore[arg-type]
            children = [(path + (k,), v) for k, v in value.items()]
        elif isinstance(value, list):
            children = [(path + (i,), v) for i, v in enumerate(value)]
        else:
            continue
        stack.extend(reversed([(p, v) for p, v in children if isinstance(v, dict | list)]))
    return found


def _repeated_keys(obj: dict[str, Any], repeats: list[_Object], line: int | None, problems: _Problems, *,
                   text: str = "") -> None:
    """Add a problem for each key given more than once in ``obj``, a record of line ``line`` (None
    for a file that is one object, whose ``text`` then names the lines the key is on), or in any
    object nested in it (``repeats``, as :func:`_loads` found them), quoting its values (the first
    five): ``duration is given 2 times in one result object: 298.4, then 1e+308; ...``,
    ``server_info.tp is given 2 times in one object: 8, then 4; ...``. The key of
    a nested one is its dotted path (:func:`_dotted`); the same key in two different objects is
    not repeated. JSON readers keep one of the values silently, each its own choice, so the file
    does not say which is meant."""
    found = [((), obj)] if getattr(obj, "repeated", None) else []
    found += _nested_paths(obj, repeats) if any(o is not obj for o in repeats) else []
    for parent, holder in found:
        for key, values in holder.repeated.items():  # type: ignore[attr-defined]
            at, where = line, ""
            path = parent + (key,)
            if line is None:
                lines = _key_lines(text, path)
                if len(lines) == len(values):
                    at = lines[1]
                    where = f" (lines {', '.join(map(str, lines))})" if len(set(lines)) > 1 else ""
            shown = ", then ".join(json_shown(v) for v in values[:5]) + (", …" if len(values) > 5 else "")
            if parent:
                message = (f"{_dotted(path)} is given {len(values)} times in one object{where}: {shown}; an object "
                           "has one value per key, so the file disagrees with itself")
            else:
                message = (f"{key} is given {len(values)} times in one result object{where}: {shown}; a run has one "
                           "value per key, so the file disagrees with itself")
            problems.add(message, line=at, key=_dotted(path))


# A JSON string (escapes included), one bracket or a comma: what :func:`_key_lines` follows.
_PATH_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]', re.S)


def _key_lines(text: str, path: Path) -> list[int]:
    """The 1-based lines of ``text`` (one JSON object) on which the key at ``path`` (as
    :func:`_nested_paths` gives it; ``("duration",)`` for a key of the outermost object) is
    given, in file order."""
    lines: list[int] = []
    # One entry per open object or array: the key whose value is being read, or the array index.
    stack: list[list[Any]] = []
    for match in _PATH_TOKEN.finditer(text):
        token = match.group()
        if token == "{" or token == "[":
            stack.append([token, 0 if token == "[" else None])
        elif token == "}" or token == "]":
            if stack:
                stack.pop()
        elif token == ",":
            if stack and stack[-1][0] == "[":
                stack[-1][1] += 1
        elif stack and stack[-1][0] == "{" and text[match.end():].lstrip(_JSON_SPACE)[:1] == ":":
            key = json.loads(token)
            stack[-1][1] = key
            if len(stack) == len(path) and tuple(f[1] for f in stack) == path:
                lines.append(text.count("\n", 0, match.start()) + 1)
    return lines


def _is_json(raw: str) -> bool:
    try:
        _loads(raw)
    except json.JSONDecodeError:
        return False
    return True


class _Reader:
    """Typed access to one record's keys: remembers which were used, notes values that are not
    finite, and adds a wrong value to ``problems`` (reading it as None) instead of stopping, so
    every problem of the record is found. ``refused`` holds the keys already reported: a later read
    of such a key, or a check that needs it, adds nothing."""

    def __init__(self, obj: dict[str, Any], line: int | None, run: ImportedRun, problems: _Problems) -> None:
        self.obj = obj
        self.line = line
        self.run = run
        self.problems = problems
        self.used: set[str] = set()
        # A key given twice is reported where the line is read (_repeated_keys): no value of it
        # is read, and no check uses it.
        self.refused: set[str] = set(getattr(obj, "repeated", ()))

    def refuse(self, key: str, message: str) -> None:
        """Report ``message`` at ``key`` of this record, once per key."""
        if key not in self.refused:
            self.refused.add(key)
            self.problems.add(message, line=self.line, key=key)

    def _raw(self, key: str) -> Any:
        self.used.add(key)
        return self.obj.get(key)

    def number(self, key: str, *, minimum: float | None = None, above: float | None = None,
               at_most: tuple[float, str] | None = None, unit: str = "a number") -> float | None:
        """The key as a float; None when absent, null, refused, or not finite (NaN, ±Infinity,
        beyond a double: with a note and the key in ``nan_keys`` / ``inf_keys``). ``minimum`` /
        ``above`` bound it (inclusive / exclusive), ``at_most`` is an inclusive upper bound and
        its words (``(2592000, "2592000 (30 days)")``); ``unit`` names what it is in the refusal
        ("a duration in seconds")."""
        v = self._raw(key)
        if v is None or key in self.refused:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float):
            self.refuse(key, f"expected a number, got {json_shown(v)}")
            return None
        if not math.isfinite(v):
            written, why = _written(v)
            self.run.notes.append(f"{key} was {written} in the file{why}; kept as null.")
            if math.isnan(v):
                self.run.nan_keys.append(key)
            else:
                self.run.inf_keys[key] = written
            return None
        if minimum is not None and v < minimum:
            self.refuse(key, f"expected {unit} >= {minimum:g}, got {json_shown(v)}")
            return None
        if above is not None and not v > above:
            self.refuse(key, f"expected {unit} > {above:g}, got {json_shown(v)}")
            return None
        if at_most is not None and v > at_most[0]:
            self.refuse(key, f"expected {unit} of at most {at_most[1]}, got {json_shown(v)}")
            return None
        return float(v)

    def count(self, key: str) -> int | None:
        """The key as an int from 0 to :data:`MAX_COUNT`; None when absent, null, refused or not
        finite (as ``number``)."""
        raw = self.obj.get(key)
        if key not in self.refused and (isinstance(raw, bool) or (raw is not None and not isinstance(raw, int | float))):
            self._raw(key)
            self.refuse(key, f"expected a whole number >= 0, got {json_shown(raw)}")
            return None
        v = self.number(key)
        if v is None:
            return None
        if v < 0 or v != int(v):
            self.refuse(key, f"expected a whole number >= 0, got {json_shown(self.obj[key])}")
            return None
        if v > MAX_COUNT:
            self.refuse(key, f"expected a whole number of at most {MAX_COUNT} (2^53), got {json_shown(self.obj[key])}")
            return None
        return int(v)

    def text(self, key: str) -> str | None:
        v = self._raw(key)
        if v is None:
            return None
        if not isinstance(v, str):
            self.refuse(key, f"expected a string, got {json_shown(v)}")
            return None
        return v

    def rate(self, key: str) -> tuple[float | None, bool]:
        """A request rate (requests/s): a number >= 0, or ``Infinity`` (also a number too large
        for a double) or the string ``"inf"`` (vLLM) for unbounded."""
        v = self._raw(key)
        if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
            return None, True
        if isinstance(v, float) and v == math.inf:
            return None, True
        return self.number(key, minimum=0, unit="a rate in requests/s"), False

    def required(self, *keys: str) -> None:
        """Refuse each of ``keys`` that is absent, null or not a finite number."""
        for key in keys:
            value = self.obj.get(key)
            if value is None:
                self.refuse(key, "is missing; a run needs it")
            elif isinstance(value, float) and not math.isfinite(value):
                written, why = _written(value)
                self.refuse(key, f"{key} is {written}{why}; a run cannot be imported without a number here")


def _common(r: _Reader, run: ImportedRun) -> None:
    """Keys both harnesses write with the same meaning, then the statistics and derived values."""
    r.required("completed", "duration")
    run.backend = r.text("backend")
    run.dataset_name = r.text("dataset_name")
    run.concurrency = r.count("max_concurrency")
    run.request_rate_req_s, run.request_rate_unbounded = r.rate("request_rate")
    run.completed = r.count("completed")
    run.duration_s = r.number("duration", above=0, at_most=_MAX_DURATION, unit="a duration in seconds")
    run.total_input_tokens = r.count("total_input_tokens")
    run.total_output_tokens = r.count("total_output_tokens")
    run.request_throughput_req_s = r.number("request_throughput", minimum=0, unit="a rate in requests/s")
    run.input_throughput_tok_s = r.number("input_throughput", minimum=0, unit="a rate in tokens/s")
    run.output_throughput_tok_s = r.number("output_throughput", minimum=0, unit="a rate in tokens/s")
    run.total_token_throughput_tok_s = r.number("total_token_throughput", minimum=0, unit="a rate in tokens/s")
    if run.total_token_throughput_tok_s is None:
        # SGLang's newer name
        run.total_token_throughput_tok_s = r.number("total_throughput", minimum=0, unit="a rate in tokens/s")
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        setattr(run, metric, {k: None for k in _ALWAYS_STATS})
    sources: dict[tuple[str, str], str] = {}
    for key in list(r.obj):
        m = _STAT_KEY.match(key)
        if m:
            stat = "p50" if m.group(1) == "median" else m.group(1)
            getattr(run, _METRIC_FIELD[m.group(2)])[stat] = r.number(key, minimum=0, at_most=_MAX_LATENCY,
                                                                     unit="a latency in ms")
            sources[(_METRIC_FIELD[m.group(2)], stat)] = key
    _percentiles_check(run, sources, r)
    _output_needs_completions(run, r)
    _output_throughput_check(run, r)
    _littles_law_check(run, sources, r)
    _derive(run)


# Order of the statistics that must not decrease; pNN in between are placed by their rank.
_METRIC_LABEL = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2e_ms": "E2E"}
_PERCENTILE = re.compile(r"p(\d+(?:\.\d+)?)")
# Relative slack for float rounding when comparing neighbouring statistics (a p99 interpolated next
# to the maximum may land an ulp above it).
_ORDER_SLACK = 1e-9


def _percentiles_check(run: ImportedRun, sources: dict[tuple[str, str], str], r: _Reader) -> None:
    """Refuse statistics that decrease along min <= p50 <= ... <= p99 <= max (the ones present, per
    latency; a statistic already refused is not present), adding each to ``r``'s problems at the
    key that is too small, with both values."""
    for metric, label in _METRIC_LABEL.items():
        stats: dict[str, float | None] = getattr(run, metric)
        ranked = sorted((float(m.group(1)), k) for k in stats if (m := _PERCENTILE.fullmatch(k)))
        order = ["min"] + [k for _, k in ranked] + ["max"]
        present = [k for k in order if stats.get(k) is not None]
        for lo, hi in zip(present, present[1:]):
            a, b = float(stats[lo]), float(stats[hi])  # type: ignore[arg-type]
            if b < a - _ORDER_SLACK * max(abs(a), abs(b)):
                lo_key, hi_key = sources.get((metric, lo), lo), sources.get((metric, hi), hi)
                r.refuse(hi_key, f"{hi_key} = {b:g} ms is less than {lo_key} = {a:g} ms; {label} statistics must "
                                 "not decrease (min <= p50 <= p90 <= p95 <= p99 <= max)")


def _output_needs_completions(run: ImportedRun, r: _Reader) -> None:
    """Refuse output figures above zero in a run whose ``completed`` is 0: no request finished, so
    no output token was delivered and no request completed per second (both tools count only
    successful requests in these totals and rates); such a file disagrees with itself."""
    if run.completed != 0 or "completed" in r.refused:
        return
    for key, value in (("total_output_tokens", run.total_output_tokens),
                       ("output_throughput", run.output_throughput_tok_s),
                       ("request_throughput", run.request_throughput_req_s)):
        if value:
            r.refuse(key, f"{key} = {value:g} but completed is 0: a run in which no request completed "
                          "delivered no output; the file disagrees with itself")


def _output_throughput_check(run: ImportedRun, r: _Reader) -> None:
    """Refuse an ``output_throughput`` (tokens/s) that differs from ``total_output_tokens`` /
    ``duration`` by more than :data:`THROUGHPUT_TOLERANCE` of the latter plus
    :data:`THROUGHPUT_ROUNDING_TOK_S`: both harnesses compute it as exactly that quotient, so a
    file where they disagree was edited or put together from several runs. Skipped unless all
    three are finite numbers that were not refused."""
    if r.refused & {"output_throughput", "total_output_tokens", "duration"}:
        return
    rate, tokens, duration = run.output_throughput_tok_s, run.total_output_tokens, run.duration_s
    if rate is None or tokens is None or not duration:
        return
    expected = tokens / duration
    if abs(rate - expected) > THROUGHPUT_TOLERANCE * expected + THROUGHPUT_ROUNDING_TOK_S:
        off = f"{abs(rate - expected) / expected * 100:.3g} %" if expected else "any amount"
        r.refuse("output_throughput",
                 f"output_throughput = {rate:g} tokens/s but total_output_tokens / duration = {tokens} / "
                 f"{duration:g} s = {expected:g} tokens/s; they differ by {off}, more than the "
                 f"{THROUGHPUT_TOLERANCE * 100:g} % (plus {THROUGHPUT_ROUNDING_TOK_S:g} tokens/s for rounding) "
                 "allowed, so the file disagrees with itself")


def _littles_law_check(run: ImportedRun, sources: dict[tuple[str, str], str], r: _Reader) -> None:
    """Refuse a mean E2E (ms) that puts more requests in flight than ``max_concurrency`` allows, at
    the mean E2E key (``mean_e2e_latency_ms``, ``mean_e2el_ms``): by Little's law the mean number in
    flight is ``completed`` x mean E2E / ``duration`` (requests x s / s), and a run whose harness
    holds at most c requests at once (an ``asyncio.Semaphore(c)`` in both harnesses; the E2E clock
    starts after a request gets its slot) cannot average more than c; allowed
    :data:`LITTLES_LAW_TOLERANCE` of c above it. Failed requests also held slots, so counting the
    completed ones alone keeps the bound exact. The request-rate form, ``request_throughput`` x mean
    E2E, is the same rule, as both harnesses write ``request_throughput`` = ``completed`` /
    ``duration``. Skipped where one of the four is absent, null, not finite or refused, and where
    the run had no bound: ``max_concurrency`` null, absent or 0 (both harnesses take 0 as none)."""
    key = sources.get(("e2e_ms", "mean"))
    if key is None or r.refused & {key, "completed", "duration", "max_concurrency"}:
        return
    bound, completed, duration, e2e_ms = run.concurrency, run.completed, run.duration_s, run.e2e_ms.get("mean")
    if not bound or completed is None or not duration or e2e_ms is None:
        return
    held_s = completed * e2e_ms / 1000
    in_flight = held_s / duration
    if in_flight > bound * (1 + LITTLES_LAW_TOLERANCE):
        r.refuse(key, f"completed {completed:,} requests × mean E2E {_about(e2e_ms)} ms = {_about(held_s)} "
                      f"request-seconds in flight over a {_about(duration)} s run: a mean of {_about(in_flight)} in "
                      f"flight, more than max_concurrency {bound:,} allows (Little's law: mean in flight = completed "
                      f"/ duration × mean E2E; {LITTLES_LAW_TOLERANCE * 100:g} % over is allowed for rounding), so "
                      "the file disagrees with itself")


def _about(value: float) -> str:
    """A finite number >= 0 to 4 significant digits, thousands separated, never in exponent form:
    ``7,841``, ``298.4``, ``7.884``, ``0.05123``."""
    if value == 0:
        return "0"
    places = max(0, 3 - math.floor(math.log10(abs(value))))
    return f"{value:,.{places}f}"


def _counts_check(run: ImportedRun, r: _Reader) -> None:
    """Refuse ``completed + failed > num_prompts`` (each prompt is sent once and ends once), at
    ``completed``; skipped when one of the three was refused."""
    if run.num_prompts is None or run.completed is None or r.refused & {"completed", "failed", "num_prompts"}:
        return
    failed = run.failed or 0
    if run.completed + failed > run.num_prompts:
        r.problems.add(
            f"completed {run.completed} + failed {failed} = {run.completed + failed} is more than num_prompts "
            f"{run.num_prompts}; every prompt is sent once and ends once", line=r.line, key="completed")


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
            key = name.removesuffix("_tok_s").removesuffix("_req_s")  # the file's key (both tools)
            if key in run.nan_keys or key in run.inf_keys:
                # The file's value was not finite: say what replaced it, in place of "kept as null".
                written = run.inf_keys.get(key, "NaN")
                run.notes = [n for n in run.notes if not (n.startswith(f"{key} was ") and n.endswith("kept as null."))]
                run.notes.append(f"{key} was {written} in the file; {name} computed from its total / duration instead.")
            else:
                run.notes.append(f"{name} is not in the file; computed as its total / duration.")


def _finish(r: _Reader, run: ImportedRun) -> ImportedRun:
    per_request = sorted(k for k in r.obj if k in _PER_REQUEST_KEYS)
    if per_request:
        run.notes.append(f"Per-request arrays ({', '.join(per_request)}) are kept in the original file only.")
    run.unmapped_keys = sorted(k for k in r.obj if k not in r.used and not _STAT_KEY.match(k))
    return run


def _sglang_run(obj: dict[str, Any], raw: str, line: int | None, text: str, problems: _Problems) -> ImportedRun:
    run = ImportedRun(source_format=SGLANG_BENCH_SERVING, source_line=line, original_text=text, original_record=raw)
    r = _Reader(obj, line, run, problems)
    _common(r, run)
    run.total_output_tokens_retokenized = r.count("total_output_tokens_retokenized")
    run.mean_concurrency = r.number("concurrency", minimum=0, unit="a number of requests")
    random_in = r.count("random_input_len")
    random_out = r.count("random_output_len")
    ratio = r.number("random_range_ratio")
    sharegpt_out = r.count("sharegpt_output_len")
    fixed_out = r.count("fixed_output_len")
    # bench_serving writes only how many requests completed; a failure count, where a file has
    # one, is read, and otherwise stays None (unknown), never 0.
    if "failed" in r.obj:
        run.failed = r.count("failed")
    dataset = (run.dataset_name or "").lower()
    if dataset.startswith("random"):
        run.requested_input_len, run.requested_output_len, run.range_ratio = random_in, random_out, ratio
        _sglang_lengths(run, r.obj)
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


def _sglang_lengths(run: ImportedRun, obj: dict[str, Any]) -> None:
    """Ranges and the note for SGLang's random dataset: lengths uniform in [max(int(L*r), 1), L].
    Without a usable ``random_range_ratio`` the range is unknown; the per-request ``input_lens`` and
    ``output_lens`` (``--output-details``), where the file has them, still give the lengths, read
    as vLLM's are (:func:`_vllm_lengths`)."""
    r = run.range_ratio
    if r is None or not 0 <= r <= 1:
        if r is None:
            said = ("NaN in the file" if "random_range_ratio" in run.nan_keys else
                    f"{run.inf_keys['random_range_ratio']} in the file" if "random_range_ratio" in run.inf_keys else
                    "not recorded")
            ratio_note = (f"random_range_ratio is {said}, "
                          "so the length distribution is unknown: SGLang draws lengths from [L*r, L] for its "
                          "--random-range-ratio r.")
        else:
            ratio_note = f"random_range_ratio {r} is outside [0, 1]; the length range is unknown."
        run.notes.append(ratio_note)
        run.length_distribution_note = ratio_note
        if "input_lens" in obj or "output_lens" in obj:
            _vllm_lengths(run, obj, harness="SGLang", option="--output-details")
            run.length_distribution_note = f"{ratio_note} {run.length_distribution_note}"
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


def _vllm_run(obj: dict[str, Any], raw: str, line: int | None, text: str, problems: _Problems) -> ImportedRun:
    run = ImportedRun(source_format=VLLM_BENCH_SERVE, source_line=line, original_text=text, original_record=raw)
    r = _Reader(obj, line, run, problems)
    _common(r, run)
    run.model_id = r.text("model_id")
    run.tokenizer_id = r.text("tokenizer_id")
    run.label = r.text("label")
    run.date = r.text("date")
    if run.date is not None and result_date(run.date) is None:
        run.notes.append(f"date {query_text(run.date)} is not in vLLM's %Y%m%d-%H%M%S form; not read as a time.")
    run.num_prompts = r.count("num_prompts")
    run.burstiness = r.number("burstiness")
    run.failed = r.count("failed")
    run.peak_output_throughput_tok_s = r.number("max_output_tokens_per_s", minimum=0, unit="a rate in tokens/s")
    run.max_concurrent_requests = r.count("max_concurrent_requests")
    _max_concurrent_check(run, r)
    # Older vLLM wrote the key with a trailing colon; the newer name wins when both are present.
    goodput = r.number("request_goodput", minimum=0, unit="a rate in requests/s")
    old_goodput = r.number("request_goodput:", minimum=0, unit="a rate in requests/s")
    run.request_goodput_req_s = goodput if goodput is not None else old_goodput
    if goodput is None and old_goodput is not None:
        run.notes.append('request_goodput read from the older key "request_goodput:".')
    _counts_check(run, r)
    if run.failed is None and "failed" not in r.refused and run.num_prompts is not None and run.completed is not None:
        run.failed = run.num_prompts - run.completed
        run.notes.append("failed is not in the file; computed as num_prompts - completed.")
    _vllm_lengths(run, r.obj)
    return _finish(r, run)


def _max_concurrent_check(run: ImportedRun, r: _Reader) -> None:
    """Judge vLLM's ``max_concurrent_requests`` (requests) against the file's other counts.

    vLLM counts it in one-second buckets of the run: each successful request adds 1 to every
    whole second it overlaps, and the count is the largest bucket. So it is at most ``completed``
    (it counts successful requests only; more is refused at ``max_concurrent_requests``, naming
    both numbers, as a file that disagrees with itself), and it is not an instantaneous peak:
    under a ``max_concurrency`` cap c, requests that end and start within one second add up,
    and the count may exceed c. Such a count is kept, with a note saying why it is above the cap.
    Skipped when one of the numbers is absent or refused."""
    peak, completed, cap = run.max_concurrent_requests, run.completed, run.concurrency
    if peak is None or r.refused & {"max_concurrent_requests"}:
        return
    if completed is not None and "completed" not in r.refused and peak > completed:
        r.refuse("max_concurrent_requests",
                 f"max_concurrent_requests {peak:,} is more than completed {completed:,}: vLLM counts only "
                 "successful requests in it (the most active within one second), so it cannot exceed the "
                 "requests that completed; the file disagrees with itself")
        run.max_concurrent_requests = None
        return
    if cap and "max_concurrency" not in r.refused and peak > cap:
        run.notes.append(
            f"max_concurrent_requests {peak:,} is above max_concurrency {cap:,}: vLLM counts every successful "
            "request active at any time within a one-second bucket, so requests that ended and started within "
            "one second add up; it is not the most in flight at one instant, which the cap held to "
            f"{cap:,}.")


def _per_request_lengths(value: Any) -> list[int] | None:
    """``value`` as a list of token counts (integers >= 0, not booleans), None when it is absent,
    empty or holds anything else."""
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_COUNT for v in value):
        return None
    return value


def _vllm_lengths(run: ImportedRun, obj: dict[str, Any], *, harness: str = "vLLM",
                  option: str = "--save-detailed") -> None:
    """The lengths of a vLLM run from its per-request arrays (``--save-detailed``; module docstring),
    or of an SGLang run's (``--output-details``, ``harness`` and ``option`` name them in the notes;
    SGLang fills the arrays alike, a 0 output length for a failed request):
    ``input_lens`` are the prompt lengths of every request sent (the benchmark's tokenizer count
    of each prompt it built, failed requests included), ``output_lens`` the tokens each completed
    request produced (a failed one's entry is 0). The file does not record the requested output
    length (``max_tokens``), so an equal ``output_lens`` says every completed request produced
    that many tokens, which is what ``--ignore-eos`` with a fixed output length gives; without
    ``--ignore-eos`` it may also be a cap every request reached. Either way the run's tok/s and
    latencies are those of outputs of that length, and it is recorded as such, with the note
    saying what was measured rather than requested.

    Each array is used only when it agrees with the file's own totals: the completed requests'
    prompt lengths sum to ``total_input_tokens`` and their output lengths to
    ``total_output_tokens``, and ``output_lens`` holds one entry per completed request plus a
    0 for each failed one. One that does not, or that is not a list of token counts, is left out
    with a note, and that side's lengths stay unknown."""
    said: list[str] = []
    inputs = _per_request_lengths(obj.get("input_lens"))
    outputs = _per_request_lengths(obj.get("output_lens"))
    completed, failed = run.completed, run.failed
    for key, values in (("input_lens", inputs), ("output_lens", outputs)):
        if key in obj and values is None:
            said.append(f"{key} is not a list of token counts; it is not used.")
    if inputs is not None and len(set(inputs)) == 1 and completed is not None \
            and run.total_input_tokens is not None and inputs[0] * completed != run.total_input_tokens:
        said.append(f"input_lens are all {inputs[0]}, but total_input_tokens {run.total_input_tokens} is not "
                    f"{inputs[0]} x {completed} completed requests; the input lengths are not used.")
        inputs = None
    if outputs is not None:
        produced = list(outputs)
        for _ in range(failed or 0):
            if 0 not in produced:
                break
            produced.remove(0)
        expected = completed if completed is not None else len(produced)
        if len(produced) != expected or (failed or 0) > len(outputs) - len(produced):
            said.append(f"output_lens has {len(outputs)} entries, not one per completed request ({completed}) and a "
                        f"0 per failed one ({failed or 0}); the output lengths are not used.")
            outputs = None
        elif run.total_output_tokens is not None and sum(produced) != run.total_output_tokens:
            said.append(f"output_lens sum to {sum(produced)}, not total_output_tokens {run.total_output_tokens}; "
                        "the output lengths are not used.")
            outputs = None
        else:
            outputs = produced or None
    parts: list[str] = []
    if inputs is not None:
        lo, hi = min(inputs), max(inputs)
        run.input_lens_min_max = (lo, hi)
        if lo == hi:
            run.input_len_range = (lo, lo)
            if run.requested_input_len is None:  # SGLang's random_input_len, where given, stays what was asked
                run.requested_input_len = lo
            parts.append(f"Input length {lo} tokens for every request (input_lens).")
        else:
            parts.append(f"Input lengths varied from {lo} to {hi} tokens (input_lens), so this is not a fixed-length "
                         "run.")
    if outputs is not None:
        lo, hi = min(outputs), max(outputs)
        run.output_lens_min_max = (lo, hi)
        if lo == hi:
            run.output_len_range = (lo, lo)
            unasked = (f"{harness}'s file does not record the requested one, and "
                       if run.requested_output_len is None else "")
            parts.append(f"Every completed request produced {lo} output tokens (output_lens: produced, not requested, "
                         f"lengths; {unasked}equal produced lengths are what --ignore-eos with a fixed output length "
                         "gives).")
        else:
            parts.append(f"Output lengths varied from {lo} to {hi} tokens (output_lens, produced), so this is not a "
                         "fixed-length run.")
    missing = [k for k, v in (("input", inputs), ("output", outputs)) if v is None]
    if missing:
        parts.append(f"The {' and '.join(missing)} lengths per request are not in the file ({harness} writes "
                     f"input_lens and output_lens with {option}), so they are unknown; the measured means are total "
                     "tokens / completed requests.")
    run.length_distribution_note = " ".join(parts)
    run.notes.extend(said)


def _fixed_len(span: tuple[int, int] | None) -> int | None:
    return span[0] if span is not None and span[0] == span[1] else None


def _json_type(v: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(v), "a number")
