"""Recipe spec schema and validation.

A recipe is ``(engine, topology, node, spec)``; :func:`recipe_validate` checks ``spec`` against
the engine's allowlists and the node's hardware facts and returns the normalised spec (defaults
filled in), or raises :class:`controlplane.errors.InvalidInput` whose ``errors`` map a dotted
field path (``spec.roles.prefill.gpus``, or ``engine`` / ``topology``) to messages that name
the field and the bad value. All problems are collected before raising; no input raises
anything else.

Spec shape (JSON; keys not listed here are rejected)::

    model:              {"path": "/models/X"} or {"name": "org/Model"}   (exactly one; llama.cpp
                        needs a .gguf path; a path must lie under settings.CEILING_MODEL_ROOTS)
    served_model_name:  str, default: the model name, or the path's last segment (not stored
                        when left out, so it follows the model: :func:`spec_as_stored`)
    roles:              topology "single": {"single": Role}
                        topology "pd":     {"prefill": Role, "decode": Role, "router": RouterRole}
    transfer_backend:   "nixl" | "mooncake"  (pd only; default "nixl"; vLLM supports nixl)
    env:                {NAME: value}  for every engine process (not the router)
    secrets:            {ENV_NAME: secret_name}  resolved at launch, never shown back
    startup_timeout_s:  int 1-86400, default 1800 (large models load for many minutes)
    stop_grace_s:       int 1-3600, default 30 (SIGTERM → SIGKILL grace)
    restart:            {"policy": "never"|"on-failure" (default never), "max_failures": 3,
                         "window_s": 600, "backoff_initial_s": 1, "backoff_max_s": 60}
    sim:                {"profile": "seed-sm120-fallback", "gpus_modelled": {"prefill": 4, "decode": 4}}
                        (sim engine only; gpus_modelled optional, int or per worker role)
    kernels:            [{"package": name, "config": path | best-variant id, "roles": [...]}]
                        (optional; chosen kernel builds, see :mod:`kernels.references`)

    Role:       {"gpus": [int], "tp": int, "dp": 1, "ep": 1,
                 "numa_node": int | null, "cpus": "0-31" | null,
                 "membind": "numa" | "local" | "none" | [int],
                 "allow_cross_numa": false  (kept in the normalised spec only when true),
                 "host": "127.0.0.1", "port": int,
                 "bootstrap_port": int   (PD prefill of sglang/sim),
                 "side_channel_port": int (PD prefill/decode of vLLM),
                 "flags": {flag: value}, "env": {NAME: value}}
    RouterRole: {"numa_node", "cpus", "membind", "host", "port", "flags", "env"}

Rules, with where they come from:

* GPU engines (sglang, vllm): every worker role needs GPUs that exist on the node, no GPU in
  two roles, and exactly the count its parallelism implies (tp × dp; SGLang with
  ``enable-dp-attention``: tp). ``tp`` defaults to ``len(gpus) // dp`` (not stored when left
  out, so it follows ``gpus``: :func:`spec_as_stored`). llama.cpp and sim take no GPUs and run
  with tp = dp = ep = 1.
* Ports are 1024-65535 (no privileged ports) and unique across all roles, including bootstrap,
  side-channel (a block of tp × dp ports, see :mod:`deployments.engines.vllm`) and
  port-typed flags. Defaults are the engine's own (SGLang 30000/8998, vLLM 8000); a PD router
  without ``prometheus-port`` gets the first port above its own that the recipe leaves free
  (:func:`_router_metrics_port_fill`; not stored when left out, so it follows the router's
  port). Ports inside the ephemeral range are allowed with a plan
  warning (:func:`ephemeral_port_warnings`).
* ``numa_node`` must exist; ``cpus`` is kernel cpulist syntax (ids 0-:data:`CPU_ID_MAX`) of
  CPUs that exist and, when ``numa_node`` is also given, lie in that node. Only null or a
  missing key leaves a role unpinned: ``""`` (or blanks, or ``[]``) is refused (:data:`CPUS_EMPTY_MESSAGE`), as is an
  empty ``membind``. ``membind`` defaults to ``numa`` (bind memory
  to ``numa_node``) when a node is given, ``local`` when only CPUs are, else ``none`` (not
  stored when left out, so it follows ``numa_node`` and ``cpus``).
* A worker's GPUs must sit on the NUMA node it is bound to (``numa_node``, else the nodes of
  its ``cpus``, else a ``membind`` list), as discovery reports them (GPUs of unknown NUMA node
  are not checked); ``allow_cross_numa: true`` turns the error into a plan warning
  (:func:`role_numa_mismatch`, :func:`recipe_warnings`).
* Paths are absolute, normalised, without ``..`` and under ``settings.CEILING_MODEL_ROOTS``
  (the model and every path-typed flag alike); no path, name or string flag starts with
  ``-`` (so it can never be read as an option).
* Flags come from the engine's typed allowlist (:mod:`deployments.engines`): fixed lists are
  choices, registry lookups are names, files are paths under the model roots. An unknown flag
  is answered with the closest allowed spellings or the whole list, and a pointer to
  :data:`RECIPE_DOC_PATH`; flags Ceiling renders itself are refused with the recipe field to
  use instead.
* Environment names must match :data:`ENV_ALLOWED_NAMES` or :data:`ENV_ALLOWED_PREFIXES` and
  never :data:`ENV_DENIED_NAMES` / :data:`ENV_DENIED_PREFIXES` / :data:`ENV_DENIED_SUFFIXES`,
  which win: they change what code or which shared library a process loads (the
  ``LD_PRELOAD`` family, Python start-up hooks, NCCL/UCX plugin loaders, a tool's or compiler's
  path, a package to import, a compiled-kernel cache, any file, folder or output named by a
  variable). Values are strings of at most 4096 characters without NUL or line breaks, and
  without ``/`` except for :data:`ENV_PATH_NAMES` (a path under the model roots).
* ``spec.secrets`` fill only variables named like credentials (:data:`SECRET_TARGET_RE`), and
  such a variable may only be filled from a secret, never set in plain ``env`` (whose values are
  stored, shown and returned by the API in clear).
* No plain value anywhere in the spec (a flag value, an env value, a name) may look like a
  well-known credential (:data:`controlplane.redaction.CREDENTIAL_PATTERNS`: ``hf_…``, ``sk-…``,
  ``ghp_…``, ``AKIA…``, ``xoxb-…``, a PEM private key), and no flag named like one that carries a
  secret (:data:`SECRET_FLAG_RE`: ``--token``, ``--password``, ``--hf-token``…) is taken: each is
  refused at its path pointing at ``spec.secrets``, and no message of the answer holds the value
  (only a shortened form such as ``hf_…(37 chars)``, :func:`controlplane.redaction.credential_mask`).
* Nor may a plain value hold the value of a stored secret (``secret_values`` of
  :func:`recipe_validate`) in any spelling a page masks it in (as typed, base64, JSON-escaped, any
  percent-encoding, ...: :func:`controlplane.redaction.secret_value_found`, each spelling at least
  :data:`SECRET_VALUE_MIN_LENGTH` characters): it is refused at its path naming the secret to reference instead, and never repeated in any message.
* Nor, when saved (``secret_values`` given), may a plain value hold a placeholder shown in place
  of a secret (:data:`controlplane.redaction.PLACEHOLDER_RE`: ``***redacted***`` for a stored
  secret's value, ``hf_…(37 chars)`` for a credential), as an edit form or an API read of a recipe
  saved before such values were refused shows it: sent back unchanged, the engine would be given
  the placeholder. It is refused at its path, naming the secret whose value the stored spec held
  there (``stored_spec`` of :func:`recipe_validate`) where that is known.
"""
from __future__ import annotations

import collections
import difflib
import functools
import ipaddress
import posixpath
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from controlplane.errors import InvalidInput
from controlplane.jsonsafe import json_spelled, not_integer
from controlplane.redaction import (
    MIN_VALUE_LENGTH, PLACEHOLDER_RE, REDACTED, credential_find, credential_kind_said, credential_mask,
    secret_value_found, secret_value_masked,
)
from deployments.engines import ENGINES
from deployments.engines.base import (
    REPO_ID_RE,
    EngineAdapter,
    FlagSpec,
    flag_type_text,
    flag_value_check,
    path_problem,
    path_under_roots_problem,
)
from deployments.engines.sglang import recipe_ports, router_metrics_port_default
from deployments.engines.sim import DEFAULT_PROFILE
from deployments.topology import NodeFacts, format_cpulist, parse_cpulist

# The recipe spec reference, relative to the repository root; error messages point at it.
RECIPE_DOC_PATH = "docs/recipes.md"

TOPOLOGY_ROLES: dict[str, tuple[str, ...]] = {
    "single": ("single",),
    "pd": ("prefill", "decode", "router"),
}
WORKER_ROLES = ("single", "prefill", "decode")

DEFAULT_HOST = "127.0.0.1"
# Linux's default net.ipv4.ip_local_port_range (Documentation/networking/ip-sysctl.rst), inclusive.
DEFAULT_EPHEMERAL_PORT_RANGE = (32768, 60999)
DEFAULT_STARTUP_TIMEOUT_S = 1800
DEFAULT_STOP_GRACE_S = 30
DEFAULT_RESTART = {
    "policy": "never",
    "max_failures": 3,
    "window_s": 600,
    "backoff_initial_s": 1.0,
    "backoff_max_s": 60.0,
}
MEMBIND_MODES = ("numa", "local", "none")
CPUS_EMPTY_MESSAGE = "empty; omit the key (or use null) for no pinning, or give a CPU list like 0-15"
MAX_PARALLEL = 1024
MAX_ENV_VALUE = 4096

ENV_ALLOWED_NAMES = frozenset({
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_ENABLE_HF_TRANSFER",
    "HF_HUB_DISABLE_XET", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
    "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "TZ",
})
ENV_ALLOWED_PREFIXES = (
    "SGLANG_", "SGL_", "VLLM_", "NCCL_", "UCX_", "NIXL_", "MC_", "TORCH_", "PYTORCH_",
    "TRITON_", "FLASHINFER_", "DG_", "NVSHMEM_", "CUTLASS_", "LLAMA_", "GGML_", "CEILING_SIM_",
)
ENV_DENIED_NAMES = frozenset({
    "PATH", "BASH_ENV", "ENV", "IFS", "SHELL", "HOME", "CDPATH",
    "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN", "NCCL_ENV_PLUGIN",
    "UCX_MODULE_DIR", "NIXL_PLUGIN_DIR", "TORCH_EXTENSIONS_DIR", "VLLM_PLUGINS",
    # caches and override folders code is loaded from, without a denied suffix
    "TRITON_HOME", "TORCH_HOME", "TRITON_KERNEL_OVERRIDE",
})
# LLAMA_ARG_*: llama-server's environment spelling of every command-line flag, which would
# bypass the typed flag allowlist (LLAMA_ARG_MODEL skips the model-root check).
ENV_DENIED_PREFIXES = ("LD_", "DYLD_", "PYTHON", "GCONV_", "MALLOC_", "LLAMA_ARG_")
# Switches that turn on an engine's unsafe modes: development endpoints (VLLM_SERVER_DEV_MODE),
# loading adapters or code at run time (VLLM_ALLOW_RUNTIME_LORA_UPDATING), unsafe
# deserialisation (VLLM_ALLOW_INSECURE_SERIALIZATION). Matched anywhere in the name; switches
# that only lift a limit (SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN) stay allowed.
ENV_DENIED_PARTS = ("_DEV_MODE", "_ALLOW_RUNTIME", "INSECURE", "_UNSAFE", "TRUST_REMOTE_CODE")
# Suffixes of names that point a library at code to run: plugin and module loaders, a tool's
# path (TRITON_PTXAS_PATH, LLAMA_CPP_LIB_PATH), a compiler or binary (DG_JIT_NVCC_COMPILER), a
# Python package to import (SGLANG_EXTERNAL_MODEL_PACKAGE), or a compiled-kernel cache a library
# loads shared objects from (TRITON_CACHE_DIR, VLLM_CACHE_ROOT), or a class to import
# (TRITON_CACHE_MANAGER).
# Also any file, folder or output a library reads or writes by name: a settings file whose lines
# become more variables (NCCL_CONF_FILE), a folder of compiled code (FLASHINFER_JIT_DIR,
# FLASHINFER_CUBIN_DIR), a workspace root (FLASHINFER_WORKSPACE_BASE), a log written anywhere
# (TORCH_LOGS_OUT).
ENV_DENIED_CODE_SUFFIXES = ("_PLUGIN", "_PLUGIN_DIR", "_PLUGIN_PATH", "_MODULE_DIR", "_LIBRARY_PATH", "_PATH",
                            "_LIB", "_COMPILER", "_BIN", "_BINARY", "_EXE", "_CACHE_DIR", "_PACKAGE", "_PACKAGES",
                            "_CACHE_ROOT", "_CONFIG_ROOT", "_OVERRIDE_DIR", "_CACHE_MANAGER")
