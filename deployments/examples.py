"""Example recipes and node facts used by seeding, the docs and the tests.

The seed deployment (the motivating story in the architecture notes): DeepSeek-V4-Flash on
SGLang with PD disaggregation on the 8-GPU node ``seed-8gpu``, prefill TP4 on GPU0-3 pinned
to NUMA node 0, decode TP4 on GPU4-7 pinned to NUMA node 1, KV cache over NIXL, router on
port 30080 (not 8000, the web UI's default port: a control plane on the node would hold it). ``SGLANG_FP8_PAGED_MQA_LOGITS_TORCH=1`` is the seed's environment: it selects
SGLang's torch fallback for the FP8 paged MQA-logits kernel on GPUs without a native one.

Recipes are plain dicts ``{name, description, engine, topology, node, spec}``; ``node`` is
the node's name. :func:`example_recipes` returns fresh copies computed from the current
settings (the llama.cpp model path lies under ``settings.VAR_DIR / "models"``);
:data:`EXAMPLE_RECIPES` is the same list built at import time.
"""
from __future__ import annotations

import copy

from django.conf import settings

from deployments.topology import GpuFacts, NodeFacts, NumaFacts

SEED_NODE = "seed-8gpu"
LOCAL_NODE = "local"
SEED_MODEL_PATH = "/models/DeepSeek-V4-Flash"
SEED_SERVED_NAME = "DeepSeek-V4-Flash"
SEED_ENV = {"SGLANG_FP8_PAGED_MQA_LOGITS_TORCH": "1"}
SIM_PROFILE = "seed-sm120-fallback"


def seed_node_facts_example() -> NodeFacts:
    """Facts of ``seed-8gpu`` as tests need them: 64 CPUs and 8 compute-capability 12.0 GPUs
    over two NUMA nodes (GPU0-3 + CPUs 0-31 on node 0, GPU4-7 + CPUs 32-63 on node 1),
    numactl installed. Self-contained, so recipe tests do not depend on the discovery data
    in ``deployments/data/seed-8gpu.json`` (which describes the same layout)."""
    return NodeFacts(
        name=SEED_NODE,
        hostname=SEED_NODE,
        cpu_count=64,
        gpus=[
            GpuFacts(index=i, numa_node=0 if i < 4 else 1, compute_capability="12.0",
                     cpu_affinity="0-31" if i < 4 else "32-63")
            for i in range(8)
        ],
        numa_nodes=[NumaFacts(index=0, cpus=tuple(range(0, 32))), NumaFacts(index=1, cpus=tuple(range(32, 64)))],
        tools={"numactl": "/usr/bin/numactl", "nvidia-smi": "/usr/bin/nvidia-smi"},
    )


def local_node_facts_example(*, cpu_count: int = 4, numactl: bool = False) -> NodeFacts:
    """A CPU-only ``local`` node with one NUMA node holding CPUs ``0..cpu_count-1``; stands in
    for discovery in tests that must not depend on the machine they run on."""
    return NodeFacts(
        name=LOCAL_NODE,
        hostname="localhost",
        cpu_count=cpu_count,
        numa_nodes=[NumaFacts(index=0, cpus=tuple(range(cpu_count)))],
        tools={"numactl": "/usr/bin/numactl" if numactl else None},
    )


def _seed_pd() -> dict:
    return {
        "name": "seed-v4-flash-pd",
        "description": "DeepSeek-V4-Flash on SGLang, PD: prefill TP4 on GPU0-3 / NUMA node 0, "
                       "decode TP4 on GPU4-7 / NUMA node 1, KV cache over NIXL, router on :30080.",
        "engine": "sglang",
        "topology": "pd",
        "node": SEED_NODE,
        "spec": {
            "model": {"path": SEED_MODEL_PATH},
            "served_model_name": SEED_SERVED_NAME,
            "roles": {
                "prefill": {"gpus": [0, 1, 2, 3], "tp": 4, "numa_node": 0, "port": 30000, "bootstrap_port": 8998},
                "decode": {"gpus": [4, 5, 6, 7], "tp": 4, "numa_node": 1, "port": 30001},
                "router": {"host": "0.0.0.0", "port": 30080},
            },
            "transfer_backend": "nixl",
            "env": dict(SEED_ENV),
            "startup_timeout_s": 1800,
        },
    }


