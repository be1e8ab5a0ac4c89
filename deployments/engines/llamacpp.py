"""llama.cpp adapter through llama-cpp-python's server: ``python -m llama_cpp.server``.

Argv (single topology only; the engine runs on CPUs)::

    python -m llama_cpp.server --model /path/model.gguf --model_alias N --host H --port P
        --n_threads T [allowlisted flags, sorted by name]

llama-cpp-python builds its CLI from the pydantic fields of ``llama_cpp.server.settings``,
so flags use underscores and booleans take a value (``--use_mmap false``).
``--n_threads`` defaults to the number of CPUs the process is pinned to, because llama.cpp
otherwise sizes its thread pool from all host cores and oversubscribes the pinned set.
The server has no ``/health`` route; ``/v1/models`` answering shows the HTTP server is up and
readiness additionally needs a one-token completion. That completion does not touch the chat
handler, so ``chat_format`` is checked at validation against the formats the installed
llama-cpp-python registers (:data:`CHAT_FORMATS`).
"""
from __future__ import annotations

import difflib
from typing import Any

from controlplane.jsonsafe import json_spelled
from deployments.engines.base import EngineAdapter, FlagSpec, RenderContext, RenderedCommand, flags_argv


def _registered_chat_formats() -> tuple[str, ...]:
    """The chat formats the installed llama-cpp-python registers, sorted: the names of
    ``llama_cpp.llama_chat_format.LlamaChatCompletionHandlerRegistry`` (filled by the
    ``@register_chat_format`` handlers when that module is imported; 27 names in 0.3.16).
    ``Llama.create_chat_completion`` looks ``chat_format`` up there and answers every chat
    request with "Invalid chat handler" (HTTP 500) for any other name, while completions keep
    working. This is the control plane's installation, which the nodes' ``llama_cpp.server``
    is expected to match. Empty when llama-cpp-python (or its shared library) is not
    installed here; ``chat_format`` is then only checked to be a name."""
    try:
        from llama_cpp import llama_chat_format
    except Exception:  # noqa: BLE001 - ImportError, or OSError/RuntimeError loading libllama
        return ()
    handlers = getattr(llama_chat_format.LlamaChatCompletionHandlerRegistry(), "_chat_handlers", None)
    return tuple(sorted(name for name in handlers or () if isinstance(name, str)))


def _llama_cpp_version() -> str:
    try:
        from llama_cpp import __version__
    except Exception:  # noqa: BLE001 - as in _registered_chat_formats
        return ""
    return str(__version__)


# Computed once, at import; formats that need a file Ceiling does not pass (the multimodal
# llava-*, moondream, ... handlers of llama_cpp.server.model, which want clip_model_path) are not
# in the registry, so they are refused too.
CHAT_FORMATS: tuple[str, ...] = _registered_chat_formats()
LLAMA_CPP_VERSION = _llama_cpp_version() if CHAT_FORMATS else ""
_CHAT_FORMAT_HELP = "chat template registered by llama-cpp-python (llama_cpp.llama_chat_format)"

WORKER_FLAGS: dict[str, FlagSpec] = {
    "n_ctx": FlagSpec("int", "context length in tokens", 1, 10_000_000),
    "n_batch": FlagSpec("int", "prompt batch size", 1, 1_000_000),
    "n_ubatch": FlagSpec("int", "physical batch size", 1, 1_000_000),
    "n_threads": FlagSpec("int", "generation threads (default: pinned CPU count)", 1, 4096),
    "n_threads_batch": FlagSpec("int", "prompt-processing threads", 1, 4096),
    "seed": FlagSpec("int", "RNG seed", 0, 2**32 - 1),
    "chat_format": (FlagSpec("choice", _CHAT_FORMAT_HELP, choices=CHAT_FORMATS) if CHAT_FORMATS
                    else FlagSpec("name", "chat template name (llama-2, chatml, ...)")),
    "use_mmap": FlagSpec("bool", "mmap the model file", bool_style="value"),
    "use_mlock": FlagSpec("bool", "lock the model in RAM", bool_style="value"),
    "flash_attn": FlagSpec("bool", "flash attention kernels", bool_style="value"),
    "verbose": FlagSpec("bool", "print llama.cpp's own logs", bool_style="value"),
    "cache": FlagSpec("bool", "prompt cache", bool_style="value"),
    "cache_type": FlagSpec("choice", "prompt cache storage", choices=("ram", "disk")),
    "cache_size": FlagSpec("int", "prompt cache size in bytes", 0, 2**40),
    "rope_freq_base": FlagSpec("float", "RoPE base frequency", 0.0, 1e9),
    "rope_freq_scale": FlagSpec("float", "RoPE frequency scale", 0.0, 1e3),
}

