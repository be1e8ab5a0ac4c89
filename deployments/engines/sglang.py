"""SGLang adapter: ``python -m sglang.launch_server`` workers and the ``sglang-router``.

Worker argv (single or PD role)::

    python -m sglang.launch_server --model-path M --served-model-name N --host H --port P
        --tp-size T [--dp-size D] [--ep-size E] --base-gpu-id 0
        [--disaggregation-mode prefill|decode --disaggregation-transfer-backend nixl|mooncake
         [--disaggregation-bootstrap-port B]]  (PD only; the bootstrap port on prefill only)
        [allowlisted flags, sorted by name]

``--base-gpu-id`` is always 0 because the process only sees the GPUs in its
``CUDA_VISIBLE_DEVICES``, which CUDA renumbers from 0; the physical ids stay in the plan's
``gpu_ids``. Router argv (PD)::

    python -m sglang_router.launch_router --pd-disaggregation
        --prefill http://H:P BOOTSTRAP --decode http://H:P --host H --port P [flags]

The router always gets ``--prometheus-port``: sglang-router starts its metrics server whether
asked or not, on port 29000 by default, so a second router on the host would die on that port
("address already in use", a panic in ``metrics.rs``). Without the recipe flag the port is
:func:`router_metrics_port_default`, and it is part of the plan's ports (``metrics``) like
every other port, for the database and pre-spawn port checks.

Flag names and choices follow ``sglang/srt/server_args.py`` (0.5.x) and
``python -m sglang_router.launch_router --help`` (sglang-router 0.3.x). The table of every
allowed flag with its type is in ``docs/recipes.md``, generated from these dicts.
"""
from __future__ import annotations

from deployments.engines.base import (
    PD_ROUTER_RESERVED,
    EngineAdapter,
    FlagSpec,
    RenderContext,
    RenderedCommand,
    flags_argv,
    http_url,
)

PD_ROLES = frozenset({"prefill", "decode"})

# Choice lists follow the argparse choices of sglang/srt/server_args.py across the 0.5.x
# releases (the union, so a recipe written for one 0.5 release validates for the next; the
# engine still refuses a value its own build lacks, at start-up).
ATTENTION_BACKENDS = (
    "triton", "torch_native", "flex_attention", "nsa", "dsa", "dsv4", "compressed",
    "cutlass_mla", "fa3", "fa4", "flashinfer", "flashmla", "trtllm_mla", "trtllm_mha",
    "cutedsl_mla", "tokenspeed_mla", "dual_chunk_flash_attn", "hpc_ops",
    "minicpm_flashattn", "minicpm_flashinfer",
    "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
)
# Native sparse attention (DeepSeek V3.2 / V4 indexer) kernels: NSA_CHOICES / DSA_CHOICES.
NSA_BACKENDS = (
    "flashmla_prefill", "flashmla_decode", "flashmla_sparse", "flashmla_sparse_q8", "flashmla_kv",
    "flashmla_auto", "flashinfer_sparse_mla", "fa3", "tilelang", "aiter", "trtllm",
)
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16", "fp4_e2m1")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
# LOAD_FORMAT_CHOICES minus the formats that fetch weights from somewhere other than the
# model path (remote, remote_instance, private, runai_streamer): weights come from under the
# model roots or from spec.model.name, nowhere else.
LOAD_FORMATS = (
    "auto", "pt", "safetensors", "npcache", "dummy", "sharded_state", "presharded", "gguf",
    "bitsandbytes", "layered", "mistral", "fastsafetensors",
)
MOE_A2A_BACKENDS = (
    "none", "deepep", "deepep_v2", "mooncake", "nixl", "mori", "flashinfer", "megamoe", "pplx",
    "ascend_fuseep", "ascend_tp",
)
SCHEDULE_POLICIES = (
    "lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key", "hrrn", "shortest-prefill-first",
)
SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH")

