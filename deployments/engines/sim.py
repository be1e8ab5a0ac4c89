"""The ``sim`` engine: Ceiling's SGLang-compatible simulator, ``python -m deployments.engines.sim_server``.

Command-line contract of the simulator (the server module implements exactly these)::

    python -m deployments.engines.sim_server --role single|prefill|decode --host H --port P
        [--bootstrap-port B]        (prefill only: where the router's bootstrap fields point)
        --model-name N              (the served model name reported by /v1/models and usage)
        --profile NAME              (performance profile, e.g. seed-sm120-fallback)
        [--seed S] [--time-scale X] (RNG seed for service-time jitter; multiplier on every
                                     modelled duration, <1 runs faster than the profile)
        [--startup-delay-s X]       (wall seconds before the server answers; overrides the
                                     profile's start-up delay)
        [--stream-coalesce N]       (the stream events of N output tokens go out in one write)
        [--health-busy-s X]         (wall seconds /health computes, blocking the server, before
                                     it answers while a generation is in flight; default 0)

It speaks SGLang's HTTP API (``/health``, ``/generate``, OpenAI routes, ``/metrics``), so PD
deployments use the real ``sglang_router.launch_router`` in front of it. It takes no GPUs.
"""
from __future__ import annotations

from deployments.engines.base import EngineAdapter, FlagSpec, RenderContext, RenderedCommand, flags_argv
from deployments.engines.sglang import ROUTER_FLAGS, ROUTER_RESERVED, sglang_generate_check, sglang_router_render

SIM_MODULE = "deployments.engines.sim_server"
DEFAULT_PROFILE = "seed-sm120-fallback"

WORKER_FLAGS: dict[str, FlagSpec] = {
    "seed": FlagSpec("int", "RNG seed for service-time jitter", 0, 2**31 - 1),
    "time-scale": FlagSpec("float", "multiplier on every modelled duration", 0.001, 1000.0),
    "startup-delay-s": FlagSpec("float", "wall seconds before the server answers (overrides the profile)", 0.0, 3600.0),
    "stream-coalesce": FlagSpec("int", "output tokens whose stream events go out in one network write, as a buffering "
                                "proxy delivers them (default 1: each event at once)", 1, 1_000_000),
    "health-busy-s": FlagSpec("float", "wall seconds /health computes before it answers while a generation is in "
                              "flight, serving nothing else meanwhile, as a server that serves one request at a "
                              "time (default 0: it answers at once)", 0.0, 3600.0),
}

_ROLE_FIELD = "spec.roles.<role>"
WORKER_RESERVED: dict[str, str] = {
    "role": "spec.roles (the role's name)",
    "host": f"{_ROLE_FIELD}.host",
    "port": f"{_ROLE_FIELD}.port",
    "bootstrap-port": "spec.roles.prefill.bootstrap_port",
    "model-name": "spec.served_model_name",
    "profile": "spec.sim.profile",
}


class SimAdapter(EngineAdapter):
    """Simulated SGLang server driven by a performance profile; CPU only, single or PD."""

    name = "sim"
    uses_gpus = False
    reads_model_path = False
    topologies = ("single", "pd")
    # Accepted so a sim recipe can mirror a real one; the simulator models the transfer.
    transfer_backends = ("nixl", "mooncake")
    worker_flags = WORKER_FLAGS
    router_flags = ROUTER_FLAGS
    worker_reserved = WORKER_RESERVED
    router_reserved = ROUTER_RESERVED
    default_ports = {"single": 31000, "prefill": 31000, "decode": 31001, "router": 31080}
    default_bootstrap_port = 31998

    def render_worker(self, ctx: RenderContext) -> RenderedCommand:
        role, spec = ctx.role, ctx.spec
        argv = [
            ctx.executables["python"], "-m", SIM_MODULE,
            "--role", ctx.role_name,
            "--host", role["host"],
            "--port", str(role["port"]),
        ]
        ports = {"http": role["port"]}
        if ctx.role_name == "prefill":
            argv += ["--bootstrap-port", str(role["bootstrap_port"])]
            ports["bootstrap"] = role["bootstrap_port"]
        argv += ["--model-name", spec["served_model_name"], "--profile", spec["sim"]["profile"]]
        argv += flags_argv(role["flags"], WORKER_FLAGS)
        generate = sglang_generate_check() if ctx.role_name == "single" else None
        return RenderedCommand(argv=argv, ports=ports, health_path="/health", generate=generate)

    def render_router(self, ctx: RenderContext) -> RenderedCommand:
        return sglang_router_render(ctx, python=ctx.executables["python"])


ADAPTER = SimAdapter()