def _seed_tp4() -> dict:
    return {
        "name": "seed-v4-flash-tp4",
        "description": "DeepSeek-V4-Flash on SGLang, one TP4 server on GPU0-3 pinned to NUMA node 0 "
                       "(the single-node baseline the PD numbers are compared with).",
        "engine": "sglang",
        "topology": "single",
        "node": SEED_NODE,
        "spec": {
            "model": {"path": SEED_MODEL_PATH},
            "served_model_name": SEED_SERVED_NAME,
            "roles": {"single": {"gpus": [0, 1, 2, 3], "tp": 4, "numa_node": 0, "host": "0.0.0.0", "port": 30000}},
            "env": dict(SEED_ENV),
            "startup_timeout_s": 1800,
        },
    }


def _local_sim_pd() -> dict:
    return {
        "name": "local-sim-pd",
        "description": "The seed PD topology on the built-in simulator: sim prefill on CPU 0, sim decode "
                       "on CPU 1, the real sglang-router in front, profile fitted to the seed sweep.",
        "engine": "sim",
        "topology": "pd",
        "node": LOCAL_NODE,
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4-Flash"},
            "served_model_name": SEED_SERVED_NAME,
            "roles": {
                "prefill": {"cpus": "0", "host": "127.0.0.1", "port": 31000, "bootstrap_port": 31998},
                "decode": {"cpus": "1", "host": "127.0.0.1", "port": 31001},
                # The router serves Prometheus on 29000 unless told otherwise; a second
                # router on the host would then fail to start.
                "router": {"host": "127.0.0.1", "port": 31080, "flags": {"prometheus-port": 31081}},
            },
            # The seed PD used 4 GPUs for prefill and 4 for decode; per-GPU numbers follow that.
            "sim": {"profile": SIM_PROFILE, "gpus_modelled": {"prefill": 4, "decode": 4}},
            "startup_timeout_s": 60,
            "stop_grace_s": 10,
        },
    }


def _local_sim_single() -> dict:
    return {
        "name": "local-sim-single",
        "description": "The seed single-node TP4 baseline on the built-in simulator: one sim server on "
                       "CPU 0, profile fitted to the seed's TP4 numbers (4 GPUs modelled).",
        "engine": "sim",
        "topology": "single",
        "node": LOCAL_NODE,
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4-Flash"},
            "served_model_name": SEED_SERVED_NAME,
            "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31100}},
            "sim": {"profile": SIM_PROFILE + "-tp4", "gpus_modelled": 4},
            "startup_timeout_s": 60,
            "stop_grace_s": 10,
        },
    }


def _local_llamacpp() -> dict:
    return {
        "name": "local-llamacpp",
        "description": "A tiny random-weight GGUF model on llama.cpp (llama-cpp-python), pinned to CPUs 0-1.",
        "engine": "llamacpp",
        "topology": "single",
        "node": LOCAL_NODE,
        "spec": {
            "model": {"path": str(settings.VAR_DIR / "models" / "tiny-random.gguf")},
            "served_model_name": "tiny-random",
            "roles": {"single": {"cpus": "0-1", "host": "127.0.0.1", "port": 31090, "flags": {"n_ctx": 512}}},
            "startup_timeout_s": 120,
            "stop_grace_s": 10,
        },
    }


def example_recipes() -> list[dict]:
    """All example recipes, in seeding order: seed PD, seed TP4, local sim PD, local llama.cpp,
    local sim single (the PD-vs-single baseline for the demo's ceiling comparison)."""
    return [_seed_pd(), _seed_tp4(), _local_sim_pd(), _local_llamacpp(), _local_sim_single()]


def example_recipe(name: str) -> dict:
    """One example recipe by name (a fresh copy); ``KeyError`` when there is none."""
    for recipe in example_recipes():
        if recipe["name"] == name:
            return copy.deepcopy(recipe)
    raise KeyError(name)


def example_node_facts(name: str) -> NodeFacts:
    """Facts for an example recipe's node name (``seed-8gpu`` or ``local``)."""
    if name == SEED_NODE:
        return seed_node_facts_example()
    if name == LOCAL_NODE:
        return local_node_facts_example()
    raise KeyError(name)


# Built once at import for callers that iterate (the seed command); example_recipes() gives
# fresh copies that follow the current settings (tests override VAR_DIR).
EXAMPLE_RECIPES: list[dict] = example_recipes()