WORKER_FLAGS: dict[str, FlagSpec] = {
    "mem-fraction-static": FlagSpec("float", "fraction of GPU memory for weights + KV cache", 0.01, 1.0),
    "max-running-requests": FlagSpec("int", "cap on concurrently running requests", 1, 1_000_000),
    "max-total-tokens": FlagSpec("int", "KV cache pool size in tokens", 1, 100_000_000),
    "max-prefill-tokens": FlagSpec("int", "tokens per prefill batch", 1, 10_000_000),
    "chunked-prefill-size": FlagSpec("int", "chunk size for long prefills (-1 disables)", -1, 10_000_000),
    "context-length": FlagSpec("int", "maximum context length in tokens", 1, 100_000_000),
    "page-size": FlagSpec("int", "tokens per KV cache page", 1, 4096),
    "kv-cache-dtype": FlagSpec("choice", "KV cache data type", choices=KV_CACHE_DTYPES),
    "dtype": FlagSpec("choice", "weight/activation dtype", choices=DTYPES),
    "quantization": FlagSpec("name", "quantisation method (fp8, awq, gptq, modelopt_fp4, ...)"),
    "load-format": FlagSpec("choice", "weight file format", choices=LOAD_FORMATS),
    "attention-backend": FlagSpec("choice", "attention kernel backend", choices=ATTENTION_BACKENDS),
    "prefill-attention-backend": FlagSpec("choice", "attention backend for prefill batches", choices=ATTENTION_BACKENDS),
    "decode-attention-backend": FlagSpec("choice", "attention backend for decode batches", choices=ATTENTION_BACKENDS),
    "nsa-prefill-backend": FlagSpec("choice", "native sparse attention kernel for prefill", choices=NSA_BACKENDS),
    "nsa-decode-backend": FlagSpec("choice", "native sparse attention kernel for decode", choices=NSA_BACKENDS),
    "sampling-backend": FlagSpec("choice", "sampling kernels", choices=("flashinfer", "pytorch")),
    "moe-a2a-backend": FlagSpec("choice", "MoE all-to-all backend", choices=MOE_A2A_BACKENDS),
    "deepep-mode": FlagSpec("choice", "DeepEP dispatch mode", choices=("normal", "low_latency", "auto")),
    "enable-dp-attention": FlagSpec("bool", "data-parallel attention inside the TP group (GPUs = tp)"),
    "enable-dp-lm-head": FlagSpec("bool", "vocabulary-parallel LM head across DP attention ranks"),
    "enable-eplb": FlagSpec("bool", "expert-parallel load balancer"),
    "trust-remote-code": FlagSpec("bool", "run the Python code shipped in the model directory (plan warns)"),
    "disable-cuda-graph": FlagSpec("bool", "run decode without CUDA graphs"),
    "cuda-graph-max-bs": FlagSpec("int", "largest batch size captured in a CUDA graph", 1, 4096),
    "disable-radix-cache": FlagSpec("bool", "turn off prefix (radix) caching"),
    "enable-torch-compile": FlagSpec("bool", "torch.compile the model"),
    "torch-compile-max-bs": FlagSpec("int", "largest batch size compiled", 1, 4096),
    "enable-mixed-chunk": FlagSpec("bool", "mix prefill chunks with decode batches"),
    "schedule-policy": FlagSpec("choice", "request scheduling policy", choices=SCHEDULE_POLICIES),
    "schedule-conservativeness": FlagSpec("float", "how conservatively to admit requests", 0.0, 100.0),
    "stream-interval": FlagSpec("int", "decode steps between streamed chunks", 1, 10_000),
    "random-seed": FlagSpec("int", "sampling RNG seed", 0, 2**31 - 1),
    "watchdog-timeout": FlagSpec("float", "seconds before a hung batch kills the server", 1.0, 86_400.0),
    "skip-server-warmup": FlagSpec("bool", "skip the warm-up request at start-up"),
    "log-level": FlagSpec("choice", "server log level", choices=("debug", "info", "warning", "error", "critical")),
    "log-requests": FlagSpec("bool", "log every request"),
    "enable-metrics": FlagSpec("bool", "expose Prometheus /metrics"),
    "enable-cache-report": FlagSpec("bool", "report cached tokens in usage"),
    "decode-log-interval": FlagSpec("int", "decode steps between log lines", 1, 1_000_000),
    # SGLang takes a built-in template name (chatml, llama-3-instruct, ...) or a file path.
    "chat-template": FlagSpec("template", "chat template: built-in name or a file under a model root"),
    "tokenizer-path": FlagSpec("model", "tokenizer directory or repository, if not the model's"),
    "reasoning-parser": FlagSpec("name", "reasoning output parser (deepseek-r1, qwen3, ...)"),
    "tool-call-parser": FlagSpec("name", "tool call parser (deepseekv3, qwen25, llama3, ...)"),
    "speculative-algorithm": FlagSpec("choice", "speculative decoding", choices=SPECULATIVE_ALGORITHMS),
    "speculative-num-steps": FlagSpec("int", "draft steps", 1, 64),
    "speculative-eagle-topk": FlagSpec("int", "EAGLE top-k", 1, 64),
    "speculative-num-draft-tokens": FlagSpec("int", "draft tokens verified per step", 1, 256),
    "disaggregation-ib-device": FlagSpec("names", "RDMA device(s) for KV transfer, e.g. mlx5_0,mlx5_1", roles=PD_ROLES),
    "num-reserved-decode-tokens": FlagSpec("int", "tokens reserved per decode request", 0, 1_000_000, roles=frozenset({"decode"})),
}