ENV_DENIED_FILE_SUFFIXES = ("_FILE", "_DIR", "_OUT", "_BASE", "_ROOT")
ENV_DENIED_SUFFIXES = ENV_DENIED_CODE_SUFFIXES + ENV_DENIED_FILE_SUFFIXES
# Why each denied name or prefix that does not load code is refused (the others do).
ENV_DENIED_REASONS = {
    "IFS": "it changes how a shell splits the words of the commands it runs",
    "CDPATH": "it changes which folder a shell's cd enters",
    "LLAMA_ARG_": ("it is llama-server's environment spelling of a command-line flag, which would bypass the "
                   "flag allowlist; set the flag in spec.roles.<role>.flags"),
    "MALLOC_": "it changes how the C library allocates memory (checks, poisoning, arena tuning)",
}
ENV_CODE_REASON = "it changes which code or libraries the process loads"
# The one allowed name whose value is a folder: checked like a model path (absolute, normalised,
# under settings.CEILING_MODEL_ROOTS). Every other value may not contain "/" at all, so no
# variable, allowed by prefix or not, can point a library at a file or folder.
ENV_PATH_NAMES = frozenset({"HF_HOME"})
#: Characters no env value may hold besides the C0 controls other than tab: the line breaks
#: :meth:`str.splitlines` knows outside C0 (NEL, U+2028, U+2029) and DEL. An environment
#: variable cannot hold NUL, and a line break splits a value for whatever reads the
#: environment, a log or a launch script line by line.
ENV_VALUE_REFUSED_CHARS = "\x85\u2028\u2029\x7f"
# spec.secrets may only fill variables named like credentials: a secret given to any other
# variable (an engine switch such as CEILING_SIM_FAIL_GENERATE) can be echoed by the engine in an
# error, transformed (lower-cased) so that no exact-value redaction catches it.
SECRET_TARGET_RE = re.compile(r"(?:^|_)(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?|AUTH)$")
#: A flag name that says its value is a secret (``api-key``, ``token``, ``hf-token``, ``password``,
#: ``secret-key``, ``auth-token``): its value would be stored and shown in clear, so it is refused
#: whatever the allowlist (the engines' own, ``--api-key``, are reserved for ``spec.secrets``).
#: ``max-total-tokens`` and ``tokenizer`` are not such names.
SECRET_FLAG_RE = re.compile(
    r"(?:^|[-_])(?:api[-_]?key|token|password|passwd|secret|credentials?|private[-_]key|access[-_]key|secret[-_]key)(?:$|[-_])",
    re.IGNORECASE)
#: Told wherever a secret is refused in a plain field.
SECRET_INSTEAD = ("store it as a secret (admin → Secrets, or POST /api/secrets/) and reference it from "
                  "spec.secrets (an environment variable named like a credential, e.g. "
                  '{"HF_TOKEN": "<secret name>"}); a plain value is stored and shown in clear')
#: A stored secret value shorter than this (once stripped) is not looked for in a recipe's plain
#: values: so short a value ("1234", "admin") is too likely to be ordinary text there. The one
#: minimum of secret values (:data:`controlplane.redaction.MIN_VALUE_LENGTH`): no shorter value is
#: stored, nor masked.
SECRET_VALUE_MIN_LENGTH = MIN_VALUE_LENGTH
# Set by the renderer from recipe fields; a recipe naming them is pointed at the field.
ENV_RENDERER_OWNED = {
    "CUDA_VISIBLE_DEVICES": "spec.roles.<role>.gpus",
    "CUDA_DEVICE_ORDER": "spec.roles.<role>.gpus (Ceiling always uses PCI_BUS_ID order)",
    "VLLM_NIXL_SIDE_CHANNEL_PORT": "spec.roles.<role>.side_channel_port",
    "VLLM_NIXL_SIDE_CHANNEL_HOST": "spec.roles.<role>.host",
}

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
SECRET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
MODEL_NAME_RE = REPO_ID_RE
SERVED_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
PROFILE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
HOSTNAME_RE = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
CPULIST_RE = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")
#: Longest ``cpus`` string accepted, in characters (the ``cpus`` columns are 1024 wide).
CPULIST_MAX_CHARS = 1024
#: Largest CPU id a recipe may name at all, checked before a range is expanded, so
#: ``"0-1000000000"`` is refused by number instead of expanding to a billion ids. Far above any
#: kernel's ``NR_CPUS`` (at most 8192 on x86-64, ``CONFIG_MAXSMP``); which CPUs a recipe may
#: really use is the node's own list, checked after this bound.
CPU_ID_MAX = 65535

TOP_KEYS = ("model", "served_model_name", "roles", "transfer_backend", "env", "secrets",
            "startup_timeout_s", "stop_grace_s", "restart", "sim", "kernels")
WORKER_KEYS = ("gpus", "tp", "dp", "ep", "numa_node", "cpus", "membind", "allow_cross_numa", "host", "port",
               "bootstrap_port", "side_channel_port", "flags", "env")
ROUTER_KEYS = ("gpus", "numa_node", "cpus", "membind", "host", "port", "flags", "env")


class _Errors:
    """Collects ``path → [messages]`` so every problem is reported at once. A flag's path is
    its key as the recipe wrote it (``spec.roles.decode.flags.--mem-fraction-static``), also for
    a problem found once the flags are normalised (a port clash, a kernel reference's flag):
    ``written`` maps the normalised path to that one (:func:`_flags_check` fills it)."""

    def __init__(self) -> None:
        self.errors: dict[str, list[str]] = {}
        self.written: dict[str, str] = {}

    def add(self, path: str, message: str) -> None:
        self.errors.setdefault(self.as_written(path), []).append(message)

    def as_written(self, path: str) -> str:
        """``path`` with a normalised flag's key as the recipe wrote it (unchanged otherwise)."""
        return self.written.get(path, path)

    def has_under(self, prefix: str) -> bool:
        return any(p == prefix or p.startswith(prefix + ".") for p in self.errors)

    def raise_if_any(self) -> None:
        if self.errors:
            raise InvalidInput(self.errors)


def _object_check(errs: _Errors, path: str, value: Any, shape: str = "", missing: str | None = None) -> dict | None:
    """``value`` when it is a JSON object; otherwise None, with the problem at ``path``. A value
    left out (or null) is the message ``missing`` where the field is required, else no problem; a value of another type is never reported as missing: "must be an object``shape``,
    got ``<value as JSON spells it>``" (``must be an object ({"path": ...} or {"name": ...}),
    got 1``, ``got 'abc'``, ``got [1]``)."""
    if isinstance(value, dict):
        return value
    if value is None:
        if missing is not None:
            errs.add(path, missing)
        return None
    errs.add(path, f"must be an object{shape}, got {json_spelled(value)}")
    return None


def recipe_validate(
    *,
    engine: str,
    topology: str,
    spec: Any,
    node: NodeFacts,
    secret_names: set[str] | None = None,
    secret_values: dict[str, str] | None = None,
    stored_spec: Any = None,
) -> dict:
    """Validate a recipe spec for ``engine`` / ``topology`` on ``node``; return it normalised.

    ``node`` gives the GPUs, NUMA nodes and CPUs that may be referenced. ``secret_names``,
    when given, is the set of existing :class:`deployments.models.Secret` names every
    ``spec.secrets`` reference must be in (pass None to skip that check, e.g. for a preview).
    ``secret_values``, when given, maps the plain-text value of each stored secret to its name:
    a plain value of the spec (an env value, a flag, a key) holding one is refused, naming the
    secret; values shorter than :data:`SECRET_VALUE_MIN_LENGTH` are not looked for. With
    ``secret_values`` given (a save, not a launch of what is stored), a plain value holding a
    placeholder shown in place of a secret (:data:`controlplane.redaction.PLACEHOLDER_RE`) is
    refused too; ``stored_spec``, the spec as stored before this edit, names the secret whose
    value it stood for at that path.
    The result has every default filled (see the module docstring) and is what the launch
    plan renderer consumes. Raises :class:`InvalidInput` with all problems found, keyed by
    dotted field path; never raises anything else, whatever ``spec`` holds.
    """
    errs = _Errors()
    for path, messages in engine_topology_errors(engine=engine, topology=topology).items():
        for message in messages:
            errs.add(path, message)
    adapter = ENGINES.get(engine) if isinstance(engine, str) else None
    if not isinstance(spec, dict):
        errs.add("spec", f"must be an object, got {json_spelled(spec)}")
    errs.raise_if_any()
    try:
        result = _spec_validate(errs, adapter, topology, spec, node, secret_names)
    except InvalidInput:
        raise
    except Exception as exc:  # noqa: BLE001 - the contract is InvalidInput for any input
        errs.add("spec", f"could not be validated ({type(exc).__name__})")
        result = None
    _credentials_refuse(errs, spec, secret_values or {},
                        placeholders=_placeholder_paths(spec, secret_values, stored_spec)
                        if secret_values is not None else [])
    errs.raise_if_any()
    assert result is not None
    return result


