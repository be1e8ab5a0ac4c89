"""Pure helpers of benchmark sweeps: grid validation, grid points, the GPU count of a recipe, the
conversion of a stored run into the analysis vocabulary, and the plain-text results table.

No database access here; :mod:`benchmarks.services` stores what these compute.
"""
from __future__ import annotations

import json
import math
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from benchmarks.analysis.model import PARTIAL_FLAG
from benchmarks.loadgen import OUTPUT_BASIS_WITH_ABORTED, Api
from controlplane.api import shown_key, shown_value
from controlplane.errors import InvalidInput
from controlplane.jsonsafe import finite_number, js_number, json_number, json_spelled, not_integer, whole_float
from controlplane.numbers import whole_number

# Bounds that keep one sweep a sweep and not a denial of service on the client or the database.
# Every point's prompts are built in the control worker's memory before it starts (case C11), and
# every closed-loop slot is one open connection and one task in the client:
# * MAX_CONCURRENCY: 4096 slots. Past the engine's running batch, more slots only queue inside
#   the server; 4096 connections still fit a raised open-files limit on one client process, while
#   100 000 slots once grew the control worker from 2.5 GB to 6 GB RSS without sending a request.
# * MAX_REQUESTS_PER_POINT: 100 000 requests per point, whichever way the count is given
#   (``requests`` or ``requests_per_concurrency`` x c).
# * MAX_REQUESTS_PER_SWEEP: 1 000 000 requests in the whole sweep (the per-request records of a
#   point are kept in memory until it is stored; a sweep is hours at most, not a soak test).
# * MAX_PROMPT_TOKENS_PER_POINT: (requests + warmup) x input_len <= 10 000 000 tokens. Measured
#   with tracemalloc on the development host, a token-id prompt costs about 41 bytes per token
#   (a list of Python ints) and a text prompt about 4.3 bytes (characters), so the largest prompt
#   set is about 0.4 GB of token ids (0.04 GB of text) and a few seconds of generation.
# * MAX_REQUEST_RATE: 10 000 requests/s per open-loop point, what one load-generator process can
#   honestly issue. Its arrivals are scheduled on one asyncio loop; measured on the 2-core
#   development host against the sim (8-token prompts, 2-token outputs, 2,000 requests), a target
#   of 10,000 req/s was sent at 9,810 req/s (0.85 standard deviations of a Poisson schedule: on
#   target), while targets of 10^6 req/s and more were all sent at about 35,000 req/s, the loop's
#   own speed (flagged ``rate_off_target``): past the bound the point would measure the client,
#   not the asked rate. No engine Ceiling drives serves that many streamed requests a second on
#   one deployment either. (Before the bound, 1e308 req/s was taken and printed as a 309-digit
#   number.)
# * A point limited by time alone at a request rate sends about rate x duration_s requests, all
#   drawn in advance and recorded in memory: at most MAX_REQUESTS_PER_POINT of them, as for a
#   point with a request count.
MAX_POINTS = 200
MAX_CONCURRENCY = 4096
MAX_REQUESTS_PER_POINT = 100_000
MAX_REQUEST_RATE = 10_000
MAX_REQUESTS_PER_SWEEP = 1_000_000
MAX_PROMPT_TOKENS_PER_POINT = 10_000_000
MAX_LEN = 1_000_000
# Extra seconds on top of the deployment's startup timeout before a sweep gives up waiting for
# ready (the sweep may be created while the processes are still loading).
WAIT_READY_MARGIN_S = 60
#: Warm-up requests per point at most (default 0): the API's, ``manage.py sweep --warmup``'s and
#: the sweep form's bound.
MAX_WARMUP = 10_000
#: The largest dataset seed (default 0): a 31-bit non-negative integer, written ``2^31-1`` in refusals.
MAX_SEED = 2**31 - 1

#: Requests per concurrency slot of a grid that gives neither a request count nor a duration.
DEFAULT_REQUESTS_PER_CONCURRENCY = 4
#: The length pair of a grid without ``lengths`` ("input:output" tokens): the API's default, the sweep
#: form's initial value and ``manage.py sweep --lengths``'s default.
DEFAULT_LENGTHS = "256:256"
#: The largest SLO the grid takes, in seconds, per key: no engine's first token, gap between tokens
#: or whole request is held to more than this, so a larger number is most likely milliseconds given
#: as seconds (``"ttft_s": 800``), refused with the seconds it would be (``did you mean 800 ms =
#: 0.8 s?``) rather than kept as an SLO every request meets.
MAX_SLO_S = {"ttft_s": 600, "tpot_s": 600, "e2e_s": 3600}
# The longest time limit of one point: a day. Longer is a soak test, not a sweep point.
MAX_DURATION_S = 86_400
# The shortest time limit of one point: a second. A point's clock starts when its prompts are ready
# and it sends its first requests at once, but a shorter window ends before a streamed request can
# finish on any engine Ceiling drives (time to first token alone is tens to hundreds of ms under
# load): a limit such as 1e-300 s passed as "> 0" and gave a point that ended with no request
# sent, and a sweep "done" with nothing measured.
MIN_DURATION_S = 1
#: The bound of a point's time limit in words, the same in every refusal of one: the API's and
#: ``manage.py sweep --duration``'s (``must be ..., got 0``) and the sweep form's.
DURATION_RULE = f"at least {MIN_DURATION_S} s and at most {MAX_DURATION_S} s (24 h)"
# A whole number as forms, query strings and length pairs take it: ASCII digits only
# (``str.isdigit`` also accepts "²", which ``int`` refuses, and other scripts' digits).
DIGITS_RE = re.compile(r"[0-9]+")
# Prompts are generated before the measured window starts (case C11: generating them inside it
# would lower the measured throughput), so a point limited by time needs its prompts made in
# advance. The load generator cycles through them when the time outlasts them, and a repeated
# prompt is a prefix-cache hit on SGLang and vLLM (faster than a new one), so the pool is made as
# large as is cheap: the smallest of MAX_REQUESTS_PER_POINT; prompts worth
# DURATION_POOL_PROMPT_TOKENS input tokens (about 70 MB of token ids and 1-2 s of generation on
# one core); for closed loop, as many requests as each slot could send back to back if each took
# DURATION_MIN_REQUEST_S plus DURATION_MIN_TOKEN_S per output token (a sweep's outputs have their
# fixed length: the load generator asks the engine to ignore EOS): a streamed request over
# loopback takes longer than 1 ms on every engine Ceiling drives, and no engine streams one
# request's tokens faster than 10,000 tokens/s (single-request decode runs at hundreds to a few
# thousand tokens/s, speculative decoding included); for open loop, the Poisson arrivals of the
# duration plus four standard deviations (short with probability < 1e-4). A run that had to reuse
# prompts says so (``prompts_reused``). Without the output term a 30 s point at c=4 of 64:256
# built 31,250 prompts (about 3 s of the point's preparation) to send about 60.
DURATION_POOL_PROMPT_TOKENS = 2_000_000
DURATION_MIN_REQUEST_S = 0.001
DURATION_MIN_TOKEN_S = 0.0001
DEFAULT_API = {"sim": Api.GENERATE.value, "sglang": Api.GENERATE.value, "vllm": Api.COMPLETIONS.value,
               "llamacpp": Api.COMPLETIONS.value}
# The load generator's APIs each engine's server answers (the routes of :func:`benchmarks.loadgen.
# request_path`): SGLang and the sim (``deployments/engines/simcore/app.py``, which speaks SGLang's
# API) serve ``/generate`` and the OpenAI routes; vLLM (``vllm serve``) and llama.cpp
# (``llama_cpp.server``) serve only the OpenAI routes, so ``/generate`` answers 404 there. A PD
# router forwards the routes of its engine.
ENGINE_APIS: dict[str, tuple[str, ...]] = {
    "sim": (Api.GENERATE.value, Api.COMPLETIONS.value, Api.CHAT.value),
    "sglang": (Api.GENERATE.value, Api.COMPLETIONS.value, Api.CHAT.value),
    "vllm": (Api.COMPLETIONS.value, Api.CHAT.value),
    "llamacpp": (Api.COMPLETIONS.value, Api.CHAT.value),
}
GRID_KEYS = ("concurrency", "lengths", "request_rates", "requests", "requests_per_concurrency", "duration_s",
             "warmup", "slo", "api", "wait_ready_s", "seed")
WORKER_ROLES = ("prefill", "decode", "single")


def json_shown(value: Any) -> str:
    """A value of a JSON body or file as a refusal quotes it, in JSON spelling, never Python's
    (``True``, ``None``): a number bare, as its JSON text (``100000``, ``-1`` for ``-1.0``, ``1e+308``, ``1e-7``; an
    integer of more than 40 digits as ``1.00e+50``), anything else as
    :func:`controlplane.api.shown_value` names it (``the boolean true``, ``the string "8"``,
    ``null``, ``the list [8, 8, 8]``, ``the object {"in": 8}``); texts cut to 40 characters. A
    float that is not finite, which strict JSON cannot write, is shown as Python's ``json`` module
    writes it (``Infinity``, ``-Infinity``, ``NaN``), as every other refusal quotes one."""
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return shown_value(value)
    text = json_number(value) if isinstance(value, float) else json.dumps(value)
    if len(text) > 40:  # an integer of many digits: its magnitude, not its first digits
        text = f"{Decimal(value):.3g}"
    return text if len(text) <= 40 else text[:39] + "…"


