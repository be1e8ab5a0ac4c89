"""vLLM adapter: ``vllm serve`` workers and ``vllm-router`` for PD.

Worker argv::

    vllm serve MODEL --served-model-name N --host H --port P --tensor-parallel-size T
        [--data-parallel-size D] [--enable-expert-parallel]
        [--kv-transfer-config {"kv_connector":"NixlConnector","kv_role":"kv_both"}]  (PD only)
        [allowlisted flags, sorted by name]

In PD each worker also gets ``VLLM_NIXL_SIDE_CHANNEL_HOST`` / ``VLLM_NIXL_SIDE_CHANNEL_PORT``
(the NIXL handshake listener; vLLM's default port 5600 would collide when prefill and decode
share a host, hence a distinct port per role). vLLM offsets the side-channel port per DP rank,
so a role reserves the block ``[port, port + tp × dp)`` in the port-uniqueness check.

Expert parallelism in vLLM is a switch: with ``--enable-expert-parallel`` the EP size is
TP × DP, so a recipe's ``ep`` is either 1 or exactly ``tp × dp``.

Router argv (PD)::

    vllm-router --pd-disaggregation --prefill http://H:P --decode http://H:P --host H --port P

Flag names follow ``vllm serve --help`` (vLLM 0.10 and later) and the vllm-router README; the
table of every allowed flag with its type is in ``docs/recipes.md``.
"""
from __future__ import annotations

import json

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

# kv_both lets either side initiate the transfer; it is what vLLM's NIXL examples use for
# both the prefill and the decode instance.
KV_TRANSFER_CONFIG = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}

# AttentionBackendEnum member names (vllm/v1/attention/backends/registry.py), the values of
# ``--attention-backend`` in the vLLM releases that have it (older ones read the same names
# from VLLM_ATTENTION_BACKEND). TORCH_SDPA (vision encoders only), NO_ATTENTION and CUSTOM
# (a plug-in slot) are not server choices.
ATTENTION_BACKENDS = (
    "FLASH_ATTN", "FLASH_ATTN_DIFFKV", "TRITON_ATTN", "TRITON_FLASH_ATTN", "FLASHINFER",
    "FLASHINFER_MLA", "FLASHINFER_MLA_SPARSE", "TRITON_MLA", "CUTLASS_MLA", "FLASHMLA",
    "FLASHMLA_SPARSE", "FLASH_ATTN_MLA", "FLEX_ATTENTION", "TREE_ATTN", "CPU_ATTN",
    "ROCM_ATTN", "ROCM_AITER_MLA", "ROCM_AITER_TRITON_MLA", "ROCM_AITER_FA", "ROCM_AITER_MLA_SPARSE",
    "ROCM_AITER_UNIFIED_ATTN", "XPU_MLA_SPARSE",
)
# CacheDType in vllm/config/cache.py.
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
# vLLM's LoadFormats minus those that fetch weights from elsewhere than the model path
# (tensorizer URIs, runai_streamer object stores).
LOAD_FORMATS = ("auto", "pt", "safetensors", "npcache", "dummy", "sharded_state", "gguf", "bitsandbytes",
                "mistral", "fastsafetensors")

