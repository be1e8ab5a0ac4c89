"""Prometheus metrics of the ``sim`` engine, named and shaped like SGLang's ``/metrics``.

Names follow SGLang's production metrics (``docs/references/production_metrics.md``; see
``/work/shared/fixtures/engine-metrics/sglang-docs-sample.prom``): gauges and counters carry the
``model_name`` label. Latency histograms are in wall-clock seconds of this process, so under
``--time-scale`` they show the accelerated times. Metrics that exist only in the simulator use
the ``sim:`` prefix so nobody mistakes them for an SGLang series.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# SGLang's own TTFT buckets stop at 30 s; longer ones are added because queueing at high
# concurrency in slow profiles (the seed's 8.8 s TTFT at c = 16) would otherwise crowd +Inf.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 15.0, 20.0, 25.0, 30.0, 60.0, 120.0)
ITL_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.15,
               0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0, 5.0)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 60.0, 100.0, 150.0, 200.0, 300.0, 600.0)


class SimMetrics:
    """All series of one server in a private registry; ``render()`` gives the exposition text."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        r, lab = self.registry, ["model_name"]
        self.num_running_reqs = Gauge("sglang:num_running_reqs", "The number of running requests", lab, registry=r)
        self.num_queue_reqs = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue", lab, registry=r)
        self.num_used_tokens = Gauge("sglang:num_used_tokens", "The number of used tokens", lab, registry=r)
        self.token_usage = Gauge("sglang:token_usage", "The token usage", lab, registry=r)
        self.gen_throughput = Gauge("sglang:gen_throughput", "The generate throughput (token/s)", lab, registry=r)
        self.cache_hit_rate = Gauge("sglang:cache_hit_rate", "The cache hit rate", lab, registry=r)
        self.num_retracted_reqs = Gauge("sglang:num_retracted_reqs", "The number of retracted requests", lab, registry=r)
        self.prealloc_queue = Gauge("sglang:num_decode_prealloc_queue_reqs",
                                    "Requests waiting for decode KV space (PD decode)", lab, registry=r)
        self.transfer_queue = Gauge("sglang:num_decode_transfer_queue_reqs",
                                    "Requests whose KV is being received (PD decode)", lab, registry=r)
        self.prompt_tokens = Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", lab, registry=r)
        self.generation_tokens = Counter("sglang:generation_tokens", "Number of generation tokens processed.", lab, registry=r)
        self.num_requests = Counter("sglang:num_requests", "Number of requests finished.", lab, registry=r)
        self.num_aborted = Counter("sglang:num_aborted_requests", "Number of requests aborted.", lab, registry=r)
        self.ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              lab, buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             lab, buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("sglang:e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds",
                             lab, buckets=E2E_BUCKETS, registry=r)
        self.queue_time = Histogram("sglang:queue_time_seconds", "Histogram of queueing time in seconds.",
                                    lab, buckets=TTFT_BUCKETS, registry=r)
        self.kv_fetches = Counter("sim:kv_fetch", "KV hand-overs received from a prefill bootstrap listener.", lab, registry=r)
        self.kv_fetch_bytes = Counter("sim:kv_fetch_bytes", "Modelled KV bytes received from prefill.", lab, registry=r)
        self.kv_served = Counter("sim:kv_served", "KV hand-overs served on the bootstrap listener.", lab, registry=r)
        self.cache_hit_rate.labels(model_name).set(0.0)

    def render(self) -> bytes:
        """Prometheus text exposition of every series."""
        return generate_latest(self.registry)