def ms_to_s(value: float) -> float:
    """Milliseconds as seconds, the shortest decimal of ``value`` moved three places (``0.0001`` →
    ``1e-7``, ``250`` → ``0.25``), not a binary division: ``0.0001 / 1e3`` is
    ``1.0000000000000001e-07``, which a stored SLO would keep and every export would show."""
    return float(Decimal(repr(float(value))).scaleb(-3))


def slo_too_large(key: str, value: float) -> str:
    """The refusal of an SLO over :data:`MAX_SLO_S` seconds, with the seconds it would be had it
    been given in ms where those fit (``must be at most 600 s, got 800; did you mean 800 ms =
    0.8 s?``)."""
    text = f"must be at most {MAX_SLO_S[key]} s, got {grid_number(value)}"
    if finite_number(value) and ms_to_s(value) <= MAX_SLO_S[key]:
        text += f"; did you mean {grid_number(value)} ms = {grid_number(ms_to_s(value))} s?"
    return text


def grid_number(value: Any) -> str:
    """A value a grid field reads as a quantity that may be fractional (a rate, seconds, a
    multiplier) as a refusal quotes it: a float as JavaScript writes it (:func:`js_number`:
    ``1000000``, ``0.5``, ``1e-7``), anything else as :func:`json_shown` does."""
    if isinstance(value, float) and math.isfinite(value):
        return js_number(value)
    return json_shown(value)


_whole_float = whole_float


def int_refusal(value: Any, *, lo: int, hi: int) -> str:
    """The refusal of ``value`` for a grid field that takes an integer ``lo..hi``: ``must be an
    integer 1..100000, got 0``; a whole number written with a decimal point or an exponent
    (``1e3``, ``1.0``), which the API's integer fields refuse too, is told to be written without
    one: ``must be an integer 1..100000, got 1000 written with a decimal point or exponent (write
    1000)`` (in range; one out of range is refused for its range alone)."""
    if _whole_float(value) and lo <= value <= hi:
        return f"must be an integer {lo}..{hi}, got {not_integer(value, json_shown(value))}"
    return f"must be an integer {lo}..{hi}, got {json_shown(value)}"


def duration_valid(value: Any) -> bool:
    """Whether ``value`` is a point's time limit the grid takes: a finite JSON number of seconds
    from :data:`MIN_DURATION_S` to :data:`MAX_DURATION_S`."""
    return finite_number(value) and MIN_DURATION_S <= value <= MAX_DURATION_S


def duration_refusal(shown: str) -> str:
    """The refusal of a time limit outside :data:`DURATION_RULE`, ``shown`` as the caller quotes
    it: ``must be at least 1 s and at most 86400 s (24 h), got 0``."""
    return f"must be {DURATION_RULE}, got {shown}"


