"""Ceiling's load generator: streaming client, datasets, arrival processes, run driver, metrics.

Pure Python (no Django models); the sweep/run rows call :func:`loadgen_run` and
:func:`run_summary`. Definitions follow ``/work/shared/design/metrics.md``.

Typical use::

    specs = random_dataset(num=200, input_len=256, output_len=256, seed=1)
    cfg = LoadConfig(base_url="http://127.0.0.1:30000", api=Api.GENERATE, model="m", concurrency=16,
                     warmup=16, ignore_eos=True, fixed_output=True,
                     metrics_urls=["http://127.0.0.1:30000/metrics"])
    result = loadgen_run(config=cfg, specs=specs, progress=print)   # progress: optional, ~2 calls/s
    summary = run_summary(result, slo=Slo(ttft_s=1.0, tpot_s=0.05))
    result.records.save("run.npz")

A duration-limited point instead of one pass: ``LoadConfig(..., duration_s=60.0)`` cycles through
``specs`` for 60 s (``max_requests`` caps it as well); ``result.duration_limited`` says so.

A run whose target goes away stops sending after :data:`UNREACHABLE_FAILURES` requests in a row
that the server never answered; ``result.stopped_early`` says why and ``result.not_sent`` how many
planned requests were not sent (they are not failures).

A run its caller stops (``loadgen_run(should_stop=...)``, answering the reason) raises
:class:`LoadgenStopped`; stopped while measuring, its ``result`` holds what was sent: the finished
requests, those in flight aborted as failures ``aborted: <reason>``, ``halted`` and ``not_sent``.
"""
from .arrivals import arrival_offsets, scheduled_rate
from .calibrate import dataset_calibrate_text, dataset_calibrate_text_at, prompts_token_counts
from .client import TRANSPORTS, StreamingClient
from .datasets import (
    RequestSpec, TextCalibration, length_draws, prompts_file_dataset, random_dataset, sharegpt_dataset,
    text_calibration_fit,
)
from .driver import (
    UNREACHABLE_FAILURES, LoadConfig, LoadgenStopped, Progress, RunResult, WorkerStats, loadgen_run, loadgen_run_async,
    server_generation_tokens,
)
from .metrics import OUTPUT_BASIS_COMPLETED, OUTPUT_BASIS_WITH_ABORTED, Slo, distribution, in_flight, nearest_rank, run_summary
from .protocol import Api, EventInfo, event_inspect, request_body
from .records import RecordStore, RequestOutcome
from .sse import SseParser
from .tokenized import tokenized_text_dataset

__all__ = [
    "OUTPUT_BASIS_COMPLETED", "OUTPUT_BASIS_WITH_ABORTED",
    "TRANSPORTS", "UNREACHABLE_FAILURES", "Api", "EventInfo", "LoadConfig", "LoadgenStopped", "Progress", "RecordStore", "RequestOutcome", "RequestSpec", "RunResult", "Slo",
    "SseParser", "StreamingClient", "TextCalibration", "WorkerStats", "arrival_offsets", "dataset_calibrate_text",
    "dataset_calibrate_text_at", "prompts_token_counts",
    "distribution", "event_inspect", "in_flight", "length_draws", "loadgen_run", "loadgen_run_async",
    "nearest_rank", "prompts_file_dataset", "random_dataset", "request_body", "run_summary", "scheduled_rate",
    "server_generation_tokens", "sharegpt_dataset", "text_calibration_fit", "tokenized_text_dataset",
]
