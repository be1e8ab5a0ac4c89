"""Engine adapters: per-engine flag allowlists and argv renderers.

``ENGINES`` maps an :class:`deployments.choices.Engine` value to its adapter;
:func:`engine_get` looks one up. Validation (:mod:`deployments.recipes`) reads the adapters'
static facts; the launch-plan renderer (:mod:`deployments.launch`) calls their ``render_*``.
"""
from __future__ import annotations

from deployments.engines import llamacpp, sglang, sim, vllm
from deployments.engines.base import EngineAdapter, FlagSpec

ENGINES: dict[str, EngineAdapter] = {
    "sglang": sglang.ADAPTER,
    "vllm": vllm.ADAPTER,
    "llamacpp": llamacpp.ADAPTER,
    "sim": sim.ADAPTER,
}


def engine_get(name: str) -> EngineAdapter:
    """The adapter for engine ``name``; ``KeyError`` for an unknown engine (validate first)."""
    return ENGINES[name]


__all__ = ["ENGINES", "EngineAdapter", "FlagSpec", "engine_get"]