_ROLE_FIELD = "spec.roles.<role>"
WORKER_RESERVED: dict[str, str] = {
    "model-path": "spec.model",
    "model": "spec.model",
    "served-model-name": "spec.served_model_name",
    "host": f"{_ROLE_FIELD}.host",
    "port": f"{_ROLE_FIELD}.port",
    "tp-size": f"{_ROLE_FIELD}.tp",
    "tp": f"{_ROLE_FIELD}.tp",
    "tensor-parallel-size": f"{_ROLE_FIELD}.tp",
    "dp-size": f"{_ROLE_FIELD}.dp",
    "dp": f"{_ROLE_FIELD}.dp",
    "data-parallel-size": f"{_ROLE_FIELD}.dp",
    "ep-size": f"{_ROLE_FIELD}.ep",
    "ep": f"{_ROLE_FIELD}.ep",
    "expert-parallel-size": f"{_ROLE_FIELD}.ep",
    "base-gpu-id": f"{_ROLE_FIELD}.gpus",
    "gpu-id-step": f"{_ROLE_FIELD}.gpus",
    "device": f"{_ROLE_FIELD}.gpus",
    "disaggregation-mode": "spec.roles (the role's name)",
    "disaggregation-transfer-backend": "spec.transfer_backend",
    "disaggregation-bootstrap-port": "spec.roles.prefill.bootstrap_port",
    "api-key": "spec.secrets",
    "nnodes": "spec.roles (one node per recipe)",
    "node-rank": "spec.roles (one node per recipe)",
    "dist-init-addr": "spec.roles (one node per recipe)",
}

ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "manual")
ROUTER_FLAGS: dict[str, FlagSpec] = {
    "policy": FlagSpec("choice", "load-balancing policy", choices=ROUTER_POLICIES),
    "prefill-policy": FlagSpec("choice", "policy for prefill workers", choices=ROUTER_POLICIES + ("bucket",)),
    "decode-policy": FlagSpec("choice", "policy for decode workers", choices=ROUTER_POLICIES),
    "cache-threshold": FlagSpec("float", "cache-aware match threshold", 0.0, 1.0),
    "balance-abs-threshold": FlagSpec("int", "absolute load imbalance threshold", 0, 1_000_000),
    "balance-rel-threshold": FlagSpec("float", "relative load imbalance threshold", 0.0, 1000.0),
    "eviction-interval-secs": FlagSpec("int", "radix tree eviction interval", 1, 86_400),
    "max-tree-size": FlagSpec("int", "radix tree size cap", 1, 2**40),
    "max-payload-size": FlagSpec("int", "request body cap in bytes", 1, 2**40),
    "worker-startup-timeout-secs": FlagSpec("int", "seconds to wait for workers", 1, 86_400),
    "worker-startup-check-interval": FlagSpec("int", "seconds between worker checks", 1, 3600),
    "request-timeout-secs": FlagSpec("int", "per-request timeout", 1, 86_400),
    "max-concurrent-requests": FlagSpec("int", "concurrency cap (-1 = none)", -1, 1_000_000),
    "queue-size": FlagSpec("int", "pending request queue size", 0, 1_000_000),
    "queue-timeout-secs": FlagSpec("int", "seconds a request may queue", 1, 86_400),
    "retry-max-retries": FlagSpec("int", "retries per request", 0, 100),
    "disable-retries": FlagSpec("bool", "no retries"),
    "disable-circuit-breaker": FlagSpec("bool", "no circuit breaker"),
    # The circuit breaker's knobs (sglang-router --help; defaults 10, 3, 60 s, 120 s). A restarted
    # worker counts as ready again only once the router serves through it, so an open circuit
    # (cb-timeout-duration-secs) is how long a restart stays "starting".
    "cb-failure-threshold": FlagSpec("int", "failures before a worker's circuit opens", 1, 1_000_000),
    "cb-success-threshold": FlagSpec("int", "successes in half-open before the circuit closes", 1, 1_000_000),
    "cb-timeout-duration-secs": FlagSpec("int", "seconds an open circuit refuses before half-open", 1, 86_400),
    "cb-window-duration-secs": FlagSpec("int", "sliding window for counting failures, seconds", 1, 86_400),
    "health-check-interval-secs": FlagSpec("int", "seconds between worker health checks", 1, 3600),
    "health-check-timeout-secs": FlagSpec("int", "worker health check timeout", 1, 3600),
    "health-failure-threshold": FlagSpec("int", "failed checks before a worker is out", 1, 1000),
    "dp-aware": FlagSpec("bool", "route to DP ranks individually"),
    "log-level": FlagSpec("choice", "router log level", choices=("debug", "info", "warn", "error")),
    "prometheus-port": FlagSpec("port", "port of the router's Prometheus endpoint"),
}