WORKER_FLAGS: dict[str, FlagSpec] = {
    "gpu-memory-utilization": FlagSpec("float", "fraction of GPU memory vLLM may use", 0.01, 1.0),
    "max-model-len": FlagSpec("int", "maximum context length in tokens", 1, 100_000_000),
    "max-num-seqs": FlagSpec("int", "maximum sequences per batch", 1, 1_000_000),
    "max-num-batched-tokens": FlagSpec("int", "maximum tokens per batch", 1, 100_000_000),
    "block-size": FlagSpec("int", "tokens per KV cache block", 1, 1024),
    "kv-cache-dtype": FlagSpec("choice", "KV cache data type", choices=KV_CACHE_DTYPES),
    "dtype": FlagSpec("choice", "weight/activation dtype", choices=DTYPES),
    "quantization": FlagSpec("name", "quantisation method (fp8, awq, gptq_marlin, ...)"),
    "load-format": FlagSpec("choice", "weight file format", choices=LOAD_FORMATS),
    "attention-backend": FlagSpec("choice", "attention kernel backend", choices=ATTENTION_BACKENDS),
    "enforce-eager": FlagSpec("bool", "no CUDA graphs"),
    "enable-prefix-caching": FlagSpec("bool", "prefix caching on"),
    "no-enable-prefix-caching": FlagSpec("bool", "prefix caching off"),
    "enable-chunked-prefill": FlagSpec("bool", "chunked prefill on"),
    "async-scheduling": FlagSpec("bool", "overlap scheduling with execution"),
    "enable-eplb": FlagSpec("bool", "expert-parallel load balancer"),
    "trust-remote-code": FlagSpec("bool", "run the Python code shipped in the model directory (plan warns)"),
    "swap-space": FlagSpec("float", "CPU swap space per GPU in GiB", 0.0, 1024.0),
    "seed": FlagSpec("int", "RNG seed", 0, 2**31 - 1),
    "tokenizer": FlagSpec("model", "tokenizer directory or repository, if not the model's"),
    # vLLM has no built-in template names: the value is a file, or (refused here) an inline
    # Jinja template, which would put free text on the command line.
    "chat-template": FlagSpec("path", "chat template file (Jinja) under a model root"),
    "reasoning-parser": FlagSpec("name", "reasoning output parser (deepseek_r1, qwen3, ...)"),
    "tool-call-parser": FlagSpec("name", "tool call parser (hermes, llama3_json, ...)"),
    "enable-auto-tool-choice": FlagSpec("bool", "let the model choose tools"),
    "disable-log-stats": FlagSpec("bool", "no periodic stats logging"),
    "uvicorn-log-level": FlagSpec("choice", "HTTP server log level", choices=("debug", "info", "warning", "error", "critical", "trace")),
}

_ROLE_FIELD = "spec.roles.<role>"
WORKER_RESERVED: dict[str, str] = {
    "model": "spec.model",
    "served-model-name": "spec.served_model_name",
    "host": f"{_ROLE_FIELD}.host",
    "port": f"{_ROLE_FIELD}.port",
    "tensor-parallel-size": f"{_ROLE_FIELD}.tp",
    "tp": f"{_ROLE_FIELD}.tp",
    "data-parallel-size": f"{_ROLE_FIELD}.dp",
    "dp": f"{_ROLE_FIELD}.dp",
    "enable-expert-parallel": f"{_ROLE_FIELD}.ep",
    "kv-transfer-config": "spec.transfer_backend",
    "api-key": "spec.secrets",
    "data-parallel-address": "spec.roles (one node per recipe)",
    "data-parallel-rpc-port": "spec.roles (one node per recipe)",
    "headless": "spec.roles (one node per recipe)",
}

ROUTER_FLAGS: dict[str, FlagSpec] = {
    "policy": FlagSpec("choice", "load-balancing policy", choices=("random", "round_robin", "cache_aware", "power_of_two", "consistent_hash")),
    "intra-node-data-parallel-size": FlagSpec("int", "DP ranks behind each worker URL", 1, 1024),
    "request-timeout-secs": FlagSpec("int", "per-request timeout", 1, 86_400),
    "worker-startup-timeout-secs": FlagSpec("int", "seconds to wait for workers", 1, 86_400),
    "log-level": FlagSpec("choice", "router log level", choices=("debug", "info", "warn", "error")),
    "prometheus-port": FlagSpec("port", "port of the router's Prometheus endpoint"),
}

ROUTER_RESERVED: dict[str, str] = dict(PD_ROUTER_RESERVED)