def grid_validate(raw: Any, *, engine: str = "sim", default_wait_ready_s: int = 1800 + WAIT_READY_MARGIN_S,
                  spec: Mapping[str, Any] | None = None,
                  reported: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Validate and normalise a sweep grid.

    Input keys (others are refused): ``concurrency`` list of ints >= 1 (closed-loop points);
    ``lengths`` list of ``[input_len, output_len]`` pairs or ``"in:out"`` strings, or one text of
    such pairs separated by commas or spaces as the form takes it (``"16:16,8:8"``; tokens; absent, :data:`DEFAULT_LENGTHS`);
    ``request_rates`` optional list of requests/s > 0 and at most :data:`MAX_REQUEST_RATE`
    (open-loop points, in addition to the concurrency points; limited by time alone, rate x
    ``duration_s`` at most :data:`MAX_REQUESTS_PER_POINT`); a value given twice in any of these
    three lists is refused, naming it;
    ``requests`` fixed requests per point, or ``requests_per_concurrency`` (requests =
    max(1, ceil(k * c)); rate points use ``requests``); a closed-loop point whose request count
    is below its concurrency is refused, naming the point and both numbers; ``duration_s`` a time limit per point in
    seconds (at least :data:`MIN_DURATION_S`, at most :data:`MAX_DURATION_S`), instead of or
    together with a request count (together: whichever ends first; alone: the point sends until
    the time is up, from a pool of :func:`duration_prompt_pool` prompts); with neither,
    ``requests_per_concurrency`` defaults to 4;
    ``warmup`` requests per point before measuring (default 0); ``slo`` ``{"ttft_s", "tpot_s", "e2e_s"}`` seconds for goodput;
    ``api`` one of :class:`benchmarks.loadgen.Api` that ``engine`` serves (:data:`ENGINE_APIS`;
    default per engine: ``sglang-generate`` for sglang/sim, ``openai-completions`` otherwise);
    ``wait_ready_s`` seconds to wait for the deployment (default its startup timeout + 60 s);
    ``seed`` for the dataset.

    Returns the normalised dict with every key present. Raises :class:`InvalidInput` with every
    error found, keyed by field path (``grid.lengths.1``), in one go, each value quoted in JSON
    spelling (:func:`json_shown`: ``got the boolean true``, never ``True``; a rate or a time as
    JavaScript writes it, :func:`grid_number`: ``got 1000000``; a whole number written with a
    decimal point or an exponent where an integer is asked for is told so, :func:`int_refusal`,
    as the API's integer fields refuse it too): each field is judged
    on its own, a number that is not finite (``1e400`` parses as infinity) is named once at its path
    as it was written (``must be a finite number, got 1e400 (too large for a 64-bit float)``,
    :func:`non_finite_text`), and the size bounds
    (points, requests and prompt tokens per point and per sweep) are checked over the fields that
    are valid whenever the fields they depend on are. With the deployment's ``spec``, each valid
    length pair is also judged against what one request of it needs alone and the capacity the
    engine servers ``reported`` once ready (the deployment's ``engine_limits``), else the one the
    recipe states: its context length, and for sim its profile's KV cache
    (:func:`grid_context_problems`, at the pair's own path ``grid.lengths.<i>``), in the same
    answer as every other error.
    """
    errors: dict[str, list[str]] = {}
    if not isinstance(raw, Mapping):
        raise InvalidInput({"grid": ["must be an object"]})
    non_finite = non_finite_numbers(raw, "grid")
    for path, number in non_finite:
        errors[path] = [non_finite_text(number)]
    named = {path for path, _ in non_finite}

    def err(path: str, msg: str) -> None:
        if path in named:
            return  # already named as not finite; a second message about the same value adds nothing
        errors.setdefault(path, []).append(msg)

    for key in raw:
        if key not in GRID_KEYS:
            err(f"grid.{key}", f"unknown field {shown_key(key)}; allowed: {', '.join(GRID_KEYS)}")
    conc = _int_list(raw.get("concurrency", []), "grid.concurrency", err, lo=1, hi=MAX_CONCURRENCY)
    _refuse_repeats(conc, "grid.concurrency", "concurrency", str, err)
    rates: list[float] = []
    raw_rates = raw.get("request_rates") or []
    if not isinstance(raw_rates, list):
        err("grid.request_rates", f"must be a list of requests/s > 0, got {shown_value(raw_rates)}")
        raw_rates = []
    for i, r in enumerate(raw_rates):
        if not finite_number(r) or r <= 0:
            err(f"grid.request_rates.{i}", f"must be a number of requests/s > 0, got {grid_number(r)}")
        elif r > MAX_REQUEST_RATE:
            err(f"grid.request_rates.{i}", f"must be at most {MAX_REQUEST_RATE:,} requests/s (what one load-generator "
                                           f"process can send on schedule), got {grid_number(r)}")
        else:
            rates.append(float(r))
    _refuse_repeats(rates, "grid.request_rates", "request rate", lambda r: f"{js_number(r)} req/s", err)
    if not raw.get("concurrency") and not raw.get("request_rates"):
        err("grid.concurrency", "give at least one concurrency (or a request rate)")
    lengths: list[list[int]] = []
    lengths_refused = False  # an empty item of a lengths text, already named
    length_paths: list[str] = []  # each valid pair's own path: an invalid pair before it keeps its index
    raw_lengths = raw.get("lengths") if "lengths" in raw else DEFAULT_LENGTHS
    if isinstance(raw_lengths, str) and raw_lengths.strip():
        # "256:256" on its own, or the sweep form's comma list "16:16, 8:8" (spaces separate
        # pairs too, and may stand around a colon): one pair per item, an empty item refused
        raw_lengths = lengths_text_items(raw_lengths, err)
        if raw_lengths is None:
            raw_lengths = []
            lengths_refused = True
    if lengths_refused:
        pass
    elif not isinstance(raw_lengths, list) or not raw_lengths:
        got = f", got {shown_value(raw_lengths)}" if raw_lengths not in (None, []) else ""
        err("grid.lengths", f"give at least one [input_len, output_len] pair, e.g. [[256, 256]]{got}")
    else:
        for i, pair in enumerate(raw_lengths):
            parsed = length_pair_parse(pair)
            if parsed is None:
                whole = (isinstance(pair, (list, tuple)) and len(pair) == 2 and any(map(_whole_float, pair))
                         and length_pair_parse([int(x) if _whole_float(x) else x for x in pair]) is not None)
                how = (f" written with a decimal point or exponent (write [{int(pair[0])}, {int(pair[1])}])"
                       if whole else "")
                err(f"grid.lengths.{i}", f"must be [input_len, output_len] or 'in:out' with 1..{MAX_LEN} tokens"
                                         f", got {json_shown(pair)}{how}")
            else:
                lengths.append(list(parsed))
                length_paths.append(f"grid.lengths.{i}")
        _refuse_repeats([tuple(p) for p in lengths], "grid.lengths", "length pair", lambda p: f"{p[0]}:{p[1]}", err)
    requests = raw.get("requests")
    per_c = raw.get("requests_per_concurrency")
    if requests is not None and per_c is not None:
        err("grid.requests", "give requests or requests_per_concurrency, not both")
    if requests is not None and (isinstance(requests, bool) or not isinstance(requests, int)
                                 or not 1 <= requests <= MAX_REQUESTS_PER_POINT):
        err("grid.requests", int_refusal(requests, lo=1, hi=MAX_REQUESTS_PER_POINT))
    if per_c is not None and (isinstance(per_c, bool) or not isinstance(per_c, (int, float)) or not 0 < per_c <= 1000):
        err("grid.requests_per_concurrency", f"must be a number in (0, 1000], got {grid_number(per_c)}")
    duration = raw.get("duration_s")
    if duration is not None and not duration_valid(duration):
        if isinstance(duration, bool) or not isinstance(duration, (int, float)):
            # the wrong type, not a number out of range: say so, as the API's type errors do
            err("grid.duration_s", f"must be a number of seconds ({DURATION_RULE}), got {grid_number(duration)}")
        else:
            err("grid.duration_s", duration_refusal(grid_number(duration)))
        duration = None
    elif duration is not None:
        duration = float(duration)
    if requests is None and per_c is None and raw.get("duration_s") is None:
        per_c = DEFAULT_REQUESTS_PER_CONCURRENCY
    if rates and requests is None and raw.get("duration_s") is None:
        err("grid.requests", "open-loop points (request_rates) need a fixed number of requests or a duration_s")
    elif rates and duration is None and isinstance(requests, int) and not isinstance(requests, bool):
        # Without a time limit an open-loop point lasts about requests / rate: bound it like a
        # duration, so a rate such as 1e-9 req/s cannot hold a worker for decades.
        for i, r in enumerate(rates):
            if requests / r > MAX_DURATION_S:
                err(f"grid.request_rates.{i}", f"{requests} request{'' if requests == 1 else 's'} at {js_number(r)} req/s "
                    f"take{'s' if requests == 1 else ''} about {_seconds_text(requests, r)} s; at most {MAX_DURATION_S} s (24 h) per point: raise the rate "
                    "or give duration_s")
    elif rates and duration is not None and requests is None:
        # Limited by time alone, an open-loop point sends about rate x duration requests, drawn in
        # advance and recorded in memory: bounded like a request count.
        for i, r in enumerate(rates):
            if r * duration > MAX_REQUESTS_PER_POINT:
                err(f"grid.request_rates.{i}", f"{js_number(r)} req/s for {js_number(duration)} s is about {r * duration:,.0f} requests; "
                    f"at most {MAX_REQUESTS_PER_POINT:,} per point: lower the rate or duration_s, or give requests")
    warmup = raw.get("warmup", 0)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup <= MAX_WARMUP:
        err("grid.warmup", int_refusal(warmup, lo=0, hi=MAX_WARMUP))
    slo = raw.get("slo") or {}
    norm_slo: dict[str, float] = {}
    if not isinstance(slo, Mapping):
        err("grid.slo", "must be an object {ttft_s, tpot_s, e2e_s}")
    else:
        for key, value in slo.items():
            if key not in ("ttft_s", "tpot_s", "e2e_s"):
                err(f"grid.slo.{key}", "unknown SLO; allowed: ttft_s, tpot_s, e2e_s (seconds)")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                err(f"grid.slo.{key}", f"must be seconds > 0, got {grid_number(value)}")
            elif value > MAX_SLO_S[key]:
                err(f"grid.slo.{key}", slo_too_large(key, value))
            else:
                norm_slo[key] = float(value)
    api = raw.get("api") or DEFAULT_API.get(engine, Api.COMPLETIONS.value)
    if not isinstance(api, str) or api not in {a.value for a in Api}:
        err("grid.api", f"must be one of {', '.join(a.value for a in Api)}, got {json_shown(api)}")
    elif engine in ENGINE_APIS and api not in ENGINE_APIS[engine]:
        err("grid.api", f"{api} is not served by this deployment's engine ({engine}); it serves "
                        f"{', '.join(ENGINE_APIS[engine])}")
    wait = raw.get("wait_ready_s", default_wait_ready_s)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 86_400:
        err("grid.wait_ready_s", f"must be seconds 0..86400, got {grid_number(wait)}")
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        err("grid.seed", int_refusal(seed, lo=0, hi=MAX_SEED).replace(f"..{MAX_SEED}", "..2^31-1"))
    grid = {"concurrency": conc, "lengths": lengths, "request_rates": rates, "requests": requests,
            "requests_per_concurrency": per_c if requests is None else None, "duration_s": duration,
            "warmup": warmup, "slo": norm_slo, "api": api,
            "wait_ready_s": wait if "grid.wait_ready_s" in errors else float(wait), "seed": seed}
    # Each size bound is judged, over the valid points, whenever the fields it is computed from are
    # valid, whatever else is wrong, so one answer lists everything to fix: the number of points
    # needs only the loads and lengths; the request bounds need the counts too; the prompt-token
    # bound needs the warmup as well.
    n_points = len(lengths) * (len(set(conc)) + len(set(rates)))
    if n_points > MAX_POINTS:
        errors.setdefault("grid", []).append(f"{n_points:,} points; at most {MAX_POINTS} per sweep")
    if n_points <= _MAX_POINTS_SIZED and _counts_known(grid, errors):
        sizing = {**grid, "warmup": grid["warmup"] if "grid.warmup" not in errors else 0}
        size_errors = _grid_size_errors(sizing, grid_points(sizing), prompt_tokens="grid.warmup" not in errors)
        for path, messages in size_errors.items():
            for message in messages:
                err(path, message)
    if spec is not None:
        # Needs only the valid pairs: a point too long for the context is named with the rest.
        too_long = grid_context_problems({"lengths": lengths}, spec=spec, engine=engine, reported=reported)
        for path, messages in too_long.items():
            for message in messages:
                err(length_paths[int(path.rsplit(".", 1)[1])], message)
    if errors:
        raise InvalidInput(errors)
    return grid


# Grids with more points than this are refused for their size alone: listing their points to
# judge the request bounds too would cost more than the answer is worth (a 10,000-item length list
# times 4,096 concurrencies is 41 million points).
_MAX_POINTS_SIZED = 100 * MAX_POINTS


def _counts_known(grid: Mapping[str, Any], errors: Mapping[str, list[str]]) -> bool:
    """Whether every point's request count can be computed from ``grid``: ``requests`` and
    ``requests_per_concurrency`` are valid, and a point limited by time alone (neither given) has
    a valid ``duration_s`` to size its prompt pool."""
    if "grid.requests" in errors or "grid.requests_per_concurrency" in errors:
        return False
    return grid["requests"] is not None or grid["requests_per_concurrency"] is not None \
        or grid["duration_s"] is not None


_INFINITY_WORDS = ("inf", "infinity")


def non_finite_text(number: float) -> str:
    """The one refusal of a grid number that is not finite, from the API, the sweep form and
    ``manage.py sweep`` alike, naming the value as it was written (the ``literal`` of a
    :class:`controlplane.drf_defaults.NonFiniteNumber`, which the API's JSON parser and
    :func:`benchmarks.forms.grid_value` keep) and why it is refused: ``must be a finite number,
    got 1e400 (too large for a 64-bit float)``, ``got nan (not a number)``, ``got inf
    (infinite)``. A float that kept no spelling is written as JSON's decoders write it
    (``Infinity``, ``NaN``)."""
    literal = getattr(number, "literal", None)
    shown = literal or json_spelled(float(number))
    if math.isnan(number):
        why = "not a number"
    elif literal and literal.lstrip("+-").lower() in _INFINITY_WORDS:
        why = "infinite"
    else:
        why = "too large for a 64-bit float"
    return f"must be a finite number, got {shown} ({why})"


def non_finite_numbers(value: Any, path: str) -> list[tuple[str, float]]:
    """Every float in ``value`` (dicts and lists walked in order) that is not finite, as
    ``(dotted path, value)`` under ``path`` (``grid.request_rates.1``). A JSON number too large
    for a double (``1e400``) parses as infinity (the API's parser and the form keep how it was
    written, :func:`non_finite_text`); so do the ``NaN``/``Infinity`` literals, which the API's
    JSON parser also refuses on their own."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [(path, value)]
    if isinstance(value, Mapping):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return []
    out: list[tuple[str, float]] = []
    for key, item in items:
        out += non_finite_numbers(item, f"{path}.{key}")
    return out


def _seconds_text(requests: int, rate: float) -> str:
    """The time ``requests`` take at ``rate`` (requests/s), in seconds, as short text:
    ``2,000,000,000`` below 10^12, three significant digits above (``4e+300``: a tiny rate must
    not give a 300-digit message), also where the float division overflows to infinity (4
    requests at 5e-324 req/s: ``8.1e+323``, computed in decimal)."""
    seconds = requests / rate
    if seconds < 1e12:
        return f"{seconds:,.0f}"
    if math.isfinite(seconds):
        return f"{seconds:.3g}"
    exact = Decimal(requests) / Decimal(rate)
    exponent = exact.adjusted()
    mantissa = f"{float(exact.scaleb(-exponent)):.3g}"
    if mantissa == "10":  # 9.996 rounds up a decade
        mantissa, exponent = "1", exponent + 1
    return f"{mantissa}e+{exponent}"


# Repeated values named in one message; the rest are counted.
_REPEATS_SHOWN = 5


def repeats_text(values: list[Any], noun: str, shown: Callable[[Any], str] = str) -> str | None:
    """The refusal of ``values`` that appear more than once, naming each repeated value
    (``shown`` writes it; the first :data:`_REPEATS_SHOWN`, then a count) and how often it is
    given: ``repeated concurrency: 1 (5,000 times); give each once``; None when every value is
    given once. Used wherever a list of values each names one thing (a grid point, a run)."""
    repeated = [(value, n) for value, n in Counter(values).items() if n > 1]
    if not repeated:
        return None
    parts = [f"{shown(value)} ({n:,} times)" for value, n in repeated[:_REPEATS_SHOWN]]
    if len(repeated) > _REPEATS_SHOWN:
        parts.append(f"and {len(repeated) - _REPEATS_SHOWN:,} more")
    return f"repeated {noun}: {', '.join(parts)}; give each once"


def _refuse_repeats(values: list[Any], path: str, noun: str, shown: Callable[[Any], str], err) -> None:
    """Refuse ``values`` (the valid items of one grid list) that appear more than once, with one
    message at ``path`` (:func:`repeats_text`). A repeat would be a second run of the same point
    (or, where the points are deduplicated, a stored grid that says more than was run)."""
    message = repeats_text(values, noun, shown)
    if message:
        err(path, message)


def _grid_size_errors(grid: Mapping[str, Any], points: list[dict[str, Any]], *,
                      prompt_tokens: bool = True) -> dict[str, list[str]]:
    """The size bounds of a grid (see the constants' comment): per point at most
    :data:`MAX_REQUESTS_PER_POINT` requests, for a closed-loop point at least its concurrency (with
    fewer it never has c requests in flight, so it would measure a lighter load than its label), and (unless ``prompt_tokens`` is False, for a grid
    whose warmup is not known) :data:`MAX_PROMPT_TOKENS_PER_POINT` prompt tokens (warmup
    included), per sweep at most :data:`MAX_REQUESTS_PER_SWEEP` requests. Returns
    ``{field path: [message]}`` naming the first offending point of each bound and its numbers,
    and every point below its concurrency (empty when the grid fits)."""
    errors: dict[str, list[str]] = {}
    warmup = int(grid.get("warmup") or 0)
    too_many = False
    for p in points:
        label = (f"c={p['concurrency']}" if p["concurrency"] is not None else f"{js_number(p['request_rate'])} req/s") \
            + f" {p['input_len']}/{p['output_len']}"
        cap = p.get("max_requests")
        field = "grid.requests_per_concurrency" if grid.get("requests_per_concurrency") else "grid.requests"
        if cap is not None and cap > MAX_REQUESTS_PER_POINT:
            if not too_many:
                errors.setdefault(field, []).append(
                    f"point {label} would send {cap:,} requests; at most {MAX_REQUESTS_PER_POINT:,} per point")
            too_many = True
        elif cap is not None and p["concurrency"] is not None and cap < p["concurrency"]:
            # A closed loop of c slots has at most n requests in flight when it sends n < c: the point
            # would be labelled, ranked and analysed at a concurrency it never reached.
            c = p["concurrency"]
            per_c = grid.get("requests_per_concurrency")
            if field == "grid.requests_per_concurrency":
                # the count is requests_per_concurrency x c rounded up (0.9 x 3 = 2.7 sends 3): a
                # fraction below 1 may still fit, so the rule is said as it is applied
                how = (f" (requests_per_concurrency {js_number(per_c)} x {c:,}, rounded up)", f"; the rounded-up "
                       f"count requests_per_concurrency x c must be at least c: give a larger "
                       f"requests_per_concurrency (1 always fits) or a lower concurrency")
            else:
                how = ("", f"; give at least {c:,} requests per point or a lower concurrency")
            # every such point is named: a grid of several lengths has one per length at that c
            errors.setdefault(field, []).append(
                f"point {label} would send {cap:,} request{'s' if cap != 1 else ''}{how[0]}, fewer "
                f"than its concurrency of {c:,}: it could never have {c:,} requests in flight{how[1]}")
        tokens = (p["num_requests"] + warmup) * p["input_len"]
        if prompt_tokens and tokens > MAX_PROMPT_TOKENS_PER_POINT and "grid.lengths" not in errors:
            errors["grid.lengths"] = [
                f"point {label} needs {tokens:,} prompt tokens ((requests + warmup) x input_len); at most "
                f"{MAX_PROMPT_TOKENS_PER_POINT:,} per point, so its prompts fit in the client's memory"]
    total = grid_requests_total(points)
    if total > MAX_REQUESTS_PER_SWEEP:
        errors.setdefault("grid", []).append(
            f"the sweep would send {total:,} requests; at most {MAX_REQUESTS_PER_SWEEP:,} per sweep")
    return errors


_LENGTHS_SEP = re.compile(r"[\s,]+")
_LENGTHS_COLON = re.compile(r"\s*:\s*")


def lengths_text_items(text: str, err) -> list[str] | None:
    """The ``"in:out"`` items of a grid's ``lengths`` given as one text, as the sweep form takes it:
    ``"16:16,8:8"`` and ``"16:16 8:8"`` are two pairs, ``"256 : 256"`` one. An empty item between
    commas (``"16:16,,8:8"``, a trailing comma) is refused at ``grid.lengths`` in the words of
    every comma list (:func:`controlplane.drf_defaults.empty_list_item`) and None returned."""
    from controlplane.drf_defaults import empty_list_item

    items: list[str] = []
    for chunk in _LENGTHS_COLON.sub(":", text).split(","):
        words = [w for w in _LENGTHS_SEP.split(chunk) if w]
        if not words:
            err("grid.lengths", empty_list_item(len(items) + 1, "lengths", "256:256,1024:128"))
            return None
        items.extend(words)
    return items


def length_pair_parse(pair: Any) -> tuple[int, int] | None:
    """``[256, 256]``, ``(256, 256)`` or ``"256:256"`` → ``(256, 256)``; None when malformed."""
    if isinstance(pair, str):
        parts = pair.split(":")
        if len(parts) != 2 or not all(DIGITS_RE.fullmatch(p.strip()) for p in parts):
            return None
        # a length of more digits than any bound is out of range, never read (int() refuses more than 4300)
        pair = [whole_number(p.strip()) for p in parts]
    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_LEN for x in pair):
        return None
    return int(pair[0]), int(pair[1])


def _int_list(value: Any, path: str, err, *, lo: int, hi: int) -> list[int]:
    if not isinstance(value, list):
        err(path, f"must be a list of integers, got {shown_value(value)}")
        return []
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            err(f"{path}.{i}", int_refusal(v, lo=lo, hi=hi))
        else:
            out.append(v)
    return out


def duration_prompt_pool(*, duration_s: float, input_len: int, output_len: int = 0, concurrency: int | None = None,
                         request_rate: float | None = None) -> int:
    """Distinct prompts generated in advance for a point limited only by ``duration_s`` (seconds);
    the load generator cycles through them if the time outlasts them.

    The smallest of :data:`MAX_REQUESTS_PER_POINT`, ``DURATION_POOL_PROMPT_TOKENS // input_len``
    and, for closed loop, ``ceil(concurrency * duration_s / (DURATION_MIN_REQUEST_S + output_len *
    DURATION_MIN_TOKEN_S))`` (the most requests its slots could send, each taking at least 1 ms
    plus 0.1 ms per output token, ``output_len`` tokens); for open loop at ``request_rate``
    (req/s), ``ceil(r*d + 4*sqrt(r*d)) + 1`` (Poisson arrivals of the duration and four standard
    deviations). Never fewer than ``concurrency`` (every slot gets a prompt) nor 1. Why these
    bounds: see the constants' comment. Pure arithmetic: the same point always gets the same
    count, so with the same seed the same prompts in the same order.
    """
    by_tokens = max(1, DURATION_POOL_PROMPT_TOKENS // max(1, input_len))
    if request_rate is not None:
        mean = request_rate * duration_s
        by_load = math.ceil(mean + 4 * math.sqrt(mean)) + 1
    else:
        request_s = DURATION_MIN_REQUEST_S + max(0, output_len) * DURATION_MIN_TOKEN_S
        # rounded to 6 decimals first, so that a float error (1112.0000000000002) adds no prompt
        by_load = math.ceil(round((concurrency or 1) * duration_s / request_s, 6))
    return max(concurrency or 1, min(MAX_REQUESTS_PER_POINT, by_tokens, by_load))


def grid_points(grid: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The points of a normalised grid, in run order: for each length pair, the concurrencies
    ascending, then the request rates ascending. Each point is ``{"concurrency", "request_rate",
    "input_len", "output_len", "num_requests", "max_requests", "duration_s"}``: ``max_requests``
    is the point's request count (None for a point limited by time alone), ``duration_s`` its time
    limit in seconds (None without one), ``num_requests`` the prompts to generate for it (the
    request count, or for a time-only point :func:`duration_prompt_pool`)."""
    points = []
    duration = grid.get("duration_s")
    per_c = grid.get("requests_per_concurrency")
    for in_len, out_len in grid["lengths"]:
        for c in sorted(set(grid["concurrency"])):
            cap = grid["requests"] or (max(1, math.ceil(per_c * c)) if per_c else None)
            n = cap or duration_prompt_pool(duration_s=duration, input_len=in_len, output_len=out_len,
                                            concurrency=c)
            points.append({"concurrency": c, "request_rate": None, "input_len": in_len, "output_len": out_len,
                           "num_requests": n, "max_requests": cap, "duration_s": duration})
        for r in sorted(set(grid["request_rates"])):
            cap = grid["requests"]
            n = cap or duration_prompt_pool(duration_s=duration, input_len=in_len, request_rate=r)
            points.append({"concurrency": None, "request_rate": r, "input_len": in_len, "output_len": out_len,
                           "num_requests": n, "max_requests": cap, "duration_s": duration})
    return points


def grid_requests_total(points: Iterable[Mapping[str, Any]]) -> int:
    """The requests a sweep of ``points`` will send as far as known in advance: the sum of the
    points' request counts (a point limited by time alone adds 0 until it has run)."""
    return sum(p.get("max_requests") or 0 for p in points)


def recipe_gpu_count(*, spec: Mapping[str, Any], engine: str) -> int | None:
    """GPUs a recipe's worker roles use (prefill + decode, or single; the router uses none).

    For ``sim`` (which takes no GPUs) it is ``spec.sim.gpus_modelled``: an int, or a per-role
    dict summed over roles; None when the recipe does not say. For other engines: the length of
    each worker role's ``gpus`` list summed, 0 when no role lists GPUs (llama.cpp on CPUs: the
    count is known to be zero, so there is no per-GPU figure); None when the spec has no roles.
    """
    if engine == "sim":
        modelled = (spec.get("sim") or {}).get("gpus_modelled")
        if isinstance(modelled, int) and not isinstance(modelled, bool):
            return modelled
        if isinstance(modelled, Mapping):
            return sum(int(v) for v in modelled.values()) or None
        return None
    roles = spec.get("roles") or {}
    if not roles:
        return None
    return sum(len((roles.get(r) or {}).get("gpus") or []) for r in WORKER_ROLES)


#: The engine flag that caps a request's prompt + output tokens, per engine (a recipe role's
#: ``flags``): llama-cpp-python's ``n_ctx``, SGLang's ``context-length``, vLLM's ``max-model-len``.
CONTEXT_FLAGS = {"llamacpp": "n_ctx", "sglang": "context-length", "vllm": "max-model-len"}


def _sim_profile(spec: Mapping[str, Any]):
    """The sim profile a sim recipe ``spec`` serves (``spec.sim.profile``, else the engine's
    default), or None when it does not load (the recipe was refused for that already)."""
    from deployments.engines.sim import DEFAULT_PROFILE
    from deployments.engines.simcore.profile import ProfileError, profile_load

    sim = spec.get("sim") if isinstance(spec.get("sim"), Mapping) else {}
    name = sim.get("profile") or DEFAULT_PROFILE
    try:
        return profile_load(str(name))
    except ProfileError:
        return None


def recipe_context_tokens(*, spec: Mapping[str, Any], engine: str) -> tuple[int, str] | None:
    """The smallest context length (tokens) a worker role of the recipe ``spec`` sets with its
    engine's context flag (:data:`CONTEXT_FLAGS`), with where it is set (``roles.single.flags.n_ctx``);
    for ``sim``, its profile's ``context_length`` (``sim profile demo-fast: context_length``).
    None when no worker role sets it (the engine's own default, or the model's, then applies and
    is not known here)."""
    if engine == "sim":
        profile = _sim_profile(spec)
        return (profile.context_length, f"sim profile {profile.name}: context_length") if profile else None
    flag = CONTEXT_FLAGS.get(engine)
    if flag is None:
        return None
    roles = spec.get("roles") or {}
    found: tuple[int, str] | None = None
    for role in WORKER_ROLES:
        value = ((roles.get(role) or {}).get("flags") or {}).get(flag) if isinstance(roles, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            if found is None or value < found[0]:
                found = (value, f"roles.{role}.flags.{flag}")
    return found


def recipe_kv_capacity(*, spec: Mapping[str, Any], engine: str) -> dict[str, Any] | None:
    """What bounds one request alone in the KV cache of the deployment of recipe ``spec``, when
    the recipe states it: ``{"tokens", "reserve", "where", "prefill_batch", "prefill_where"}``.

    Known only for ``sim``, from its profile: ``decode.kv_capacity_tokens`` (``tokens``) with
    ``decode.admission_reserve_tokens`` (``reserve``: head-room a new request needs beyond its
    prompt before it is admitted), and, for PD (the recipe has a prefill role), the prefill
    server's ``prefill.max_batch_tokens`` (``prefill_batch``: a longer prompt is refused there;
    None for a single server, which prefills a long prompt alone). SGLang and vLLM report their
    KV pool only once running (what they report is kept on the deployment when it becomes ready,
    its ``engine_limits``, which :func:`grid_context_problems` prefers), so from the recipe alone
    it is None for them (and llama.cpp): no capacity is guessed."""
    if engine != "sim":
        return None
    profile = _sim_profile(spec)
    if profile is None:
        return None
    roles = spec.get("roles") if isinstance(spec.get("roles"), Mapping) else {}
    where = f"sim profile {profile.name}"
    return {"tokens": profile.decode.kv_capacity_tokens, "reserve": profile.decode.admission_reserve_tokens,
            "where": f"{where}: decode.kv_capacity_tokens",
            "prefill_batch": profile.prefill.max_batch_tokens if "prefill" in roles else None,
            "prefill_where": f"{where}: prefill.max_batch_tokens"}


def grid_context_problems(grid: Mapping[str, Any], *, spec: Mapping[str, Any], engine: str,
                          reported: Mapping[str, Any] | None = None) -> dict[str, list[str]]:
    """Length pairs of a validated ``grid`` that one request cannot fit even alone on the
    deployment, keyed ``grid.lengths.<i>``: the engine refuses (or fails) every such request, so
    the point would measure only failures. Judged against what the engine servers reported about
    themselves once the deployment was ready (``reported``, the deployment's ``engine_limits``,
    :func:`deployments.engine_limits.reported_capacity`), else what the recipe states:

    * the context length (reported ``context_length``/``max_model_len``, else
      :func:`recipe_context_tokens`): input + output tokens above it;
    * the KV cache (reported ``max_total_num_tokens`` of the decode servers for PD, of the single
      server otherwise; else :func:`recipe_kv_capacity`, sim only): input + output tokens (at
      least input + the admission reserve, which only the sim reports) above its capacity;
    * for a PD ``sim`` deployment, an input above the prefill server's batch limit (its reported
      ``chunked_prefill_size``, else its profile's): the sim refuses such a prompt, while SGLang
      splits it into chunks, so for SGLang this is not a limit.

    Concurrency plays no part: requests that each fit alone but not all together are queued by
    the engine (admitted as the cache frees), never refused, so such a point is a measurement.
    Empty when all fit or nothing is known."""
    from deployments.engine_limits import reported_capacity

    ctx = recipe_context_tokens(spec=spec, engine=engine)
    kv = recipe_kv_capacity(spec=spec, engine=engine)
    told = reported_capacity(reported)
    if told is not None:
        if told["context"] is not None:
            ctx = (told["context"], told["context_where"])
        if told["tokens"] is not None:
            kv = {**(kv or {"prefill_batch": None, "prefill_where": None}),
                  "tokens": told["tokens"], "where": told["where"],
                  "reserve": told["reserve"] if told["reserve"] is not None else (kv or {}).get("reserve") or 0}
        if engine == "sim" and told["prefill_batch"] is not None and kv is not None:
            kv = {**kv, "prefill_batch": told["prefill_batch"], "prefill_where": told["prefill_where"]}
    out: dict[str, list[str]] = {}
    for i, (in_len, out_len) in enumerate(grid.get("lengths") or []):
        problems = []
        if ctx is not None and in_len + out_len > ctx[0]:
            tokens, where = ctx
            problems.append(
                f"{in_len}:{out_len} needs {in_len + out_len:,} tokens of context ({in_len} in + {out_len} out), "
                f"more than the deployment's {tokens:,} ({where}): the engine would refuse every request; "
                f"use shorter lengths or deploy with a larger context")
        if kv is not None:
            need = in_len + max(out_len, kv["reserve"])
            if need > kv["tokens"]:
                how = (f"{in_len} in + {out_len} out" if out_len >= kv["reserve"] else
                       f"{in_len} in + the {kv['reserve']} tokens reserved on admission, more than its {out_len} out")
                problems.append(
                    f"{in_len}:{out_len} needs {need:,} tokens of KV cache for one request alone ({how}), more than "
                    f"the deployment's {kv['tokens']:,} ({kv['where']}): the engine would refuse every request, "
                    f"even at concurrency 1; use shorter lengths or deploy with a larger KV cache")
            if kv["prefill_batch"] is not None and in_len > kv["prefill_batch"]:
                problems.append(
                    f"{in_len}:{out_len} has a {in_len:,}-token prompt, more than the prefill server takes "
                    f"({kv['prefill_batch']:,} tokens, {kv['prefill_where']}): the engine would refuse every "
                    f"request; use a shorter input length")
        if problems:
            out[f"grid.lengths.{i}"] = problems
    return out


def engine_batch_limits(*, spec: Mapping[str, Any], engine: str,
                        reported: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """How many requests the deployment of recipe ``spec`` runs at once, as far as it is known:
    what its servers reported once ready (``reported``, :func:`deployments.engine_limits.reported_batch_limits`),
    else for ``sim`` its profile's ``decode.max_running_requests`` and ``decode.kv_capacity_tokens``
    (per decode server; one server assumed). ``{"running", "running_where", "kv_tokens",
    "kv_where", "reserve", "servers"}``, absent values None; None when nothing is known (SGLang or
    vLLM not yet ready, llama.cpp)."""
    from deployments.engine_limits import reported_batch_limits

    told = reported_batch_limits(reported)
    profile = _sim_profile(spec) if engine == "sim" else None
    if told is None and profile is None:
        return None
    out = dict(told) if told is not None else {"running": None, "running_where": None, "kv_tokens": None,
                                              "kv_where": None, "reserve": None, "servers": 1}
    if profile is not None:
        where = f"sim profile {profile.name}"
        if out["running"] is None:
            n = profile.decode.max_running_requests
            out["running"], out["running_where"] = n, f"{where}: decode.max_running_requests {n}"
        if out["kv_tokens"] is None:
            n = profile.decode.kv_capacity_tokens
            out["kv_tokens"], out["kv_where"] = n, f"{where}: decode.kv_capacity_tokens {n}"
        if out["reserve"] is None:
            out["reserve"] = profile.decode.admission_reserve_tokens
    return out


def grid_engine_queue_notes(grid: Mapping[str, Any], *, spec: Mapping[str, Any], engine: str,
                            reported: Mapping[str, Any] | None = None) -> list[str]:
    """One sentence per length pair of a validated ``grid`` whose closed-loop points keep more
    requests in flight than the deployment runs at once (:func:`engine_batch_limits`): its
    running-request cap (``max_running_requests``, per server times the servers that run the
    batch) or how many requests of that pair's input + output tokens (at least input + the
    admission reserve) its KV cache holds together, whichever is smaller. Such a point is a
    legitimate measurement (the engine queues the rest and admits them as the batch frees: see
    :func:`grid_context_problems` for the pairs that never fit and are refused), but its TTFT then
    includes that wait, which the note says, so a long TTFT there is not read as slow prefill:
    ``c=4096 with 2000:2000: the engine runs at most 32 requests at once (reported by the single
    server's /get_server_info at ...: max_running_requests 32) and its KV cache holds 1 request of
    4,000 tokens at once, 2 as they start with 2,016 tokens each (reported ...: max_total_num_tokens
    5376); the other requests in flight wait in its queue, so TTFT includes that wait``. A point's load in flight is its concurrency, or its request
    count when that is smaller. Open-loop points (request rates) are not judged: how many are in
    flight depends on the engine's own speed. Empty when every point fits or nothing is known."""
    limits = engine_batch_limits(spec=spec, engine=engine, reported=reported)
    if limits is None:
        return []
    servers = limits["servers"] or 1
    notes = []
    for in_len, out_len in grid.get("lengths") or []:
        per_request = in_len + max(out_len, limits["reserve"] or 0)
        admitted = in_len + (limits["reserve"] or 0)
        kv_fit = (limits["kv_tokens"] // per_request) * servers if limits["kv_tokens"] else None
        kv_admit = (limits["kv_tokens"] // admitted) * servers if limits["kv_tokens"] else None
        running = limits["running"] * servers if limits["running"] else None
        at_once = min(x for x in (running, kv_fit) if x is not None) if (running or kv_fit is not None) else None
        if at_once is None:
            continue
        over = []
        for c in sorted(set(grid.get("concurrency") or [])):
            points = grid_points({**grid, "lengths": [[in_len, out_len]], "concurrency": [c], "request_rates": []})
            cap = points[0]["max_requests"] if points else None
            in_flight = min(c, cap) if cap else c
            if in_flight > at_once:
                over.append(c)
        if not over:
            continue
        each = f"; {servers} servers run the batch, each with that" if servers > 1 else ""
        parts = []
        if running is not None:
            parts.append(f"the engine runs at most {running:,} request{'s' if running != 1 else ''} at once "
                         f"({limits['running_where']}{each})")
        if kv_fit is not None:
            owner = "its" if parts else "the engine's"
            start = (f", {kv_admit:,} as they start with {admitted:,} tokens each" if kv_admit and kv_admit > kv_fit
                     else "")
            parts.append(f"{owner} KV cache holds {kv_fit:,} request{'s' if kv_fit != 1 else ''} of "
                         f"{per_request:,} tokens at once{start} ({limits['kv_where']}{each})")
        notes.append(f"c={','.join(map(str, over))} with {in_len}:{out_len}: " + " and ".join(parts)
                     + "; the other requests in flight wait in its queue, so TTFT includes that wait")
    return notes


def _ms(dist: Mapping[str, Any] | None) -> dict[str, float | None] | None:
    if not dist:
        return None
    return {k: (v * 1000.0 if isinstance(v, (int, float)) and k != "count" else v) for k, v in dist.items()
            if k in ("mean", "std", "p50", "p90", "p99")}


def failure_counts(summary: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """``(failed, aborted)`` of a stored summary: ``failed`` the requests that failed at the
    server (an error answer, a timeout, a broken stream), ``aborted`` those a stop (a cancel, or
    the deployment going down under the point) ended in flight, which are no failure of the
    server. A measured summary's ``failures`` counts the server's and its ``aborted`` the stop's
    (``requests`` = ``successes`` + ``failures`` + ``aborted``); one stored before that rule
    counted the aborted ones among ``failures`` too (``requests`` = ``successes`` + ``failures``,
    with ``aborted`` > 0), which is read here as the server's ``failures`` - ``aborted``. An imported
    summary has no ``aborted`` (None: its harness was not stopped by this control plane). Neither
    is ever a success."""
    failures = summary.get("failures", summary.get("failed"))
    aborted = summary.get("aborted")
    if not isinstance(aborted, int) or isinstance(aborted, bool) or aborted < 0:
        return failures, None
    requests, successes = summary.get("requests"), summary.get("successes")
    if (isinstance(failures, int) and not isinstance(failures, bool) and aborted
            and all(isinstance(v, int) and not isinstance(v, bool) for v in (requests, successes))
            and requests - successes == failures):
        return max(0, failures - aborted), min(aborted, max(0, failures))
    return failures, aborted


def aborted_only_throughput(summary: Mapping[str, Any]) -> float | None:
    """The output throughput (tok/s) of a stored measured summary whose every request a stop
    aborted in flight, none completed and none failed at the server, after they had streamed
    output tokens over a measured duration: ``output_tokens_aborted`` / ``duration_s``, what the
    server delivered (:func:`benchmarks.loadgen.run_summary`'s rule, basis
    ``completed_and_aborted``). The stored figure where there is one; a summary stored before that
    rule kept null for it and gets the same quotient. None for any other summary: one with a
    success (its own figure applies), a failure at the server, nothing streamed, no measured
    duration, or no ``output_tokens_aborted`` (imported, or stored before it was counted)."""
    successes, tokens, duration = (summary.get(k) for k in ("successes", "output_tokens_aborted", "duration_s"))
    failed, aborted = failure_counts(summary)
    counts_ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (successes, tokens, failed, aborted))
    if (not counts_ok or successes != 0 or failed != 0 or aborted <= 0 or tokens <= 0
            or summary.get("output_throughput_basis") != OUTPUT_BASIS_WITH_ABORTED):
        return None
    stored = summary.get("output_throughput_tok_s")
    if isinstance(stored, (int, float)) and not isinstance(stored, bool) and math.isfinite(stored) and stored > 0:
        return float(stored)
    if isinstance(duration, (int, float)) and not isinstance(duration, bool) and math.isfinite(duration) \
            and duration > 0:
        return tokens / duration
    return None


def point_limited_by(*, grid: Any, request_rate: float | None, duration_s: float | None) -> str | None:
    """What ended a point of a sweep with normalised ``grid`` as planned (the analysis'
    ``limited_by``): ``"requests"`` for a request cap alone (``requests``, or for a closed-loop
    point ``requests_per_concurrency``), ``"duration"`` for a time limit alone (the point's
    ``duration_s`` in seconds, else the grid's), ``"both"`` for a cap and a time limit (whichever
    came first); None when neither is known (an imported run, no grid)."""
    grid = grid if isinstance(grid, Mapping) else {}
    capped = bool(grid.get("requests") or (request_rate is None and grid.get("requests_per_concurrency")))
    timed = (duration_s if duration_s is not None else grid.get("duration_s")) is not None
    return "both" if capped and timed else "requests" if capped else "duration" if timed else None


def summary_point(*, summary: Mapping[str, Any], concurrency: int | None, request_rate: float | None,
                  input_len: int | None, output_len: int | None, num_gpus: int | None,
                  flags: Iterable[str], limited_by: str | None = None) -> dict[str, Any]:
    """One stored run as the dict :meth:`benchmarks.analysis.SweepPoint.from_summary` reads.

    Measured summaries hold latencies in seconds (``ttft_s``); the analysis wants ms (``ttft_ms``).
    Imported summaries already hold ``*_ms`` keys and pass through. Every ``std`` of fewer than 2
    samples is None (the distribution's ``count``; for TTFT, TPOT and E2E without one, the
    successes), also in summaries stored with 0.0 for it. A measured summary's
    ``decode_steps`` (the client-seen decode step, :func:`benchmarks.loadgen.run_summary`) becomes
    ``decode_step_ms`` (its ``step_s`` in ms), ``decode_batch`` (``batch_mean``, sequences) and
    ``decode_stall_share`` (``stall_share``, 0..1); all None without one. ``failed`` counts the
    requests that failed at the server and ``aborted`` those a stop ended in flight
    (:func:`failure_counts`), so a point cut by a cancel is not read as one the server failed.
    Without a success ``output_throughput_tok_s`` and ``request_throughput`` are None, except for
    a point whose every request a stop aborted after they streamed tokens
    (:func:`aborted_only_throughput`: that figure, and 0.0 requests/s).

    ``achieved_concurrency`` (requests, closed loop only; None when unknown): the most requests the
    run had in flight at once, its summary's ``achieved_concurrency_max``, else for an imported
    summary without it the requests it sent when fewer than ``concurrency`` (a closed loop of c
    slots that sends n < c requests never has more than n in flight). A closed-loop run that
    reached less than its ``concurrency`` and was not stopped early gets the flag
    ``concurrency_shortfall`` here too, so a run stored before that flag compared against the
    target itself (it compared against min(c, n)) or an imported one is analysed at the load it
    reached, not the one it is labelled with. ``limited_by`` (:func:`point_limited_by`) passes
    through.
    """
    out: dict[str, Any] = {"concurrency": concurrency, "request_rate": request_rate, "input_len": input_len,
                           "output_len": output_len, "num_gpus": num_gpus, "flags": list(flags), "limited_by": limited_by,
                           "output_throughput_tok_s": summary.get("output_throughput_tok_s")}
    out["completed"] = summary.get("successes", summary.get("completed"))
    for metric in ("ttft", "tpot", "itl", "e2e"):
        raw = summary.get(f"{metric}_ms") or summary.get(f"{metric}_s")
        dist = summary.get(f"{metric}_ms") or _ms(summary.get(f"{metric}_s"))
        # A standard deviation needs 2 samples: the distribution's count, else (TTFT, TPOT and E2E
        # have one sample per successful request) the successes. Summaries stored before this rule
        # held 0.0 for one sample.
        n = raw.get("count") if isinstance(raw, Mapping) else None
        if not isinstance(n, int) and metric != "itl":
            n = out["completed"]
        if isinstance(dist, Mapping) and isinstance(n, int) and n < 2 and dist.get("std") is not None:
            dist = {**dist, "std": None}
        out[f"{metric}_ms"] = dist
    out["request_throughput"] = summary.get("request_throughput_req_s")
    out["failed"], out["aborted"] = failure_counts(summary)
    if out["completed"] == 0:
        # No success, no measured throughput (summaries stored before this rule held 0.0), except
        # the tokens a point's aborted requests streamed when a stop aborted every one of them
        # (aborted_only_throughput): what the server delivered, with 0.0 requests completed per second.
        streamed = aborted_only_throughput(summary)
        out["output_throughput_tok_s"] = streamed
        out["request_throughput"] = 0.0 if streamed is not None else None
    steps = summary.get("decode_steps")
    steps = steps if isinstance(steps, Mapping) else {}
    step_s = steps.get("step_s")
    out["decode_step_ms"] = step_s * 1000.0 if isinstance(step_s, (int, float)) else None
    out["decode_batch"] = steps.get("batch_mean")
    out["decode_stall_share"] = steps.get("stall_share")
    reached = None
    if concurrency is not None and request_rate is None:
        peak = summary.get("achieved_concurrency_max")
        sent = ((out["completed"] or 0) + (out["failed"] or 0) + (out["aborted"] or 0)
                if out["completed"] is not None else None)
        if isinstance(peak, (int, float)) and not isinstance(peak, bool) and math.isfinite(peak):
            reached = peak
        elif sent is not None and 0 < sent < concurrency:
            reached = sent
        if reached is not None and reached < concurrency and not summary.get("stopped_early") \
                and "concurrency_shortfall" not in out["flags"]:
            out["flags"].append("concurrency_shortfall")
    out["achieved_concurrency"] = reached
    return out


def summary_mark_partial(summary: dict[str, Any], *, reason: str, planned_requests: int | None,
                         planned_duration_s: float | None) -> dict[str, Any]:
    """Mark ``summary`` (:func:`benchmarks.loadgen.run_summary` of a point stopped partway, e.g.
    by a cancel; changed in place and returned) as partial, so nothing reads it as a measurement
    of the point: ``summary["partial"] = {"reason", "completed", "sent", "planned",
    "planned_duration_s", "aborted", "not_sent"}`` (``completed``: successful requests;
    ``sent``: requests sent, the aborted ones included; ``planned``: the point's request count,
    None for a point limited by time alone, whose plan is ``planned_duration_s`` seconds;
    ``aborted``: requests the stop ended in flight; ``not_sent``: planned requests never sent,
    None when unknown), the flag :data:`benchmarks.analysis.PARTIAL_FLAG` raised in
    ``summary["flags"]`` (the analysis and the comparison leave such a point out) and
    ``ended_by`` ``"cancelled"``."""
    flags = summary.get("flags")
    if not isinstance(flags, dict):
        flags = {str(f): True for f in (flags or [])}
    flags[PARTIAL_FLAG] = True
    summary["flags"] = flags
    summary["ended_by"] = "cancelled"
    summary["partial"] = {
        "reason": reason, "completed": int(summary.get("successes") or 0), "sent": int(summary.get("requests") or 0),
        "planned": planned_requests, "planned_duration_s": planned_duration_s,
        "aborted": int(summary.get("aborted") or 0), "not_sent": summary.get("not_sent"),
    }
    return summary


def partial_text(summary: Mapping[str, Any]) -> str | None:
    """``37/400 completed, cancelled`` (``20 requests completed in 3.21 s of the planned 8 s,
    cancelled`` for a point limited by time alone: requests against the time it ran and the time
    it was planned to run) for a summary marked by :func:`summary_mark_partial`; None for any other."""
    part = summary.get("partial") if isinstance(summary, Mapping) else None
    if not isinstance(part, Mapping):
        return None
    done = part.get("completed", 0)
    why = "cancelled" if str(part.get("reason") or "").startswith("cancel") or summary.get("ended_by") == "cancelled" \
        else "stopped"
    if part.get("planned") is not None:
        return f"{done}/{part['planned']} completed, {why}"
    requests = f"{done} request{'s' if done != 1 else ''} completed"
    if part.get("planned_duration_s") is not None:
        ran = summary.get("duration_s")
        ran_text = f" in {ran:.2f} s" if isinstance(ran, (int, float)) and math.isfinite(ran) else ""
        return f"{requests}{ran_text} of the planned {part['planned_duration_s']:g} s, {why}"
    return f"{requests}, {why}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` with ``noun`` in the number it takes, thousands separated: ``1 request``, ``0
    requests``, ``4,000 requests`` (``plural`` where adding ``s`` is wrong)."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


def requests_sent(summary: Mapping[str, Any] | None, progress: Mapping[str, Any] | None) -> int | None:
    """The measured requests a point sent: its summary's ``requests`` (aborted ones included), else
    ``requests_sent`` of its progress (0 for a point stopped while it built its prompts or warmed
    up, whose progress has ``ended_during``: warm-up requests are never counted), else None (not
    known: still running, or stopped with only its live counts)."""
    if isinstance(summary, Mapping) and isinstance(summary.get("requests"), int):
        return summary["requests"]
    if isinstance(progress, Mapping) and isinstance(progress.get("requests_sent"), int) \
            and not isinstance(progress.get("requests_sent"), bool):
        return progress["requests_sent"]
    return None


#: ``ended_by`` in the progress of a point whose worker was lost while it ran (the process running
#: the sweep ended, or wrote no heartbeat: :func:`benchmarks.services.sweeps.lost_point_progress`).
WORKER_LOST = "worker_lost"


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def lost_point(progress: Mapping[str, Any] | None) -> bool:
    """Whether ``progress`` is that of a point whose worker was lost while it ran."""
    return isinstance(progress, Mapping) and progress.get("ended_by") == WORKER_LOST


def lost_point_text(progress: Mapping[str, Any] | None) -> str:
    """What a point whose worker was lost had sent, as its last progress report counted them:
    ``32 requests sent: 16 finished, 16 in flight when the worker was lost (as its last progress
    report counted them, 2026-12-07 10:24:08 UTC)``, or, where that report did not count the
    requests sent (written before they were counted, or none came), ``16 finished; how many more
    were sent is unknown: ...``. The process that ran the point took its per-request records with
    it, so a last report is all that is left, and a request may have ended after it: the counts
    are said to be as of that report. ``""`` for any other point, and for one lost before its first
    measured request (its progress has ``ended_during``: the run's reason says that phase)."""
    if not lost_point(progress) or progress.get("ended_during"):
        return ""
    assert progress is not None
    done, failed = _count(progress.get("done")) or 0, _count(progress.get("failed")) or 0
    finished = f"{done:,} finished" + (f" ({failed:,} failed)" if failed else "")
    stamp = str(progress.get("counts_as_of") or "")
    when = f", {stamp[:19].replace('T', ' ')} UTC" if len(stamp) >= 19 else ""
    as_of = f"as its last progress report counted them{when}"
    sent, lost = _count(progress.get("requests_sent")), _count(progress.get("lost_in_flight"))
    if sent is None or lost is None:
        return (f"{finished} ({as_of}); how many more were sent and were in flight is unknown: that report did "
                "not count the requests sent, and the process took the point's records with it")
    before = (_count(progress.get("aborted")) or 0) - lost
    return (f"{counted(sent, 'request')} sent: {finished}, {lost:,} in flight when the worker was lost"
            + (f", {before:,} aborted in flight before" if before > 0 else "") + f" ({as_of})")


def sent_of_planned_text(sent: int, planned: int | None) -> str:
    """A stopped point's requests, what it sent first: ``0 sent of 4 planned``, or ``55`` where no
    count was planned or it sent them all."""
    if planned is not None and planned > sent:
        return f"{sent:,} sent of {planned:,} planned"
    return f"{sent:,}"


def _fmt(v: Any, scale: float = 1.0, digits: int = 1) -> str:
    if v is None:
        return "-"
    return f"{v * scale:.{digits}f}"


TABLE_COLUMNS = ("c", "requests", "out tok/s", "tok/s/GPU", "TTFT p50 ms", "TTFT p99 ms", "TPOT mean ms",
                 "ITL p99 ms", "E2E p50 s", "failures", "flags")


def results_table_rows(runs: Iterable[Any], *, num_gpus: int | None) -> list[list[str]]:
    """Rows (strings) of the results table for ``runs`` (BenchmarkRun-like objects with
    ``concurrency``, ``request_rate``, ``num_requests``, ``summary``, ``flags`` and optionally
    ``progress``); per-GPU column is ``-`` when ``num_gpus`` is unknown. Latencies read from the
    seconds-based summary. A point stopped before its summary was stored shows the load
    generator's last count of failures (``3512 (live)``, ``0 (live) (+2 aborted)``) rather than
    ``-``. A failed or cancelled point shows what it sent, with its plan where it sent less
    (``63 sent of 400 planned``; ``0 sent of 4 planned`` for one stopped while it warmed up,
    :func:`requests_sent`), as the page, the API and the CSV count it: a partial point (a cancelled
    one that kept what completed, :func:`summary_mark_partial`) counts the requests it sent, those
    the cancel aborted in flight included, and shows its flag (its reason says what completed). The
    failures column counts the requests the server failed; those a stop ended in flight are
    written apart (``0 (+2 aborted)``). A point whose worker was lost shows its last report's
    counts, never ``(live)``: what it sent, those it had in flight then among the aborted
    (``0 (+16 aborted)``), or ``16 finished, sent unknown`` where that report did not count them
    (:func:`lost_point_text`)."""
    rows = []
    for run in runs:
        s = run.summary or {}
        failures, aborted = failure_counts(s)
        if failures is not None and aborted:
            failures = f"{failures} (+{aborted} aborted)"
        progress = getattr(run, "progress", None) or {}
        lost = lost_point(progress) and not s
        if failures is None and not s and isinstance(progress, Mapping) and isinstance(progress.get("failed"), int):
            live_aborted = progress.get("aborted")
            # A point whose worker was lost is no live count: its last report's, the requests in
            # flight then among the aborted (the report text below the table says as of when).
            failures = f"{progress['failed']}" + ("" if lost else " (live)") + (
                f" (+{live_aborted} aborted)" if isinstance(live_aborted, int) and live_aborted > 0 else "")
        sent = requests_sent(s, progress)
        if failures is None and sent == 0:
            failures = 0   # it ended having sent nothing: none failed (as the page and the API say)
        p = summary_point(summary=s, concurrency=run.concurrency, request_rate=run.request_rate,
                          input_len=run.input_len, output_len=run.output_len, num_gpus=num_gpus, flags=run.flags)
        tok = p["output_throughput_tok_s"]
        load = str(run.concurrency) if run.concurrency is not None else f"{run.request_rate:g}/s"
        planned = run.num_requests if not getattr(run, "duration_s", None) else None
        if lost and sent is None:
            # Its worker was lost before a report counted what it sent: never its plan.
            requests = f"{_count(progress.get('done')) or 0} finished, sent unknown"
        elif sent is not None and getattr(run, "status", None) in ("failed", "cancelled"):
            # What it sent, never its plan nor only what completed: a partial point's aborted
            # requests were sent too (as the page, the API and the CSV count them).
            requests = sent_of_planned_text(sent, planned)
        elif partial_text(s):
            requests = partial_text(s)
        elif sent is not None:
            requests = f"{sent}"
        else:
            requests = str(run.num_requests or "-")
        rows.append([
            load, requests, _fmt(tok),
            _fmt(tok / num_gpus if tok is not None and num_gpus else None, digits=2),
            _fmt((p["ttft_ms"] or {}).get("p50"), digits=0), _fmt((p["ttft_ms"] or {}).get("p99"), digits=0),
            _fmt((p["tpot_ms"] or {}).get("mean")), _fmt((p["itl_ms"] or {}).get("p99")),
            _fmt((p["e2e_ms"] or {}).get("p50"), scale=0.001, digits=2),
            "-" if failures is None else str(failures), ",".join(run.flags) or "-",
        ])
    return rows


#: Marks the load cell of a point whose numbers are not kept as a measurement (it failed: the
#: deployment went down or stopped answering under it); :data:`NOT_KEPT_LEGEND` says so below the table.
NOT_KEPT_MARK = "!"
NOT_KEPT_LEGEND = f"{NOT_KEPT_MARK} not kept as a measurement: the point failed (see the reason), its numbers are discarded"


#: The columns a terminal report wraps its text at (the table itself is narrower; a longer cell's
#: text goes below it as a numbered note).
REPORT_WIDTH = 100

#: The results table's header as two lines, one pair per column of :data:`TABLE_COLUMNS`: the
#: quantity above, its unit (or the short name) below.
TABLE_HEADERS = (("", "c"), ("", "requests"), ("out", "tok/s"), ("tok/s", "/GPU"), ("TTFT", "p50 ms"),
                 ("TTFT", "p99 ms"), ("TPOT", "mean ms"), ("ITL", "p99 ms"), ("E2E", "p50 s"), ("", "failed"),
                 ("", "flags"))
assert len(TABLE_HEADERS) == len(TABLE_COLUMNS)

#: The widest a cell may be; a longer one keeps its leading number (if that fits) and a reference
#: to a note below the table (``37/400 [1]``, ``[2]``).
CELL_MAX = 10


def _short_cell(text: str, ref: str) -> str:
    """``text`` cut for a cell with its note reference ``ref`` (``[1]``): its first word when that
    is a count (``37/400``, ``0``, ``3512``) and fits :data:`CELL_MAX` with the reference, else the
    reference alone."""
    head = text.split()[0].rstrip(",;") if text.split() else ""
    if head and re.fullmatch(r"[0-9][0-9./]*", head) and len(head) + 1 + len(ref) <= CELL_MAX:
        return f"{head} {ref}"
    return ref


def _lengths_cell(run: Any) -> str:
    """A run's input/output lengths for the results table: ``32/32``, ``var`` when drawn from a
    range, ``-`` when not known (as :attr:`benchmarks.models.BenchmarkRun.label` words them)."""
    flags = getattr(run, "flags", None) or []
    if getattr(run, "input_len", None) and getattr(run, "output_len", None):
        return f"{run.input_len}/{run.output_len}"
    return "var" if "variable_lengths" in flags and "lengths_unknown" not in flags else "-"


def results_table_lines(runs: Iterable[Any], *, num_gpus: int | None) -> list[str]:
    """The results table for a terminal, narrow enough for 80-120 columns: a two-line header
    (units below the quantities, :data:`TABLE_HEADERS`), one aligned row per run, then the notes
    of cells longer than :data:`CELL_MAX` (numbered in the order met; the same text in the same
    column shares its number; each led by its column's full name, ``[2] failures: 0 (+2
    aborted)``), each wrapped to :data:`REPORT_WIDTH`, after :data:`NOT_KEPT_LEGEND` when a point
    failed (its load cell ends in :data:`NOT_KEPT_MARK`). The cells are those of
    :func:`results_table_rows`; the flags are written apart by ``, ``. When the runs have more
    than one input/output length pair, an ``in/out tokens`` column follows the load
    (:func:`_lengths_cell`), so each row says which pair it measured."""
    runs = list(runs)
    body = results_table_rows(runs, num_gpus=num_gpus)
    failed = [getattr(run, "status", None) == "failed" for run in runs]
    notes: dict[tuple[int, str], int] = {}
    for row, bad in zip(body, failed, strict=True):
        if bad:
            row[0] = f"{row[0]} {NOT_KEPT_MARK}"
        for i, cell in enumerate(row):
            if i == 0 or len(cell) <= CELL_MAX:
                continue
            text = cell.replace(",", ", ") if TABLE_COLUMNS[i] == "flags" else cell
            number = notes.setdefault((i, text), len(notes) + 1)
            row[i] = _short_cell(text, f"[{number}]")
    headers = [list(pair) for pair in TABLE_HEADERS]
    if any(getattr(run, "concurrency", None) is None for run in runs):
        headers[0] = ["", "load"]   # a request rate's cell says its unit: 2.5/s
    lengths = [_lengths_cell(run) for run in runs]
    if len(set(lengths)) > 1:
        # More than one length pair: each row says its own, as the page's point label and the CSV do.
        headers.insert(1, ["in/out", "tokens"])
        for row, cell in zip(body, lengths, strict=True):
            row.insert(1, cell)
    rows = [[h[0] for h in headers], [h[1] for h in headers], *body]
    widths = [max(len(r[i]) for r in rows) for i in range(len(headers))]
    lines = ["  ".join(cell.rjust(w) if i < len(widths) - 1 else cell
                       for i, (cell, w) in enumerate(zip(r, widths, strict=True))).rstrip() for r in rows]
    if any(failed):
        lines += textwrap.wrap(NOT_KEPT_LEGEND, width=REPORT_WIDTH - 2, subsequent_indent="  ")
    for (i, text), number in notes.items():
        ref = f"[{number}] "
        lines += textwrap.wrap(f"{ref}{TABLE_COLUMNS[i]}: {text}", width=REPORT_WIDTH - 2,
                               subsequent_indent=" " * len(ref), break_on_hyphens=False)
    return lines