_ROLE_FIELD = "spec.roles.single"
WORKER_RESERVED: dict[str, str] = {
    "model": "spec.model",
    "model_alias": "spec.served_model_name",
    "host": f"{_ROLE_FIELD}.host",
    "port": f"{_ROLE_FIELD}.port",
    "api_key": "spec.secrets",
    "config_file": "spec (the recipe is the configuration)",
    "n_gpu_layers": f"{_ROLE_FIELD}.gpus (llama.cpp recipes run on CPUs)",
    "main_gpu": f"{_ROLE_FIELD}.gpus (llama.cpp recipes run on CPUs)",
    "tensor_split": f"{_ROLE_FIELD}.gpus (llama.cpp recipes run on CPUs)",
    "numa": f"{_ROLE_FIELD}.numa_node",
    "interrupt_requests": "Ceiling (always false: the server queues concurrent requests)",
}


class LlamaCppAdapter(EngineAdapter):
    """llama.cpp via llama-cpp-python on CPUs; single server only."""

    name = "llamacpp"
    uses_gpus = False
    topologies = ("single",)
    worker_flags = WORKER_FLAGS
    worker_reserved = WORKER_RESERVED
    default_ports = {"single": 8080}

    def flag_value_problem(self, name: str, value: Any) -> str | None:
        """llama.cpp's own rule for a flag value, asked by recipe validation before the type
        check: a ``chat_format`` outside :data:`CHAT_FORMATS` is refused with the closest
        registered names (``difflib`` ratio >= 0.6), else every one. None when fine, or when
        the type check is to answer (not a string, or no registry known here)."""
        if name != "chat_format" or not CHAT_FORMATS or not isinstance(value, str) or value in CHAT_FORMATS:
            return None
        source = f"llama-cpp-python {LLAMA_CPP_VERSION}".strip()
        close = difflib.get_close_matches(value, CHAT_FORMATS, n=3)
        if close:
            options = " or ".join(json_spelled(c) for c in close)
            return (f"{json_spelled(value)} is not a chat format {source} registers; did you mean {options}? "
                    "(see docs/recipes.md, section 'llamacpp flags')")
        return f"{json_spelled(value)} is not a chat format {source} registers; choose one of {', '.join(CHAT_FORMATS)}"

    def render_worker(self, ctx: RenderContext) -> RenderedCommand:
        role, spec = ctx.role, ctx.spec
        flags = dict(role["flags"])
        if "n_threads" not in flags and ctx.cpu_count:
            flags["n_threads"] = ctx.cpu_count
        argv = [
            ctx.executables["python"], "-m", "llama_cpp.server",
            "--model", spec["model"]["path"],
            "--model_alias", spec["served_model_name"],
            "--host", role["host"],
            "--port", str(role["port"]),
            # llama-cpp-python's server serves one request at a time and by default aborts the
            # running one when another arrives; a benchmark at c > 1 would then measure aborted
            # streams. Queue instead (ServerSettings.interrupt_requests, default True).
            "--interrupt_requests", "false",
        ]
        argv += flags_argv(flags, WORKER_FLAGS)
        return RenderedCommand(
            argv=argv,
            ports={"http": role["port"]},
            health_path="/v1/models",
            generate={
                "method": "POST",
                "path": "/v1/completions",
                "json": {"model": spec["served_model_name"], "prompt": "Hello", "max_tokens": 1, "temperature": 0},
            },
        )


ADAPTER = LlamaCppAdapter()