def vllm_generate_check(served_model_name: str) -> dict:
    """One-token completion through vLLM's OpenAI-compatible ``/v1/completions``."""
    return {
        "method": "POST",
        "path": "/v1/completions",
        "json": {"model": served_model_name, "prompt": "Hello", "max_tokens": 1, "temperature": 0},
    }


class VLLMAdapter(EngineAdapter):
    """vLLM (``vllm serve``) on GPUs, single server or PD over NIXL (``NixlConnector``)."""

    name = "vllm"
    uses_gpus = True
    topologies = ("single", "pd")
    transfer_backends = ("nixl",)
    worker_flags = WORKER_FLAGS
    router_flags = ROUTER_FLAGS
    worker_reserved = WORKER_RESERVED
    router_reserved = ROUTER_RESERVED
    # vLLM's own default --port is 8000; in PD the router takes 8000 and the workers move.
    default_ports = {"single": 8000, "prefill": 8100, "decode": 8200, "router": 8000}
    # vLLM's default VLLM_NIXL_SIDE_CHANNEL_PORT is 5600; decode gets its own block.
    default_side_channel_ports = {"prefill": 5600, "decode": 5700}

    def parallel_problems(self, role: dict) -> dict[str, str]:
        """``ep`` is 1 (off) or tp × dp (``--enable-expert-parallel``); vLLM has no other size."""
        world = role["tp"] * role["dp"]
        if role["ep"] not in (1, world):
            return {"ep": f"ep must be 1 or tp × dp = {world} (vLLM's expert parallelism spans the whole TP × DP group), got {role['ep']}"}
        return {}

    def render_worker(self, ctx: RenderContext) -> RenderedCommand:
        role, spec = ctx.role, ctx.spec
        argv = [
            ctx.executables["vllm"], "serve", spec["model"]["path"] or spec["model"]["name"],
            "--served-model-name", spec["served_model_name"],
            "--host", role["host"],
            "--port", str(role["port"]),
            "--tensor-parallel-size", str(role["tp"]),
        ]
        if role["dp"] != 1:
            argv += ["--data-parallel-size", str(role["dp"])]
        if role["ep"] != 1:
            argv.append("--enable-expert-parallel")
        env: dict[str, str] = {}
        ports = {"http": role["port"]}
        if ctx.role_name in PD_ROLES:
            argv += ["--kv-transfer-config", json.dumps(KV_TRANSFER_CONFIG, separators=(",", ":"))]
            env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = _bind_to_connect(role["host"])
            env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(role["side_channel_port"])
            ports["side_channel"] = role["side_channel_port"]
        argv += flags_argv(role["flags"], WORKER_FLAGS)
        # A PD worker alone cannot complete a request that expects a KV transfer; the
        # end-to-end generation is checked through the router.
        generate = None if ctx.role_name in PD_ROLES else vllm_generate_check(spec["served_model_name"])
        return RenderedCommand(argv=argv, env=env, ports=ports, health_path="/health", generate=generate)

    def render_router(self, ctx: RenderContext) -> RenderedCommand:
        roles = ctx.spec["roles"]
        prefill, decode, router = roles["prefill"], roles["decode"], ctx.role
        argv = [
            ctx.executables["vllm-router"],
            "--pd-disaggregation",
            "--prefill", http_url(prefill["host"], prefill["port"]),
            "--decode", http_url(decode["host"], decode["port"]),
            "--host", router["host"],
            "--port", str(router["port"]),
        ]
        argv += flags_argv(router["flags"], ROUTER_FLAGS)
        ports = {"http": router["port"]}
        if "prometheus-port" in router["flags"]:
            ports["metrics"] = router["flags"]["prometheus-port"]
        return RenderedCommand(
            argv=argv,
            ports=ports,
            health_path="/health",
            generate=vllm_generate_check(ctx.spec["served_model_name"]),
        )


def _bind_to_connect(host: str) -> str:
    # The side-channel host is advertised to the peer, so a wildcard bind must become an
    # address the peer can reach; on one node that is loopback.
    return {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


ADAPTER = VLLMAdapter()