ROUTER_RESERVED: dict[str, str] = {
    **PD_ROUTER_RESERVED,
    "log-dir": "the process log file Ceiling manages",
    "prometheus-host": "spec.roles.router.host (the metrics server binds where the router does)",
}


def sglang_generate_check() -> dict:
    """One-token generation against SGLang's native ``/generate`` (greedy, 1 new token)."""
    return {
        "method": "POST",
        "path": "/generate",
        "json": {"text": "Hello", "sampling_params": {"max_new_tokens": 1, "temperature": 0}},
    }


def recipe_ports(roles: dict) -> set[int]:
    """Every port the normalised ``roles`` of a recipe take: HTTP, bootstrap, side-channel
    blocks (``tp × dp`` ports from ``side_channel_port``) and integer ``*-port`` flags."""
    taken: set[int] = set()
    for role in roles.values():
        for key in ("port", "bootstrap_port"):
            if isinstance(role.get(key), int):
                taken.add(role[key])
        if isinstance(role.get("side_channel_port"), int):
            first = role["side_channel_port"]
            taken.update(range(first, first + role.get("tp", 1) * role.get("dp", 1)))
        for name, value in (role.get("flags") or {}).items():
            if name.endswith("port") and isinstance(value, int) and not isinstance(value, bool):
                taken.add(value)
    return taken


def router_metrics_port_default(router_port: int, taken: set[int]) -> int:
    """The router's Prometheus port when the recipe sets no ``prometheus-port``: the first
    port above ``router_port`` that is not in ``taken`` (the recipe's other ports), counting
    down from ``router_port`` instead when none is left up to 65535. Deterministic, so every
    rendering of one recipe agrees, and next to the router's own port (router 31080 →
    metrics 31081), away from sglang-router's fixed default 29000 that two routers on one
    host would both take. ``ValueError`` when no port 1024-65535 is left."""
    for candidate in (*range(router_port + 1, 65536), *range(router_port - 1, 1023, -1)):
        if candidate not in taken:
            return candidate
    raise ValueError("no free port 1024-65535 left for the router's metrics server")


def sglang_router_render(ctx: RenderContext, *, python: str) -> RenderedCommand:
    """Argv of ``sglang_router.launch_router`` in PD mode over the recipe's prefill and decode
    roles (shared by the SGLang and ``sim`` engines, whose workers speak the same protocol)."""
    roles = ctx.spec["roles"]
    prefill, decode, router = roles["prefill"], roles["decode"], ctx.role
    argv = [
        python, "-m", "sglang_router.launch_router",
        "--pd-disaggregation",
        "--prefill", http_url(prefill["host"], prefill["port"]), str(prefill["bootstrap_port"]),
        "--decode", http_url(decode["host"], decode["port"]),
        "--host", router["host"],
        "--port", str(router["port"]),
    ]
    flags = dict(router["flags"])
    # The router starts a metrics server whether asked or not (sglang-router 0.3: port 29000 on
    # 0.0.0.0 by default): give it an explicit port (recipe validation fills the default in;
    # a spec stored without one gets the same default here) and keep it on the router's own
    # address, where the node agent scrapes it.
    if "prometheus-port" not in flags:
        flags["prometheus-port"] = router_metrics_port_default(router["port"], recipe_ports(roles))
    argv += flags_argv(flags, ROUTER_FLAGS)
    argv += ["--prometheus-host", router["host"]]
    ports = {"http": router["port"], "metrics": flags["prometheus-port"]}
    return RenderedCommand(
        argv=argv,
        ports=ports,
        health_path="/health",
        generate=sglang_generate_check(),
        extra_readiness=[
            {
                "kind": "router_workers",
                "method": "GET",
                "path": "/workers",
                "expect": {"prefill": 1, "decode": 1},
                "description": "the router lists one prefill and one decode worker",
            }
        ],
    )