def _plain_texts(value: Any, path: str) -> list[tuple[str, str]]:
    """``(path, text)`` of each plain string in ``value``, keys included (at the path of the
    object holding them); ``spec.secrets`` (secret names) is skipped. A flag's path is its key as
    written (``flags.--api-key``), as the flag checks spell it."""
    found: list[tuple[str, str]] = []
    if isinstance(value, str):
        found.append((path, value))
    elif isinstance(value, dict):
        for key, item in value.items():
            if path == "spec" and key == "secrets":
                continue
            if isinstance(key, str):
                found.append((path, key))
            found += _plain_texts(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            found += _plain_texts(item, path)
    return found


def _credential_paths(value: Any, path: str) -> list[tuple[str, str, str]]:
    """``(path, format name, shortened form)`` of each plain string in ``value`` (keys included)
    that looks like a well-known credential (:func:`_plain_texts`)."""
    return [(at, *hit) for at, text in _plain_texts(value, path) if (hit := credential_find(text))]


def _stored_secret_paths(spec: Any, secret_values: dict[str, str]) -> list[tuple[str, str]]:
    """``(path, secret name)`` of each plain string in ``spec`` (keys included) that holds the
    value of a stored secret (``secret_values``: value → name) in any spelling the pages mask it
    in (:func:`controlplane.redaction.secret_value_found`: as typed, base64, percent-encoded, ...,
    each of at least :data:`SECRET_VALUE_MIN_LENGTH` characters), once per path and secret."""
    values = {v: name for v, name in secret_values.items() if len(v.strip()) >= MIN_VALUE_LENGTH}
    found: list[tuple[str, str]] = []
    for at, text in _plain_texts(spec, "spec"):
        for value, name in values.items():
            if (at, name) not in found and secret_value_found(text, value):
                found.append((at, name))
    return found


def _placeholder_paths(spec: Any, secret_values: dict[str, str],
                       stored_spec: Any) -> list[tuple[str, str, list[str]]]:
    """``(path, placeholder, secret names)`` of each plain string in ``spec`` (keys included) that
    holds a placeholder shown in place of a secret (:data:`controlplane.redaction.PLACEHOLDER_RE`),
    once per path and placeholder. ``secret names`` are those whose value ``stored_spec`` (the spec
    as stored, from before such values were refused) holds at the same path, for
    :data:`REDACTED`; empty where none is known."""
    try:
        held_before: dict[str, list[str]] = {}
        if stored_spec is not None:
            for at, name in _stored_secret_paths(stored_spec, secret_values):
                held_before.setdefault(at, []).append(name)
        found: list[tuple[str, str, list[str]]] = []
        for at, text in _plain_texts(spec, "spec"):
            for placeholder in dict.fromkeys(m.group(0) for m in PLACEHOLDER_RE.finditer(text)):
                names = held_before.get(at, []) if placeholder == REDACTED else []
                if not any(at == p and placeholder == h for p, h, _ in found):
                    found.append((at, placeholder, names))
        return found
    except Exception:  # noqa: BLE001 - the contract is InvalidInput for any input
        return []


def _placeholder_message(path: str, placeholder: str, names: list[str]) -> str:
    """Why a placeholder shown in place of a secret may not be saved at ``path``."""
    if placeholder != REDACTED:
        return (f"{path} holds the placeholder {placeholder} shown in place of a credential: {SECRET_INSTEAD}; "
                f"or type the value it should have")
    which = f" (secret {' or '.join(json_spelled(n) for n in names)})" if names else ""
    return (f"{path} holds the placeholder {REDACTED} shown in place of a secret's value: reference the secret "
            f"from spec.secrets{which} or type the value")


def _credentials_refuse(errs: _Errors, spec: Any, secret_values: dict[str, str],
                        placeholders: list[tuple[str, str, list[str]]] = ()) -> None:
    """Refuse each plain value of ``spec`` that looks like a credential, holds the value of a
    stored secret or holds a placeholder shown in place of one (``placeholders``,
    :func:`_placeholder_paths`), at its path (replacing whatever else was said there), and mask
    any credential or stored value left in the other messages, so the answer never holds one."""
    try:
        found = _credential_paths(spec, "spec")
        held = _stored_secret_paths(spec, secret_values)
    except Exception:  # noqa: BLE001 - the contract is InvalidInput for any input
        found, held = [], []
    for path in [p for p, *_ in found] + [p for p, _ in held] + [p for p, *_ in placeholders]:
        errs.errors[path] = [m for m in errs.errors.get(path, []) if " looks like a" in m]   # a / an
    for path, placeholder, names in placeholders:
        errs.add(path, _placeholder_message(path, placeholder, names))
    for path, name, short in found:
        errs.add(path, f"{path} looks like {credential_kind_said(name)} ({short}): {SECRET_INSTEAD}")
    for path, name in held:
        errs.add(path, f"{path} holds the value of secret {json_spelled(name)}: reference that secret from "
                       f"spec.secrets instead (an environment variable named like a credential, e.g. "
                       f'{{"HF_TOKEN": "{name}"}}); a plain value is stored and shown in clear')
    forms = _stored_value_forms(secret_values)
    for path, messages in errs.errors.items():
        errs.errors[path] = [_values_masked(credential_mask(m), forms) for m in messages]


def _stored_value_forms(secret_values: dict[str, str]) -> list[str]:
    """The stored secret values looked for in a recipe; each is masked in every spelling
    :func:`_stored_secret_paths` finds it in (:func:`_values_masked`)."""
    return [v for v in secret_values if isinstance(v, str) and len(v.strip()) >= MIN_VALUE_LENGTH]


def secret_text_masked(text: str, secret_values: dict[str, str]) -> str:
    """``text`` (a recipe's spec as typed) with what its validation refuses to store in clear
    masked, as its messages mask it: each well-known credential shortened
    (:func:`controlplane.redaction.credential_mask`, ``hf_…(37 chars)``) and each spelling of a
    stored secret value (``secret_values``: value → name) replaced by :data:`REDACTED`. What a
    refused recipe form shows again in place of what was typed."""
    return _values_masked(credential_mask(text), _stored_value_forms(secret_values))


def _values_masked(text: str, values: list[str]) -> str:
    """``text`` with each spelling of each of ``values`` (stored secret values) that a page masks
    (:func:`controlplane.redaction.secret_value_masked`) replaced by :data:`REDACTED`."""
    return secret_value_masked(text, values)


def engine_topology_errors(*, engine: Any, topology: Any) -> dict[str, list[str]]:
    """The rules on ``engine`` and ``topology`` alone, which hold whatever the spec and node:
    each must be known, and the engine must support the topology (``llamacpp`` runs ``single``
    only). Returns ``{"engine" | "topology": [message]}``, empty when both are fine; what
    :func:`recipe_validate` reports first, and what the API reports next to other field errors
    when the node is unknown and the spec cannot be checked."""
    errors: dict[str, list[str]] = {}
    adapter = ENGINES.get(engine) if isinstance(engine, str) else None
    if adapter is None:
        errors["engine"] = [f"unknown engine {json_spelled(engine)}; choose one of {', '.join(ENGINES)}"]
    if not isinstance(topology, str) or topology not in TOPOLOGY_ROLES:
        errors["topology"] = [f"unknown topology {json_spelled(topology)}; choose one of single, pd"]
    elif adapter is not None and topology not in adapter.topologies:
        errors["topology"] = [f"engine {engine} supports topology {', '.join(adapter.topologies)} only, not {topology}"]
    return errors


def _spec_validate(
    errs: _Errors,
    adapter: EngineAdapter,
    topology: str,
    spec: dict,
    node: NodeFacts,
    secret_names: set[str] | None,
) -> dict:
    for key in spec:
        if key not in TOP_KEYS:
            errs.add(f"spec.{key}", f"unknown field {json_spelled(key)}; allowed: {', '.join(TOP_KEYS)}")

    model = _model_check(errs, adapter, spec.get("model"))
    served = _served_name_check(errs, spec.get("served_model_name"), model)

    out: dict[str, Any] = {"model": model, "served_model_name": served}
    out["roles"] = _roles_check(errs, adapter, topology, spec.get("roles"), node)

    backend = spec.get("transfer_backend")
    if topology == "pd":
        if backend is None:
            backend = adapter.transfer_backends[0] if adapter.transfer_backends else None
        elif backend not in adapter.transfer_backends:
            errs.add("spec.transfer_backend",
                     f"{json_spelled(backend)} is not a {adapter.name} transfer backend; "
                     f"choose one of {', '.join(adapter.transfer_backends)}")
        out["transfer_backend"] = backend
    elif backend is not None:
        errs.add("spec.transfer_backend", "only applies to topology pd")

    env = _env_check(errs, "spec.env", spec.get("env"))
    out["env"] = env
    out["secrets"] = _secrets_check(errs, spec.get("secrets"), secret_names)
    out["startup_timeout_s"] = _int_field(errs, "spec.startup_timeout_s", spec.get("startup_timeout_s", ABSENT),
                                          DEFAULT_STARTUP_TIMEOUT_S, 1, 86_400)
    out["stop_grace_s"] = _int_field(errs, "spec.stop_grace_s", spec.get("stop_grace_s", ABSENT), DEFAULT_STOP_GRACE_S,
                                     1, 3600)
    out["restart"] = _restart_check(errs, spec.get("restart"))

    sim = spec.get("sim")
    if adapter.name == "sim":
        out["sim"] = _sim_check(errs, sim, [r for r in (out["roles"] or {}) if r != "router"])
    elif sim is not None:
        errs.add("spec.sim", "only applies to engine sim")
    if spec.get("kernels") is not None:
        # Chosen kernel builds (kernels app): validated against the registered packages there.
        from kernels.references import kernel_refs_validate

        out["kernels"], kernel_errors = kernel_refs_validate(spec["kernels"], adapter=adapter,
                                                             roles=out["roles"] or {}, spec_env=env)
        if not kernel_errors:
            # a config tuned for another compute capability than the GPUs it goes to
            from kernels.references import kernel_refs_device_errors

            kernel_errors = kernel_refs_device_errors(out["kernels"], roles=out["roles"] or {}, node=node)
        for path, messages in kernel_errors.items():
            for message in messages:
                errs.add(path, message)
    _router_metrics_port_fill(out["roles"], adapter)
    _ports_unique(errs, out["roles"], adapter)
    _gpus_disjoint(errs, out["roles"])
    return out


# --- model -------------------------------------------------------------------------------

#: The refusal of a ``model`` with both ``path`` and ``name``, or neither.
MODEL_ONE_OF = "give exactly one of path or name"


def _model_check(errs: _Errors, adapter: EngineAdapter, model: Any) -> dict:
    norm: dict[str, str | None] = {"path": None, "name": None}
    model = _object_check(errs, "spec.model", model, ' ({"path": ...} or {"name": ...})',
                          missing='is required: {"path": "/models/X"} or {"name": "org/Model"}')
    if model is None:
        return norm
    for key in model:
        if key not in ("path", "name"):
            errs.add(f"spec.model.{key}", f"unknown field {json_spelled(key)}; use path or name")
    path, name = model.get("path"), model.get("name")
    if (path is None) == (name is None):
        errs.add("spec.model", MODEL_ONE_OF)
        return norm
    if path is not None:
        problem = path_problem(path)
        if problem:
            errs.add("spec.model.path", f"model path {problem}")
            return norm
        problem = path_under_roots_problem(path, settings.CEILING_MODEL_ROOTS)
        if problem:
            errs.add("spec.model.path", problem)
            return norm
        clean = posixpath.normpath(path)
        if adapter.name == "llamacpp" and not clean.endswith(".gguf"):
            errs.add("spec.model.path", f"llama.cpp needs a .gguf file, got {json_spelled(clean)}")
        norm["path"] = clean
    else:
        if adapter.name == "llamacpp":
            errs.add("spec.model.name", "llama.cpp needs a model path (a .gguf file), not a name")
        elif not isinstance(name, str):
            errs.add("spec.model.name", f"must be a string, got {json_spelled(name)}")
        elif name.startswith("-"):
            errs.add("spec.model.name", f"must not start with '-', got {json_spelled(name)}")
        elif not MODEL_NAME_RE.match(name):
            errs.add("spec.model.name", f"must look like org/name (letters, digits, . _ -), got {json_spelled(name)}")
        else:
            norm["name"] = name
    return norm


def served_name_default(model: Any) -> str:
    """The ``served_model_name`` a spec without one serves under: the model's name, or the last
    segment of its path without ``.gguf``; "" for a model that gives neither (a normalised
    ``model`` object, ``{"path": ..., "name": ...}``, one of them null)."""
    if not isinstance(model, dict):
        return ""
    if isinstance(model.get("name"), str) and model["name"]:
        return model["name"]
    if isinstance(model.get("path"), str) and model["path"]:
        base = posixpath.basename(model["path"])
        return base[:-5] if base.endswith(".gguf") else base
    return ""


def _given(container: Any, key: str) -> bool:
    """Whether the spec as sent gives ``key`` in ``container`` (present and not null: a null
    or a missing key takes the default alike)."""
    return isinstance(container, dict) and container.get(key) is not None


def _flag_given(flags: Any, name: str) -> bool:
    """Whether ``flags`` as sent give flag ``name``, spelled with or without leading dashes."""
    return isinstance(flags, dict) and any(isinstance(raw, str) and raw.lstrip("-") == name and value is not None
                                           for raw, value in flags.items())


def spec_as_stored(normalised: dict, given: Any) -> dict:
    """The spec a recipe stores: ``normalised`` (:func:`recipe_validate`'s result for ``given``,
    the spec as sent) without each default derived from another field that ``given`` leaves out
    (or sets to null). The derived defaults, by path, and what each is computed from:

    * ``served_model_name``: ``model``, its name or the path's last segment (:func:`served_name_default`);
    * ``roles.<worker>.tp``: the role's ``gpus`` and ``dp``, ``len(gpus) // dp``;
    * ``roles.<role>.membind`` (the router's too): the role's ``numa_node`` and ``cpus``,
      ``numa``, ``local`` or ``none``;
    * ``roles.router.flags.prometheus-port``: the router's ``port`` and the recipe's other ports
      (:func:`_router_metrics_port_fill`).

    Stored, each would stay what the old field gave after that field changes
    (``--served-model-name a/b`` for a recipe now serving ``/models/x``; ``tp`` 2 refused beside
    ``gpus`` grown to four; a metrics port one above the router's old port; ``membind`` ``none``
    for a role bound to a NUMA node since). Left out, each is filled again at every validation
    (the dry-run, a deploy's ``spec_snapshot``), so it follows its field; a value the recipe gives
    is kept as given. Every other default is a constant and is stored filled in. Migrations 0011
    and 0012 took such stored defaults out of the recipes saved before."""
    stored = {key: value for key, value in normalised.items()
              if key != "served_model_name" or _given(given, "served_model_name")}
    given_roles = given.get("roles") if isinstance(given, dict) else None
    roles = stored.get("roles")
    if not isinstance(roles, dict):
        return stored
    stored["roles"] = {}
    for name, role in roles.items():
        given_role = given_roles.get(name) if isinstance(given_roles, dict) else None
        if not isinstance(role, dict):
            stored["roles"][name] = role
            continue
        role = dict(role)
        if name != "router" and not _given(given_role, "tp"):
            role.pop("tp", None)
        if not _given(given_role, "membind"):
            role.pop("membind", None)
        if name == "router" and isinstance(role.get("flags"), dict) and "prometheus-port" in role["flags"] \
                and not _flag_given(given_role.get("flags") if isinstance(given_role, dict) else None,
                                    "prometheus-port"):
            role["flags"] = {flag: value for flag, value in role["flags"].items() if flag != "prometheus-port"}
        stored["roles"][name] = role
    return stored


def _served_name_check(errs: _Errors, served: Any, model: dict) -> str:
    if served is None:
        return served_name_default(model)
    if not isinstance(served, str):
        errs.add("spec.served_model_name", f"must be a string, got {json_spelled(served)}")
    elif served.startswith("-"):
        errs.add("spec.served_model_name", f"must not start with '-', got {json_spelled(served)}")
    elif not SERVED_NAME_RE.match(served):
        errs.add("spec.served_model_name",
                 f"must be 1-128 letters, digits or . _ : / - characters, got {json_spelled(served)}")
    else:
        return served
    return ""


# --- roles -------------------------------------------------------------------------------

def _roles_check(errs: _Errors, adapter: EngineAdapter, topology: str, roles: Any, node: NodeFacts) -> dict:
    expected = TOPOLOGY_ROLES[topology]
    roles = _object_check(errs, "spec.roles", roles, f" with roles {', '.join(expected)}",
                          missing=f"is required: an object with roles {', '.join(expected)}")
    if roles is None:
        return {}
    for name in roles:
        if name not in expected:
            errs.add(f"spec.roles.{name}",
                     f"unknown role {json_spelled(name)} for topology {topology}; expected {', '.join(expected)}")
    out: dict[str, dict] = {}
    for name in expected:
        role = roles.get(name)
        path = f"spec.roles.{name}"
        role = _object_check(errs, path, role, missing=f"role {name} is required for topology {topology}")
        if role is None:
            continue
        if name == "router":
            out[name] = _router_check(errs, adapter, path, role, node)
        else:
            out[name] = _worker_check(errs, adapter, topology, name, path, role, node)
    return out


def _worker_check(errs: _Errors, adapter: EngineAdapter, topology: str, name: str, path: str,
                  role: dict, node: NodeFacts) -> dict:
    for key in role:
        if key not in WORKER_KEYS:
            errs.add(f"{path}.{key}", f"unknown field {json_spelled(key)}; allowed: {', '.join(WORKER_KEYS)}")
    gpus = _gpus_check(errs, adapter, f"{path}.gpus", role.get("gpus"), node)
    dp = _int_field(errs, f"{path}.dp", role.get("dp", ABSENT), 1, 1, MAX_PARALLEL)
    default_tp = len(gpus) // dp if adapter.uses_gpus and gpus and dp and len(gpus) % dp == 0 else 1
    tp = _int_field(errs, f"{path}.tp", role.get("tp", ABSENT), default_tp, 1, MAX_PARALLEL)
    ep = _int_field(errs, f"{path}.ep", role.get("ep", ABSENT), 1, 1, MAX_PARALLEL)
    out: dict[str, Any] = {"gpus": gpus, "tp": tp, "dp": dp, "ep": ep}
    out.update(_pinning_check(errs, path, role, node))
    cross = role.get("allow_cross_numa")
    if cross is not None and not isinstance(cross, bool):
        errs.add(f"{path}.allow_cross_numa", f"must be true or false, got {json_spelled(cross)}")
    elif cross and not adapter.uses_gpus:
        errs.add(f"{path}.allow_cross_numa", f"{adapter.name} runs on CPUs; allow_cross_numa only applies to roles with GPUs")
    elif cross:
        # Only stored when set, so specs saved before the field existed normalise unchanged.
        out["allow_cross_numa"] = True
    out["host"] = _host_check(errs, f"{path}.host", role.get("host"))
    out["port"] = _port_field(errs, f"{path}.port", role.get("port"), adapter.default_ports.get(name))

    wants_bootstrap = topology == "pd" and name == "prefill" and adapter.default_bootstrap_port is not None
    out["bootstrap_port"] = None
    if wants_bootstrap:
        out["bootstrap_port"] = _port_field(errs, f"{path}.bootstrap_port", role.get("bootstrap_port"),
                                            adapter.default_bootstrap_port)
    elif role.get("bootstrap_port") is not None:
        errs.add(f"{path}.bootstrap_port", "only applies to the prefill role of a PD recipe on sglang or sim")
    wants_side = topology == "pd" and name in adapter.default_side_channel_ports
    out["side_channel_port"] = None
    if wants_side:
        out["side_channel_port"] = _port_field(errs, f"{path}.side_channel_port", role.get("side_channel_port"),
                                               adapter.default_side_channel_ports[name])
    elif role.get("side_channel_port") is not None:
        errs.add(f"{path}.side_channel_port", "only applies to prefill and decode roles of a vLLM PD recipe")

    out["flags"] = _flags_check(errs, f"{path}.flags", role.get("flags"), adapter.worker_flags,
                                adapter.worker_reserved, adapter.name, name,
                                value_problem=getattr(adapter, "flag_value_problem", None))
    out["env"] = _env_check(errs, f"{path}.env", role.get("env"))

    if not errs.has_under(f"{path}.tp") and not errs.has_under(f"{path}.dp") and not errs.has_under(f"{path}.ep") \
            and not errs.has_under(f"{path}.gpus") and not errs.has_under(f"{path}.flags"):
        _parallel_check(errs, adapter, path, out)
    if not any(errs.has_under(f"{path}.{key}") for key in ("gpus", "numa_node", "cpus", "membind", "allow_cross_numa")):
        mismatch = role_numa_mismatch(out, node)
        if mismatch is not None and not out.get("allow_cross_numa"):
            errs.add(f"{path}.{mismatch.field}",
                     f"{mismatch.fact}; {mismatch.fix}, or set allow_cross_numa: true to keep this binding "
                     f"(every host-GPU copy then crosses the link between NUMA nodes)")
    return out


@dataclass(frozen=True)
class NumaMismatch:
    """GPUs of a role that sit on another NUMA node than the role is bound to.

    ``field``: the role field that binds it (``numa_node``, else ``cpus``, else a ``membind``
    list); ``fact``: the finding as a clause (``"GPUs 4,5,6,7 are on NUMA node 1, not 0"``);
    ``fix``: how to line them up, as a clause.
    """

    field: str
    fact: str
    fix: str


def role_numa_mismatch(role: dict, node: NodeFacts) -> NumaMismatch | None:
    """Compare a normalised worker role's GPUs with its CPU/memory binding on ``node``.

    The binding is the role's ``numa_node`` when set, else the NUMA nodes holding its
    ``cpus``, else an explicit ``membind`` list; a role with none of these is not pinned and
    cannot mismatch. A GPU whose NUMA node is unknown (``GpuFacts.numa_node`` None: single
    socket hosts, or firmware that reports -1) never counts. Returns None when every GPU with
    a known NUMA node lies inside the binding. Why it matters: a process pinned away from its
    GPUs' socket sends every host-to-GPU copy (weights at load, KV cache transfer buffers,
    sampling results) over the inter-socket link and allocates pinned memory on the wrong
    node, which is what ``nvidia-smi topo -m``'s "NUMA Affinity" column exists to prevent.
    """
    gpu_node = {g.index: g.numa_node for g in node.gpus}
    known = {g: gpu_node[g] for g in role.get("gpus") or [] if gpu_node.get(g) is not None}
    if not known:
        return None
    numa = role.get("numa_node")
    membind = role.get("membind")
    if numa is not None:
        field, allowed = "numa_node", {numa}
    elif role.get("cpus"):
        cpus = set(parse_cpulist(role["cpus"]))
        field, allowed = "cpus", {n.index for n in node.numa_nodes if cpus & set(n.cpus)}
    elif isinstance(membind, list) and membind:
        field, allowed = "membind", set(membind)
    else:
        return None
    if not allowed:
        return None
    foreign: dict[int, list[int]] = {}
    for gpu, gpu_numa in sorted(known.items()):
        if gpu_numa not in allowed:
            foreign.setdefault(gpu_numa, []).append(gpu)
    if not foreign:
        return None
    groups = " and ".join(
        f"{'GPU' if len(gpus) == 1 else 'GPUs'} {_ids(gpus)} {'is' if len(gpus) == 1 else 'are'} on NUMA node {n}"
        for n, gpus in sorted(foreign.items())
    )
    bound = format_cpulist(allowed)
    if field == "numa_node":
        fact = f"{groups}, not {numa}"
    elif field == "cpus":
        fact = f"{groups}, but cpus {role['cpus']} are on NUMA node {bound}"
    else:
        fact = f"{groups}, but membind binds memory to NUMA node {bound}"
    homes = sorted(set(known.values()))
    if len(homes) > 1:
        fix = (f"the role's GPUs span NUMA nodes {format_cpulist(homes)}: leave {field} unset or split the GPUs "
               f"into roles per NUMA node")
    elif field == "numa_node":
        fix = f"set numa_node to {homes[0]} (and cpus, if given, within it)"
    elif field == "cpus":
        facts = node.numa(homes[0])
        where = f" ({format_cpulist(facts.cpus)})" if facts else ""
        fix = f"pick cpus on NUMA node {homes[0]}{where}"
    else:
        fix = f"bind memory to NUMA node {homes[0]}"
    return NumaMismatch(field=field, fact=fact, fix=fix)


def recipe_warnings(*, spec: dict, node: NodeFacts) -> list[str]:
    """Warnings a launch plan of the normalised ``spec`` on ``node`` carries, in role order.

    * a role with ``allow_cross_numa`` whose GPUs sit on another NUMA node than its binding
      (see :func:`role_numa_mismatch`): the cost is accepted, but shown;
    * ``trust-remote-code`` on any role: the engine imports and runs Python files that come
      with the model (``modeling_*.py`` in the model directory or repository) with the node
      agent's privileges, so the model's origin must be trusted.
    * a port inside the node's ephemeral port range (:func:`ephemeral_port_warnings`);
    * a kernel reference whose config was tuned on a device of the same compute capability
      under another name, whose sim profile models another GPU, or (outside sim) that goes to a
      role without GPUs (:func:`kernels.references.kernel_refs_warnings`).

    Reads no database (a sim profile file at most); returns ``[]`` for a spec without such settings.
    """
    warnings: list[str] = []
    roles = spec.get("roles") or {}
    for name, role in roles.items():
        if not role.get("allow_cross_numa"):
            continue
        mismatch = role_numa_mismatch(role, node)
        if mismatch is not None:
            warnings.append(f"{name}: {mismatch.fact} (allowed by allow_cross_numa); every host-GPU copy crosses "
                            f"the link between NUMA nodes")
    trusting = [name for name, role in roles.items() if (role.get("flags") or {}).get("trust-remote-code")]
    if trusting:
        model = spec.get("model") or {}
        source = f"the model directory {model['path']}" if model.get("path") else f"the repository {model.get('name')}"
        warnings.append(f"{', '.join(trusting)}: trust-remote-code runs the Python code shipped in {source} "
                        f"with the node agent's privileges; use it only for a model whose origin you trust")
    if spec.get("kernels"):
        from kernels.references import kernel_refs_warnings

        warnings += kernel_refs_warnings(spec["kernels"], roles=roles, node=node,
                                         sim_hardware=_sim_hardware(spec.get("sim")),
                                         simulated=isinstance(spec.get("sim"), dict))
    warnings += ephemeral_port_warnings(spec=spec, node=node)
    return warnings


def _sim_hardware(sim: Any) -> str:
    """The ``hardware`` text of a normalised ``spec.sim``'s profile ("8x sm_120 GPUs, TP4 per
    role"), "" when there is none or it does not load."""
    if not isinstance(sim, dict) or not isinstance(sim.get("profile"), str):
        return ""
    from deployments.engines.simcore.profile import ProfileError, profile_load

    try:
        return profile_load(sim["profile"]).hardware
    except (ProfileError, OSError):
        return ""


def _parallel_check(errs: _Errors, adapter: EngineAdapter, path: str, role: dict) -> None:
    if not adapter.uses_gpus:
        for key in ("tp", "dp", "ep"):
            if role[key] != 1:
                errs.add(f"{path}.{key}", f"{adapter.name} runs on CPUs; {key} must be 1, got {role[key]}")
        return
    expected, rule = adapter.expected_gpu_count(role)
    have = len(role["gpus"])
    if have and have != expected:
        errs.add(f"{path}.tp", f"{rule} GPUs expected, but {path}.gpus lists {have} ({_ids(role['gpus'])}): "
                               "give a tp that fits, or leave tp out (\"tp\": null in a PATCH) to have it follow gpus")
    for key, message in adapter.parallel_problems(role).items():
        errs.add(f"{path}.{key}", message)


def _router_check(errs: _Errors, adapter: EngineAdapter, path: str, role: dict, node: NodeFacts) -> dict:
    for key in role:
        if key not in ROUTER_KEYS:
            errs.add(f"{path}.{key}", f"unknown field {json_spelled(key)}; allowed: {', '.join(ROUTER_KEYS)}")
    gpus = role.get("gpus")
    if gpus not in (None, []):
        errs.add(f"{path}.gpus", f"the router takes no GPUs, got {json_spelled(gpus)}")
    out: dict[str, Any] = {"gpus": []}
    out.update(_pinning_check(errs, path, role, node))
    out["host"] = _host_check(errs, f"{path}.host", role.get("host"))
    out["port"] = _port_field(errs, f"{path}.port", role.get("port"), adapter.default_ports.get("router"))
    out["flags"] = _flags_check(errs, f"{path}.flags", role.get("flags"), adapter.router_flags,
                                adapter.router_reserved, f"{adapter.name} router", "router")
    out["env"] = _env_check(errs, f"{path}.env", role.get("env"))
    return out


def _gpus_check(errs: _Errors, adapter: EngineAdapter, path: str, gpus: Any, node: NodeFacts) -> list[int]:
    if not adapter.uses_gpus:
        if gpus not in (None, []):
            errs.add(path, f"{adapter.name} runs on CPUs and takes no GPUs, got {json_spelled(gpus)}")
        return []
    if gpus is None:
        errs.add(path, f"is required: the GPU ids this role runs on (node {node.name} has {_ids(sorted(node.gpu_indices())) or 'no GPUs'})")
        return []
    if not isinstance(gpus, list) or not gpus:
        errs.add(path, f"must be a non-empty list of GPU ids, got {json_spelled(gpus)}")
        return []
    have = node.gpu_indices()
    out: list[int] = []
    for i, g in enumerate(gpus):
        if isinstance(g, bool) or not isinstance(g, int):
            errs.add(path, f"item {i} must be an integer GPU id, got {not_integer(g, json_spelled(g))}")
        elif g in out:
            errs.add(path, f"GPU {g} is listed twice")
        elif g not in have:
            errs.add(path, f"GPU {json_spelled(g)} does not exist on node {node.name} "
                           f"(it has {_ids(sorted(have)) or 'no GPUs'})")
        else:
            out.append(g)
    return out


def _pinning_check(errs: _Errors, path: str, role: dict, node: NodeFacts) -> dict:
    out: dict[str, Any] = {"numa_node": None, "cpus": None}
    numa = role.get("numa_node")
    if numa is not None:
        if isinstance(numa, bool) or not isinstance(numa, int):
            errs.add(f"{path}.numa_node", f"must be an integer NUMA node id, got {not_integer(numa, json_spelled(numa))}")
        elif numa not in node.numa_indices():
            errs.add(f"{path}.numa_node",
                     f"NUMA node {json_spelled(numa)} does not exist on node {node.name} "
                     f"(it has {_ids(sorted(node.numa_indices())) or 'none'})")
        else:
            out["numa_node"] = numa
    cpus_raw = role.get("cpus")
    cpus: list[int] | None = None
    if cpus_raw in ("", []) or (isinstance(cpus_raw, str) and not cpus_raw.strip()):
        # Only null or a missing key means "not pinned": an empty value is more likely a field
        # left unfilled (a form, a template) than a decision, and running unpinned hides it.
        errs.add(f"{path}.cpus", CPUS_EMPTY_MESSAGE)
    elif cpus_raw is not None:
        cpus = _cpulist_check(errs, f"{path}.cpus", cpus_raw, node)
        if cpus is not None:
            if out["numa_node"] is not None:
                outside = sorted(set(cpus) - set(node.numa(out["numa_node"]).cpus))
                if outside:
                    errs.add(f"{path}.cpus", f"CPUs {format_cpulist(outside)} are not on NUMA node {out['numa_node']} "
                                             f"(its CPUs are {format_cpulist(node.numa(out['numa_node']).cpus)})")
            out["cpus"] = format_cpulist(cpus)

    membind = role.get("membind")
    if membind is None:
        membind = "numa" if out["numa_node"] is not None else ("local" if out["cpus"] else "none")
        if numa is not None and out["numa_node"] is None:
            membind = "none"  # the numa_node error is already reported
    if isinstance(membind, str):
        if membind not in MEMBIND_MODES:
            errs.add(f"{path}.membind", f"must be one of {', '.join(MEMBIND_MODES)} or a list of NUMA node ids, "
                                        f"got {json_spelled(membind)}")
        elif membind == "numa" and out["numa_node"] is None and numa is None:
            if cpus is None or _numa_of(cpus, node) is None:
                errs.add(f"{path}.membind", "'numa' binds memory to the role's NUMA node: set numa_node, or cpus within one NUMA node")
    elif isinstance(membind, list):
        nodes: list[int] = []
        for i, n in enumerate(membind):
            if isinstance(n, bool) or not isinstance(n, int):
                errs.add(f"{path}.membind", f"item {i} must be a NUMA node id, got {json_spelled(n)}")
            elif n not in node.numa_indices():
                errs.add(f"{path}.membind", f"NUMA node {json_spelled(n)} does not exist on node {node.name} "
                                            f"(it has {_ids(sorted(node.numa_indices())) or 'none'})")
            elif n not in nodes:
                nodes.append(n)
        if not membind:
            errs.add(f"{path}.membind", "an explicit node list must not be empty")
        membind = sorted(nodes)
    else:
        errs.add(f"{path}.membind", f"must be a string or a list of NUMA node ids, got {json_spelled(membind)}")
    out["membind"] = membind
    return out


def _cpu_out_of_range(errs: _Errors, path: str, ids: list[int], node: NodeFacts) -> bool:
    """Report the first of ``ids`` outside 0-:data:`CPU_ID_MAX` under ``path`` (naming the
    bound and the node's CPUs); True when one was."""
    bad = [c for c in ids if not 0 <= c <= CPU_ID_MAX]
    if not bad:
        return False
    known = node.all_cpus()
    has = (f"has CPUs {format_cpulist(known)}" if known
           else "has not reported its CPUs yet (its node agent has not discovered it)")
    errs.add(path, f"CPU {bad[0]} is out of range: CPU ids are 0-{CPU_ID_MAX}, and node {node.name} {has}")
    return True


def _cpus_not_reported(node: NodeFacts, cpus: list[int]) -> str:
    """The refusal of pinning ``cpus`` on ``node`` whose agent has reported no CPU (a node added
    by hand before its agent's first discovery): nothing to check them against."""
    return (f"node {node.name}'s agent has not reported its CPUs yet, so CPUs {format_cpulist(cpus)} cannot be "
            "checked: a recipe pinning CPUs on it can be saved and launched once the agent has reported "
            "(or leave cpus out)")


def _cpulist_check(errs: _Errors, path: str, value: Any, node: NodeFacts) -> list[int] | None:
    """The CPU ids of a role's ``cpus`` (a kernel cpulist string or a list of ids), sorted and
    unique; None after adding the reason to ``errs``: malformed syntax, an id outside
    0-:data:`CPU_ID_MAX` (before any range is expanded), an empty list, or CPUs ``node`` does
    not have."""
    if isinstance(value, list):
        if not all(isinstance(c, int) and not isinstance(c, bool) for c in value):
            errs.add(path, f"must be a cpulist string like '0-31' or a list of CPU ids, got {json_spelled(value)}")
            return None
        if _cpu_out_of_range(errs, path, value, node):
            return None
        twice = sorted(c for c, n in collections.Counter(value).items() if n > 1)
        if twice:
            errs.add(path, f"CPU {twice[0]} is listed twice" if len(twice) == 1
                     else f"CPUs {format_cpulist(twice)} are listed more than once")
            return None
        cpus = sorted(set(value))
    elif isinstance(value, str):
        text = value.replace(" ", "")
        if len(text) > CPULIST_MAX_CHARS or not CPULIST_RE.match(text):
            errs.add(path, f"must be kernel cpulist syntax like '0-31,64-95', got {json_spelled(value)}")
            return None
        # Bounds first: a hostile range must not expand to billions of ids.
        if _cpu_out_of_range(errs, path, [int(n) for n in re.split(r"[,-]", text)], node):
            return None
        try:
            cpus = parse_cpulist(text)
        except ValueError as exc:
            errs.add(path, f"{exc}")
            return None
        overlap = _cpulist_overlap(text)
        if overlap is not None:
            errs.add(path, f"CPU {overlap} is listed more than once in {json_spelled(value)}")
            return None
    else:
        errs.add(path, f"must be a cpulist string like '0-31', got {json_spelled(value)}")
        return None
    if not cpus:
        errs.add(path, "must name at least one CPU")
        return None
    known = node.all_cpus()
    if not known:
        errs.add(path, _cpus_not_reported(node, cpus))
        return None
    missing = sorted(set(cpus) - known)
    if missing:
        errs.add(path, f"CPUs {format_cpulist(missing)} do not exist on node {node.name} (it has {format_cpulist(known) or 'none'})")
        return None
    return cpus


def _cpulist_overlap(text: str) -> int | None:
    """The first CPU id two parts of a well-formed cpulist ``text`` both name (``"0-3,2"`` → 2),
    or None. Works on the ranges, without expanding them."""
    spans = sorted((int(a), int(b or a)) for a, _, b in (part.partition("-") for part in text.split(",")))
    for (_, end), (start, _) in zip(spans, spans[1:]):
        if start <= end:
            return start
    return None


def _numa_of(cpus: list[int], node: NodeFacts) -> int | None:
    """The NUMA node holding all of ``cpus``, or None when they span nodes or are unknown."""
    for n in node.numa_nodes:
        if set(cpus) <= set(n.cpus):
            return n.index
    return None


def _host_check(errs: _Errors, path: str, host: Any) -> str:
    if host is None:
        return DEFAULT_HOST
    if not isinstance(host, str):
        errs.add(path, f"must be a string, got {json_spelled(host)}")
        return DEFAULT_HOST
    if host.startswith("-"):
        errs.add(path, f"must not start with '-', got {json_spelled(host)}")
        return DEFAULT_HOST
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if not HOSTNAME_RE.match(host):
        errs.add(path, f"must be an IP address or host name, got {json_spelled(host)}")
        return DEFAULT_HOST
    return host


def _port_field(errs: _Errors, path: str, value: Any, default: int | None) -> int | None:
    if value is None:
        if default is None:
            errs.add(path, "is required")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        errs.add(path, f"must be an integer port, got {not_integer(value, json_spelled(value))}")
        return None
    if not 1024 <= value <= 65535:
        errs.add(path, f"must be between 1024 and 65535, got {json_spelled(value)}")
        return None
    return value


def _flags_check(errs: _Errors, path: str, flags: Any, allow: dict[str, FlagSpec], reserved: dict[str, str],
                 what: str, role_name: str, value_problem: Any = None) -> dict:
    """The normalised ``flags``; problems go to ``errs``. ``value_problem(name, value)``, an
    engine's own rule for some values (a message or None, e.g. llama.cpp's registered chat
    formats, :meth:`deployments.engines.llamacpp.LlamaCppAdapter.flag_value_problem`), is asked
    before the type check."""
    flags = _object_check(errs, path, flags, " of flag: value")
    if flags is None:
        return {}
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for raw, value in flags.items():
        if not isinstance(raw, str) or not raw.strip("-"):
            errs.add(path, f"flag names must be non-empty strings, got {json_spelled(raw)}")
            continue
        # "--mem-fraction-static" and "mem-fraction-static" name the same flag; its problems sit at
        # the key as written (flags.--mem-fraction-static), as every other key's path spells it.
        name = raw.lstrip("-")
        fpath = f"{path}.{raw}"
        if name in spelled:
            errs.add(fpath, f"--{name} is given twice ({json_spelled(spelled[name])} and {json_spelled(raw)}); give it once")
            out.pop(name, None)
            continue
        spelled[name] = raw
        if name in reserved:
            field = reserved[name].replace("<role>", role_name)
            errs.add(fpath, f"--{name} is set by Ceiling from {field}; set that instead")
            continue
        if SECRET_FLAG_RE.search(name):
            errs.add(fpath, f"--{name} carries a secret, so its value is not taken here: {SECRET_INSTEAD}")
            continue
        spec = allow.get(name)
        if spec is None:
            errs.add(fpath, unknown_flag_message(name, allow, what, spelled=raw))
            continue
        if spec.roles is not None and role_name not in spec.roles:
            errs.add(fpath, f"--{name} only applies to role {', '.join(sorted(spec.roles))}")
            continue
        message = value_problem(name, value) if value_problem is not None else None
        if message is None:
            clean, message = flag_value_check(spec, value, model_roots=settings.CEILING_MODEL_ROOTS)
        if message:
            errs.add(fpath, f"--{name} {message}")
            continue
        out[name] = clean
        errs.written[f"{path}.{name}"] = fpath
    return dict(sorted(out.items()))


def unknown_flag_message(name: str, allow: dict[str, FlagSpec], what: str, spelled: str | None = None) -> str:
    """The error for a flag outside ``allow``: the closest allowed spellings when there are
    some (``difflib`` ratio >= 0.6), else every allowed flag, and where the types are listed.

    ``what`` names the allowlist (``"sglang"``, ``"sglang router"``), as in the reference's
    section titles of :data:`RECIPE_DOC_PATH`. ``spelled`` is the key as the recipe wrote it
    (``"--evil"`` for the flag ``evil``): the message quotes it so, and writes the closest
    spellings with the same dashes (``did you mean '--mem-fraction-static'?``).
    """
    spelled = name if spelled is None else spelled
    dashes = spelled[:len(spelled) - len(name)] if spelled.endswith(name) else ""
    close = difflib.get_close_matches(name, list(allow), n=3)
    where = f"see {RECIPE_DOC_PATH}, section '{what} flags', for every allowed flag and its type"
    if close:
        options = " or ".join(json_spelled(dashes + c) for c in close)
        return f"unknown {what} flag {json_spelled(spelled)}: not in the allowlist; did you mean {options}? ({where})"
    if not allow:
        return f"unknown {what} flag {json_spelled(spelled)}: {what} takes no flags"
    return (f"unknown {what} flag {json_spelled(spelled)}: not in the allowlist; allowed: {', '.join(sorted(allow))} "
            f"({where})")


# --- env and secrets -----------------------------------------------------------------------

def env_name_problem(name: str) -> str | None:
    """Why ``name`` may not be set in an engine's environment, or None when it may.

    The deny lists are checked first and always win (see the module docstring for why).
    """
    if not isinstance(name, str) or not ENV_NAME_RE.match(name):
        return f"{json_spelled(name)} is not a valid variable name (letters, digits, _; not starting with a digit)"
    upper = name.upper()
    if upper in ENV_RENDERER_OWNED:
        return f"{name} is set by Ceiling from {ENV_RENDERER_OWNED[upper]}"
    if upper in ENV_DENIED_NAMES:
        return f"{name} is not allowed: {ENV_DENIED_REASONS.get(upper, ENV_CODE_REASON)}"
    if upper.startswith(ENV_DENIED_PREFIXES):
        prefix = next(p for p in ENV_DENIED_PREFIXES if upper.startswith(p))
        return f"{name} is not allowed: {ENV_DENIED_REASONS.get(prefix, ENV_CODE_REASON)}"
    if upper.endswith(ENV_DENIED_CODE_SUFFIXES):
        return f"{name} is not allowed: {ENV_CODE_REASON}"
    if upper.endswith(ENV_DENIED_FILE_SUFFIXES):
        suffix = next(x for x in ENV_DENIED_FILE_SUFFIXES if upper.endswith(x))
        return (f"{name} is not allowed: a name ending in {suffix} names a file or folder for a library to read "
                f"or write, and no variable may point one at a path (only {', '.join(sorted(ENV_PATH_NAMES))} "
                "takes a folder, under the model roots; the model's own path is spec.model.path)")
    if any(part in f"_{upper}" for part in ENV_DENIED_PARTS):
        return (f"{name} is not allowed: it switches on an unsafe mode (development endpoints, code or adapters "
                "loaded at run time, unsafe deserialisation)")
    if name in ENV_ALLOWED_NAMES or name.startswith(ENV_ALLOWED_PREFIXES):
        return None
    return (f"{name} is not in the allowlist (names {', '.join(sorted(ENV_ALLOWED_NAMES))}; "
            f"prefixes {', '.join(ENV_ALLOWED_PREFIXES)})")


def env_value_problem(name: str, value: str) -> str | None:
    """Why ``value`` may not be given to the allowed variable ``name``, or None when it may.

    Only :data:`ENV_PATH_NAMES` take a path, which must lie under ``settings.CEILING_MODEL_ROOTS``
    like a model path; any other value containing ``/`` is refused, so no variable (whatever its
    name) can point a library at a file or folder to load, read or write.
    """
    if name in ENV_PATH_NAMES:
        problem = path_problem(value)
        if problem:
            return f"{name} {problem}"
        return path_under_roots_problem(value, settings.CEILING_MODEL_ROOTS)
    if name == "TZ":
        return tz_value_problem(value)
    if "/" in value:
        return (f"{name}'s value contains '/': a value may not name a file or folder "
                f"(only {', '.join(sorted(ENV_PATH_NAMES))} takes a path, under the model roots)")
    return None


#: Examples of a ``TZ`` value, as refusals name them.
TZ_EXAMPLES = "such as Europe/Paris, UTC or CET-1CEST,M3.5.0,M10.5.0/3"
#: What a refusal of a value that is neither says ``TZ`` takes.
TZ_NEITHER = ("neither a time zone of the IANA tz database (Europe/Paris, UTC) nor a POSIX TZ rule "
              "(CET-1CEST,M3.5.0,M10.5.0/3)")
# The shape of a zone name of the tz database: components of letters, digits, '_', '+' and '-'.
_TZ_ZONE_SHAPE = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")
# The parts of a POSIX TZ rule (posix_tz_problem): an unquoted zone abbreviation, what a quoted one
# holds between '<' and '>', an offset or time of day, and a day of the summer time rule.
_TZ_LETTERS = re.compile(r"[A-Za-z]*")
_TZ_QUOTED = re.compile(r"[A-Za-z0-9+-]{3,}")
_TZ_CLOCK = re.compile(r"[+-]?(\d{1,3})(?::(\d{1,2})(?::(\d{1,2}))?)?")
_TZ_DAY = re.compile(r"J(\d{1,3})|(\d{1,3})|M(\d{1,2})\.(\d)\.(\d)")


def tz_value_problem(value: str) -> str | None:
    """Why ``value`` may not be ``TZ``, or None when it may. glibc takes any text and silently
    keeps UTC for what it cannot read, so only these are taken:

    * a zone of the IANA tz database this control plane knows (``zoneinfo.available_timezones()``,
      such as ``Europe/Paris``, ``UTC``, ``EST5EDT``), ``UTC`` always;
    * the same name after ``:`` (``:Europe/Paris``), the form that names a zone file of the tz
      database: checked as the name is, and never a path;
    * a POSIX TZ rule (:func:`posix_tz_problem`: POSIX.1-2024 XBD 8.3 ``TZ``, tzset(3)), such as
      ``EST5``, ``EST5EDT,M3.2.0,M11.1.0``, ``CET-1CEST,M3.5.0,M10.5.0/3`` or ``<+0330>-3:30``.

    Anything else is refused with the reason: empty, white space, an absolute path or one holding
    ``..`` (TZ never names a file), a zone name the tz database lacks (with the close names, when
    there are any), or text that is neither (with what makes it no POSIX rule)."""
    if value == "":
        return f"TZ's value is empty: give a time zone {TZ_EXAMPLES}, or leave TZ out for the host's zone"
    zones = tz_zones()
    if any(c.isspace() for c in value):
        close = _tz_close_zones("".join(value.split()), zones)
        hint = f"; did you mean {' or '.join(close)}?" if close else f" (give one {TZ_EXAMPLES})"
        return f"TZ's value {json_spelled(value)} holds white space, which no zone name or POSIX TZ rule has{hint}"
    name = value[1:] if value.startswith(":") else value
    if name.startswith("/") or ".." in name.split("/"):
        return (f"TZ's value {json_spelled(value)} is a path: TZ takes a time zone name such as Europe/Paris, "
                "never a file or folder")
    if value.startswith(":"):
        if not name:
            return "TZ's value ':' names no zone: give one after the ':' (:Europe/Paris), or leave the ':' out"
        if name in zones:
            return None
        close = [f":{zone}" for zone in _tz_close_zones(name, zones)]
        hint = f"; did you mean {' or '.join(close)}?" if close else " (such as :Europe/Paris or :UTC)"
        return (f"TZ's value {json_spelled(value)} names a zone file of the tz database, and {json_spelled(name)} "
                f"is not a time zone of the IANA tz database{hint}")
    if value in zones:
        return None
    problem = posix_tz_problem(value)
    if problem is None:
        return None
    close = _tz_close_zones(value, zones)
    if "/" in value and _TZ_ZONE_SHAPE.fullmatch(value):
        hint = f"; did you mean {' or '.join(close)}?" if close else " (such as Europe/Paris or America/New_York)"
        return f"TZ's value {json_spelled(value)} is not a time zone of the IANA tz database{hint}"
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"TZ's value {json_spelled(value)} is {TZ_NEITHER}: {problem}{hint}"


@functools.lru_cache(maxsize=1)
def tz_zones() -> frozenset[str]:
    """The zone names ``TZ`` takes: ``zoneinfo.available_timezones()`` (the tz database of the
    system or the ``tzdata`` package, read once per process: it walks the database's folders) and
    ``UTC``, less ``localtime``: on Debian that file is a link to the host's ``/etc/localtime``, so
    the name would give an engine the host's zone, a file in disguise, not a zone."""
    import zoneinfo

    return frozenset((zoneinfo.available_timezones() | {"UTC"}) - {"localtime"})


def _tz_close_zones(value: str, zones: frozenset[str]) -> list[str]:
    """At most two zone names close to ``value``: the zone spelt so in another case (``utc``), else
    names close to it ignoring case (``Europe/Pariss``), else, for a value without ``/``, zones
    whose last part is close to it (``Pariss`` → ``Europe/Paris``)."""
    by_lower: dict[str, list[str]] = {}
    for zone in sorted(zones):
        by_lower.setdefault(zone.lower(), []).append(zone)
    lowered = value.lower()
    if lowered in by_lower:
        return by_lower[lowered][:2]
    close = difflib.get_close_matches(lowered, list(by_lower), n=2, cutoff=0.8)
    if close:
        return [by_lower[c][0] for c in close]
    if "/" in value or not value:
        return []
    by_last: dict[str, list[str]] = {}
    for zone in sorted(zones):
        if "/" in zone:
            by_last.setdefault(zone.rsplit("/", 1)[1].lower(), []).append(zone)
    close = difflib.get_close_matches(lowered, list(by_last), n=2, cutoff=0.8)
    return [zone for c in close for zone in by_last[c]][:2]


def posix_tz_problem(value: str) -> str | None:
    """What makes ``value`` no POSIX TZ rule, in words, or None when it is one. The format is
    POSIX.1-2024's (XBD 8.3, the ``TZ`` variable; glibc's tzset(3) reads the same), as
    ``std offset [dst [offset] [,start[/time],end[/time]]]``:

    * ``std`` and ``dst``: a zone abbreviation, 3 or more letters (``EST``), or 3 or more letters,
      digits, ``+`` and ``-`` in angle brackets (``<+0330>``);
    * ``offset``: what is added to local time to get UTC, ``[+|-]hh[:mm[:ss]]``, hours 0 to 24
      (``5`` is 5 hours west of Greenwich, ``-1`` one hour east); ``dst``'s defaults to one hour
      less than ``std``'s;
    * ``start`` and ``end``: the day summer time starts and ends, ``Jn`` (day 1 to 365, February 29
      never counted), ``n`` (day 0 to 365) or ``Mm.w.d`` (month 1 to 12, week 1 to 5, day of the week
      0 (Sunday) to 6); each with an optional ``/time``, ``[+|-]hh[:mm[:ss]]``, hours -167 to 167
      (2:00 when left out). Without them the C library takes the US rules (``M3.2.0,M11.1.0``)."""
    pos = 0

    def abbreviation(which: str) -> str | None:
        nonlocal pos
        if value.startswith("<", pos):
            end = value.find(">", pos + 1)
            if end == -1:
                return f"the {which} zone abbreviation {json_spelled(value[pos:])} has no closing '>'"
            inner = value[pos + 1:end]
            if not _TZ_QUOTED.fullmatch(inner):
                return (f"the {which} zone abbreviation {json_spelled(value[pos:end + 1])} needs 3 or more letters, "
                        "digits, '+' or '-' between '<' and '>'")
            pos = end + 1
            return None
        match = _TZ_LETTERS.match(value, pos)
        letters = match.group(0)
        if len(letters) < 3:
            got = json_spelled(letters or value[pos:])
            return (f"the {which} zone abbreviation needs 3 or more letters (EST) or angle brackets (<+0330>), "
                    f"got {got}")
        pos = match.end()
        return None

    def clock(what: str, max_hours: int) -> str | None:
        nonlocal pos
        match = _TZ_CLOCK.match(value, pos)
        if not match:
            return f"{what} is missing: got {json_spelled(value[pos:]) if pos < len(value) else 'nothing'}"
        hours, minutes, seconds = (int(g) if g is not None else 0 for g in match.groups())
        if hours > max_hours or minutes > 59 or seconds > 59:
            return (f"{what} {json_spelled(match.group(0))} is out of range (hours 0 to {max_hours}, minutes and "
                    "seconds 0 to 59)")
        pos = match.end()
        return None

    def date(which: str) -> str | None:
        nonlocal pos
        match = _TZ_DAY.match(value, pos)
        rest = json_spelled(value[pos:]) if pos < len(value) else "nothing"
        if not match:
            return (f"the summer time {which} needs a day, Jn (1 to 365), n (0 to 365) or Mm.w.d (month 1 to 12, "
                    f"week 1 to 5, weekday 0 to 6), got {rest}")
        julian, day, month, week, weekday = match.groups()
        if (julian is not None and not 1 <= int(julian) <= 365) or (day is not None and int(day) > 365) or (
                month is not None and not (1 <= int(month) <= 12 and 1 <= int(week) <= 5 and int(weekday) <= 6)):
            return (f"the day {json_spelled(match.group(0))} is out of range (Jn: 1 to 365, n: 0 to 365, Mm.w.d: "
                    "month 1 to 12, week 1 to 5, weekday 0 to 6)")
        pos = match.end()
        if value.startswith("/", pos):
            pos += 1
            return clock(f"the time of day of the summer time {which}", 167)
        return None

    problem = abbreviation("standard time")
    if problem:
        return problem
    if pos == len(value):
        return (f"{json_spelled(value)} has no offset from UTC after its zone abbreviation (EST5: 5 hours west of "
                "Greenwich; CET-1: 1 hour east)")
    problem = clock("the offset from UTC after the standard time abbreviation", 24)
    if problem:
        return problem
    if pos == len(value):
        return None
    if value[pos] == ",":
        return "a summer time rule (,start,end) needs the summer time abbreviation before it (CET-1CEST,M3.5.0,M10.5.0/3)"
    problem = abbreviation("summer time")
    if problem:
        return problem
    if pos < len(value) and value[pos] != ",":
        problem = clock("the summer time offset from UTC", 24)
        if problem:
            return problem
    if pos == len(value):
        return None
    if value[pos] != ",":
        return f"{json_spelled(value[pos:])} follows where only the summer time rule (,start,end) may"
    for which in ("start", "end"):
        if not value.startswith(",", pos):
            return (f"the summer time rule needs its {which} after a ',' (,start,end), got "
                    f"{json_spelled(value[pos:]) if pos < len(value) else 'nothing'}")
        pos += 1
        problem = date(which)
        if problem:
            return problem
    if pos != len(value):
        return f"{json_spelled(value[pos:])} follows the end of the summer time rule"
    return None


def _env_check(errs: _Errors, path: str, env: Any) -> dict[str, str]:
    env = _object_check(errs, path, env, " of NAME: value")
    if env is None:
        return {}
    out: dict[str, str] = {}
    for name, value in env.items():
        key = f"{path}.{name}" if isinstance(name, str) and ENV_NAME_RE.match(name) else path
        problem = env_name_problem(name)
        if problem:
            errs.add(key, problem)
            continue
        if SECRET_TARGET_RE.search(name.upper()):
            errs.add(key, f"{name} is named like a credential: store its value as a secret and reference it "
                          f"from spec.secrets ({{\"{name}\": \"<secret name>\"}}); a plain env value is stored "
                          "and shown in clear")
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            errs.add(key, f"value must be a string, got {json_spelled(value)}")
            continue
        text = str(value)
        if any(c in text for c in ENV_VALUE_REFUSED_CHARS) or any(ord(c) < 0x20 and c != "\t" for c in text):
            errs.add(key, "value must not contain NUL, line breaks (any that str.splitlines() splits at: \\n, \\r, "
                          "\\v, \\f, \\x1c-\\x1e, \\x85, U+2028, U+2029) or other control characters")
        elif len(text) > MAX_ENV_VALUE:
            errs.add(key, f"value is {len(text)} characters; at most {MAX_ENV_VALUE}")
        elif (problem := env_value_problem(name, text)) is not None:
            errs.add(key, problem)
        else:
            out[name] = posixpath.normpath(text) if name in ENV_PATH_NAMES else text
    return dict(sorted(out.items()))


def _secrets_check(errs: _Errors, secrets: Any, secret_names: set[str] | None) -> dict[str, str]:
    secrets = _object_check(errs, "spec.secrets", secrets, " of ENV_NAME: secret name")
    if secrets is None:
        return {}
    out: dict[str, str] = {}
    for name, secret in secrets.items():
        key = f"spec.secrets.{name}" if isinstance(name, str) and ENV_NAME_RE.match(name) else "spec.secrets"
        problem = env_name_problem(name)
        if problem:
            errs.add(key, problem)
            continue
        if not SECRET_TARGET_RE.search(name.upper()):
            errs.add(key, f"{name} is not named like a credential: a secret may only fill a variable whose name "
                          "ends in TOKEN, KEY, SECRET, PASSWORD, PASSWD, CREDENTIAL(S) or AUTH (an engine may "
                          "echo or transform any other variable's value, past redaction)")
            continue
        if not isinstance(secret, str) or not SECRET_NAME_RE.match(secret):
            errs.add(key, f"must name a secret (lowercase letters, digits, . _ -), got {json_spelled(secret)}")
            continue
        if secret_names is not None and secret not in secret_names:
            errs.add(key, f"secret {json_spelled(secret)} does not exist")
            continue
        out[name] = secret
    return dict(sorted(out.items()))


# --- scalars -------------------------------------------------------------------------------

#: What a numeric field's look-up gives for a key the spec leaves out: the default is taken then,
#: while an explicit JSON ``null`` is a value of the wrong type (``must be an integer, got null``).
ABSENT: Any = object()


def _int_field(errs: _Errors, path: str, value: Any, default: int, lo: int, hi: int) -> int:
    """``value`` as an integer in [``lo``, ``hi``]; ``default`` when it is :data:`ABSENT` (the key
    left out). Anything else, ``null`` included, is an error at ``path`` quoting it."""
    if value is ABSENT:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        errs.add(path, f"must be an integer, got {not_integer(value, json_spelled(value))}")
        return default
    if not lo <= value <= hi:
        errs.add(path, f"must be between {lo} and {hi}, got {json_spelled(value)}")
        return default
    return value


def _num_field(errs: _Errors, path: str, value: Any, default: float, lo: float, hi: float) -> float:
    """``value`` as a number in [``lo``, ``hi``]; ``default`` when it is :data:`ABSENT` (the key
    left out). Anything else, ``null`` included, is an error at ``path`` quoting it."""
    if value is ABSENT:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        errs.add(path, f"must be a number, got {json_spelled(value)}")
        return default
    if not lo <= value <= hi:
        errs.add(path, f"must be between {lo:g} and {hi:g}, got {json_spelled(value)}")
        return default
    return float(value)


def _restart_check(errs: _Errors, restart: Any) -> dict:
    out = dict(DEFAULT_RESTART)
    restart = _object_check(errs, "spec.restart", restart)
    if restart is None:
        return out
    for key in restart:
        if key not in DEFAULT_RESTART:
            errs.add(f"spec.restart.{key}", f"unknown field {json_spelled(key)}; allowed: {', '.join(DEFAULT_RESTART)}")
    policy = restart.get("policy", out["policy"])
    if policy not in ("never", "on-failure"):
        errs.add("spec.restart.policy", f"must be never or on-failure, got {json_spelled(policy)}")
    else:
        out["policy"] = policy
    out["max_failures"] = _int_field(errs, "spec.restart.max_failures", restart.get("max_failures", ABSENT), out["max_failures"], 1, 100)
    out["window_s"] = _int_field(errs, "spec.restart.window_s", restart.get("window_s", ABSENT), out["window_s"], 1, 86_400)
    out["backoff_initial_s"] = _num_field(errs, "spec.restart.backoff_initial_s", restart.get("backoff_initial_s", ABSENT),
                                          out["backoff_initial_s"], 0.1, 3600)
    out["backoff_max_s"] = _num_field(errs, "spec.restart.backoff_max_s", restart.get("backoff_max_s", ABSENT),
                                      out["backoff_max_s"], 0.1, 3600)
    if out["backoff_max_s"] < out["backoff_initial_s"]:
        errs.add("spec.restart.backoff_max_s",
                 f"must be at least backoff_initial_s ({out['backoff_initial_s']:g}), got {out['backoff_max_s']:g}")
    return out


def _sim_check(errs: _Errors, sim: Any, worker_roles: list[str]) -> dict:
    """``spec.sim``: ``profile`` (the name of a profile under ``deployments/data/sim_profiles/``
    that loads) and optional ``gpus_modelled``, the GPUs the
    profile stands for (the simulator takes none), used for per-GPU benchmark numbers: an integer
    1..1024 for the whole deployment, or ``{role: int}`` over the recipe's worker roles (e.g.
    ``{"prefill": 4, "decode": 4}`` for the seed PD profile)."""
    sim = _object_check(errs, "spec.sim", sim)
    if sim is None:
        return {"profile": DEFAULT_PROFILE}
    for key in sim:
        if key not in ("profile", "gpus_modelled"):
            errs.add(f"spec.sim.{key}", f"unknown field {json_spelled(key)}; allowed: profile, gpus_modelled")
    profile = sim.get("profile", DEFAULT_PROFILE)
    if not isinstance(profile, str) or not PROFILE_RE.match(profile):
        errs.add("spec.sim.profile",
                 f"must be a profile name (lowercase letters, digits, . _ -), got {json_spelled(profile)}")
        return {"profile": DEFAULT_PROFILE}
    # The engine loads the profile at start-up and exits on one it cannot load: say so now.
    from deployments.engines.simcore.profile import ProfileError, profile_load

    try:
        profile_load(profile)
    except ProfileError as exc:
        errs.add("spec.sim.profile", str(exc))
    out: dict = {"profile": profile}
    if "gpus_modelled" in sim:
        modelled = sim["gpus_modelled"]

        def count_ok(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1024

        if isinstance(modelled, dict):
            for role, v in modelled.items():
                if role not in worker_roles:
                    errs.add(f"spec.sim.gpus_modelled.{role}",
                             f"not a worker role of this recipe; allowed: {', '.join(worker_roles)}")
                elif not count_ok(v):
                    errs.add(f"spec.sim.gpus_modelled.{role}", f"must be an integer 1..1024, got {not_integer(v, json_spelled(v))}")
            out["gpus_modelled"] = dict(modelled)
        elif count_ok(modelled):
            out["gpus_modelled"] = modelled
        else:
            errs.add("spec.sim.gpus_modelled",
                     f"must be an integer 1..1024 or an object {{role: integer}}, got {not_integer(modelled, json_spelled(modelled))}")
    return out


# --- cross-role rules ---------------------------------------------------------------------

def role_port_blocks(role_name: str, role: dict, adapter: EngineAdapter) -> list[tuple[str, int, int]]:
    """Ports a normalised role occupies as ``(field path, first port, count)``.

    The vLLM side channel takes ``tp × dp`` consecutive ports because vLLM offsets the
    NIXL listener per rank; every other port is a single port.
    """
    path = f"spec.roles.{role_name}"
    blocks: list[tuple[str, int, int]] = []
    if role.get("port") is not None:
        blocks.append((f"{path}.port", role["port"], 1))
    if role.get("bootstrap_port") is not None:
        blocks.append((f"{path}.bootstrap_port", role["bootstrap_port"], 1))
    if role.get("side_channel_port") is not None:
        blocks.append((f"{path}.side_channel_port", role["side_channel_port"], role.get("tp", 1) * role.get("dp", 1)))
    allow = adapter.router_flags if role_name == "router" else adapter.worker_flags
    for name, value in role.get("flags", {}).items():
        spec = allow.get(name)
        if spec is not None and spec.kind == "port":
            blocks.append((f"{path}.flags.{name}", value, 1))
    return blocks


def ephemeral_port_warnings(*, spec: dict, node: NodeFacts) -> list[str]:
    """One warning per role of the normalised ``spec`` with ports inside the node's ephemeral
    port range: the node's own ``net.ipv4.ip_local_port_range`` as its facts report it, else
    :data:`DEFAULT_EPHEMERAL_PORT_RANGE` (Linux's default), said so in the warning. Ports the
    node reserves (``net.ipv4.ip_local_reserved_ports``) are left out.

    The kernel hands ports of that range to outgoing connections as source ports; one that
    gets the engine's port before the engine binds holds it (even a connection to that very
    port, which TCP connects to itself), and the engine fails with "address already in use".
    A warning, not an error: the range is the node's setting, a reserved port is safe inside
    it, and Ceiling's own readiness probes never take the port they probe
    (:mod:`deployments.readiness`).
    """
    if node.local_port_range is not None:
        low, high = node.local_port_range
        source = f"node {node.name}'s net.ipv4.ip_local_port_range"
    else:
        low, high = DEFAULT_EPHEMERAL_PORT_RANGE
        source = "the Linux default of net.ipv4.ip_local_port_range; the node did not report its own"
    reserved = node.reserved_ports
    warnings: list[str] = []
    for name, role in (spec.get("roles") or {}).items():
        ports = sorted(p for p in _role_ports(role) if low <= p <= high
                       and not any(a <= p <= b for a, b in reserved))
        if ports:
            which = f"port {ports[0]} is" if len(ports) == 1 else f"ports {', '.join(map(str, ports))} are"
            warnings.append(
                f"{name}: {which} inside the ephemeral port range {low}-{high} ({source}), where any "
                "outgoing connection on the node may take it as its source port before the engine binds "
                "it (\"address already in use\"); use a port outside that range or reserve it with "
                "net.ipv4.ip_local_reserved_ports")
    return warnings


def _role_ports(role: dict) -> set[int]:
    """The ports one normalised role takes (see :func:`deployments.engines.sglang.recipe_ports`)."""
    return recipe_ports({"role": role}) if isinstance(role, dict) else set()


def _router_metrics_port_fill(roles: Any, adapter: EngineAdapter) -> None:
    """Give a PD router without ``prometheus-port`` the default one, in its normalised flags.

    sglang-router (and its fork vllm-router) always starts a metrics server, on port 29000
    unless told otherwise, so two routers on one host clash there; an explicit port is also
    one the port checks see (database and pre-spawn). The default is
    :func:`deployments.engines.sglang.router_metrics_port_default`: the first port above the
    router's that the recipe does not use otherwise.
    """
    router = roles.get("router") if isinstance(roles, dict) else None
    spec = adapter.router_flags.get("prometheus-port")
    if not isinstance(router, dict) or spec is None or spec.kind != "port" or router.get("port") is None:
        return
    flags = router.setdefault("flags", {})
    if "prometheus-port" in flags:
        return
    try:
        flags["prometheus-port"] = router_metrics_port_default(router["port"], recipe_ports(roles))
    except ValueError:
        return  # every port is taken: the port checks report the clashes
    router["flags"] = dict(sorted(flags.items()))


def _ports_unique(errs: _Errors, roles: dict, adapter: EngineAdapter) -> None:
    blocks = [(errs.as_written(path), start, count)
              for name, role in roles.items() for path, start, count in role_port_blocks(name, role, adapter)]
    for path, start, count in blocks:
        if start + count - 1 > 65535:
            errs.add(path, f"ports {start}-{start + count - 1} (tp × dp = {count}) run past 65535")
    for i, (path_a, start_a, count_a) in enumerate(blocks):
        for path_b, start_b, count_b in blocks[i + 1:]:
            lo, hi = max(start_a, start_b), min(start_a + count_a, start_b + count_b) - 1
            if lo <= hi:
                which = f"port {lo}" if lo == hi else f"ports {lo}-{hi}"
                errs.add(path_b, f"{which} also used by {path_a}")
                errs.add(path_a, f"{which} also used by {path_b}")


def _gpus_disjoint(errs: _Errors, roles: dict) -> None:
    names = list(roles)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = sorted(set(roles[a].get("gpus", [])) & set(roles[b].get("gpus", [])))
            for g in shared:
                errs.add(f"spec.roles.{a}.gpus", f"GPU {g} is also used by role {b}")
                errs.add(f"spec.roles.{b}.gpus", f"GPU {g} is also used by role {a}")


# --- the recipe reference (docs/recipes.md) -----------------------------------------------

FLAG_TABLE_RE = re.compile(
    r"(<!-- BEGIN flags (?P<engine>[a-z]+) (?P<kind>worker|router) -->\n).*?(<!-- END flags (?P=engine) (?P=kind) -->)",
    re.DOTALL,
)


def flag_table_render(*, engine: str, kind: str) -> str:
    """Markdown tables of one allowlist: every flag of ``engine``'s ``kind`` (``worker`` or
    ``router``) with its type, roles and meaning, sorted by name, then the flags Ceiling sets
    itself with the recipe field to use instead. ``KeyError`` for an unknown engine.

    This is the generated part of :data:`RECIPE_DOC_PATH`; :func:`recipe_doc_render` puts it
    between the ``<!-- BEGIN flags ENGINE KIND -->`` / ``<!-- END ... -->`` markers.
    """
    adapter = ENGINES[engine]
    allow = adapter.router_flags if kind == "router" else adapter.worker_flags
    reserved = adapter.router_reserved if kind == "router" else adapter.worker_reserved
    lines = ["| Flag | Type | Roles | What it sets |", "|---|---|---|---|"]
    for name in sorted(allow):
        spec = allow[name]
        roles = ", ".join(sorted(spec.roles)) if spec.roles else ("router" if kind == "router" else "all")
        lines.append(f"| `--{name}` | {flag_type_text(spec)} | {roles} | {spec.help.replace('|', '/')} |")
    if reserved:
        lines += ["", "Set by Ceiling, refused in `flags` (set the recipe field instead):", "",
                  "| Flag | Recipe field |", "|---|---|"]
        lines += [f"| `--{name}` | `{field}` |" for name, field in sorted(reserved.items())]
    return "\n".join(lines) + "\n"


def recipe_doc_render(text: str) -> str:
    """``text`` (the reference document) with every generated flag table replaced by the
    current allowlists (:func:`flag_table_render`); everything outside the markers is kept.

    A test asserts the committed document is a fixed point of this function. To regenerate
    after changing an allowlist::

        .venv/bin/python -c "import pathlib; from deployments.recipes import recipe_doc_render as r; \\
            p = pathlib.Path('docs/recipes.md'); p.write_text(r(p.read_text()))"
    """
    def table(match: re.Match) -> str:
        return match.group(1) + flag_table_render(engine=match["engine"], kind=match["kind"]) + match.group(4)

    return FLAG_TABLE_RE.sub(table, text)


def _ids(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids)