class SGLangAdapter(EngineAdapter):
    """SGLang (``sglang.launch_server``) on GPUs, single server or PD with NIXL or Mooncake."""

    name = "sglang"
    uses_gpus = True
    topologies = ("single", "pd")
    # SGLang's --disaggregation-transfer-backend choices that Ceiling supports.
    transfer_backends = ("nixl", "mooncake")
    worker_flags = WORKER_FLAGS
    router_flags = ROUTER_FLAGS
    worker_reserved = WORKER_RESERVED
    router_reserved = ROUTER_RESERVED
    # SGLang's own defaults: --port 30000, --disaggregation-bootstrap-port 8998.
    default_ports = {"single": 30000, "prefill": 30000, "decode": 30001, "router": 8000}
    default_bootstrap_port = 8998

    def expected_gpu_count(self, role: dict) -> tuple[int, str]:
        """With ``enable-dp-attention`` the DP ranks live inside the TP group (GPUs = tp);
        otherwise every DP replica has its own TP group (GPUs = tp × dp)."""
        if role["flags"].get("enable-dp-attention"):
            return role["tp"], f"tp = {role['tp']} (enable-dp-attention puts DP inside the TP group)"
        return super().expected_gpu_count(role)

    def parallel_problems(self, role: dict) -> dict[str, str]:
        """SGLang carves MoE expert groups out of the TP group, so ``ep`` must divide ``tp``;
        with DP attention, ``dp`` must divide ``tp`` too."""
        problems: dict[str, str] = {}
        tp, dp, ep = role["tp"], role["dp"], role["ep"]
        if tp % ep:
            problems["ep"] = f"ep {ep} must divide tp {tp} (SGLang splits the TP group into expert groups)"
        if role["flags"].get("enable-dp-attention") and tp % dp:
            problems["dp"] = f"dp {dp} must divide tp {tp} when enable-dp-attention is set"
        return problems

    def render_worker(self, ctx: RenderContext) -> RenderedCommand:
        role, spec = ctx.role, ctx.spec
        argv = [
            ctx.executables["python"], "-m", "sglang.launch_server",
            "--model-path", spec["model"]["path"] or spec["model"]["name"],
            "--served-model-name", spec["served_model_name"],
            "--host", role["host"],
            "--port", str(role["port"]),
            "--tp-size", str(role["tp"]),
        ]
        if role["dp"] != 1:
            argv += ["--dp-size", str(role["dp"])]
        if role["ep"] != 1:
            argv += ["--ep-size", str(role["ep"])]
        # CUDA_VISIBLE_DEVICES renumbers the role's GPUs from 0, so the base id is always 0.
        argv += ["--base-gpu-id", "0"]
        ports = {"http": role["port"]}
        if ctx.role_name in PD_ROLES:
            argv += [
                "--disaggregation-mode", ctx.role_name,
                "--disaggregation-transfer-backend", spec["transfer_backend"],
            ]
            if ctx.role_name == "prefill":
                argv += ["--disaggregation-bootstrap-port", str(role["bootstrap_port"])]
                ports["bootstrap"] = role["bootstrap_port"]
        argv += flags_argv(role["flags"], WORKER_FLAGS)
        # A PD worker cannot serve a generation on its own (the prefill needs a decode peer
        # and bootstrap fields from the router), so its readiness is /health; the end-to-end
        # generation is checked through the router.
        generate = None if ctx.role_name in PD_ROLES else sglang_generate_check()
        return RenderedCommand(argv=argv, ports=ports, health_path="/health", generate=generate)

    def render_router(self, ctx: RenderContext) -> RenderedCommand:
        return sglang_router_render(ctx, python=ctx.executables["python"])


ADAPTER = SGLangAdapter()
