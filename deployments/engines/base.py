"""Shared vocabulary of the engine adapters: typed flag specs and the adapter interface.

Each engine module (``sglang``, ``vllm``, ``llamacpp``, ``sim``) declares

* ``WORKER_FLAGS`` / ``ROUTER_FLAGS``: the allowlist of engine flags a recipe may set, keyed by
  the flag's spelling on the engine's command line without the leading ``--``
  (``"mem-fraction-static"`` for SGLang, ``"n_ctx"`` for llama-cpp-python), each a
  :class:`FlagSpec` saying its type and range. Every string-valued flag is typed as tightly
  as its engine allows: a ``choice`` where the engine has a fixed list, a ``name`` (short
  identifier) where it looks a name up in a registry of its own, and a path kind where it
  opens a file, which must then lie under the model roots like the model itself;
* ``WORKER_RESERVED`` / ``ROUTER_RESERVED``: flags the renderer sets itself, mapped to the
  recipe field that controls them, so validation can point a person at the right field;
* an :class:`EngineAdapter` instance ``ADAPTER`` that turns a validated role into argv.

Nothing here touches the filesystem, the database or the network.
"""
from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from controlplane.jsonsafe import json_spelled, not_integer

FlagKind = Literal["int", "float", "bool", "choice", "name", "names", "path", "template", "model", "port"]

# Names (parser names, quantisation methods, chat template names...) are short identifiers
# looked up in a registry of the engine. No "/" (a name must never be read as a path), no
# ":" or "@" (URLs, user@host) and the first character may not be "-", so a value can never
# be read as another option.
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}$")
# Hugging Face repository ids ("org/name"); the same rule as a recipe's spec.model.name.
REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
MAX_PATH_LEN = 4096
MAX_NAMES = 32


@dataclass(frozen=True)
class FlagSpec:
    """One allowed engine flag.

    ``kind``:

    * ``int`` / ``float``: inclusive ``min`` / ``max``; floats must be finite;
    * ``bool``: a switch rendered as ``--flag`` when true and omitted when false
      (``bool_style="value"`` renders ``--flag true|false`` for parsers that take a value);
    * ``choice``: exactly one of ``choices`` (case-sensitive, the engine's own spelling);
    * ``name``: an identifier matching :data:`NAME_RE`, for values the engine resolves in a
      registry whose contents change between releases (parsers, quantisation methods);
    * ``names``: a comma-separated list of such names (``mlx5_0,mlx5_1``);
    * ``path``: a file or directory the engine opens: absolute, normalised, no ``..``, and
      under one of the model roots (``settings.CEILING_MODEL_ROOTS``, the rule of
      ``spec.model.path``);
    * ``template``: a built-in template name (:data:`NAME_RE`) or a ``path`` as above;
    * ``model``: a ``path`` as above or a Hugging Face repository id (``org/name``);
    * ``port``: 1024-65535, counted in the recipe's port-uniqueness check.

    ``roles`` limits the flag to some worker roles (None = every role of its kind).
    """

    kind: FlagKind
    help: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    roles: frozenset[str] | None = None
    bool_style: Literal["switch", "value"] = "switch"


def flag_value_check(spec: FlagSpec, value: Any, *, model_roots: Sequence[str] = ()) -> tuple[Any, str | None]:
    """Check one flag value against its spec.

    ``model_roots`` are the directories a path-typed value must lie under (pass
    ``settings.CEILING_MODEL_ROOTS``); with none, every path is refused. Returns
    ``(normalised_value, None)`` or ``(None, message)``; never raises. Booleans are not
    accepted as ints (JSON ``true`` is not ``1``), and floats must be finite.
    """
    kind = spec.kind
    if kind == "bool":
        if isinstance(value, bool):
            return value, None
        return None, f"must be true or false, got {json_spelled(value)}"
    if kind in ("int", "port"):
        if isinstance(value, bool) or not isinstance(value, int):
            return None, f"must be an integer, got {not_integer(value, json_spelled(value))}"
        lo, hi = (1024, 65535) if kind == "port" else (spec.min, spec.max)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            return None, f"must be between {_num(lo)} and {_num(hi)}, got {json_spelled(value)}"
        return value, None
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None, f"must be a number, got {json_spelled(value)}"
        value = float(value)
        if not math.isfinite(value):
            return None, f"must be a finite number, got {json_spelled(value)}"
        if (spec.min is not None and value < spec.min) or (spec.max is not None and value > spec.max):
            return None, f"must be between {_num(spec.min)} and {_num(spec.max)}, got {json_spelled(value)}"
        return value, None
    if not isinstance(value, str):
        return None, f"must be a string, got {json_spelled(value)}"
    if kind == "choice":
        if value not in spec.choices:
            return None, f"must be one of {', '.join(spec.choices)}; got {json_spelled(value)}"
        return value, None
    if value.startswith("-"):
        return None, f"must not start with '-', got {json_spelled(value)}"
    if kind == "name":
        if not NAME_RE.match(value):
            return None, f"must be a name of 1-64 letters, digits or _ . + - characters, got {json_spelled(value)}"
        return value, None
    if kind == "names":
        items = value.split(",")
        if len(items) > MAX_NAMES or not all(NAME_RE.match(item) for item in items):
            return None, (f"must be up to {MAX_NAMES} comma-separated names (letters, digits, _ . + -), "
                          f"got {json_spelled(value)}")
        return value, None
    if kind == "path":
        return _under_roots(value, model_roots)
    if kind == "template":
        if value.startswith("/"):
            return _under_roots(value, model_roots)
        if not NAME_RE.match(value):
            return None, (f"must be a built-in template name (letters, digits, _ . + -) or an absolute path "
                          f"under a model root, got {json_spelled(value)}")
        return value, None
    if kind == "model":
        if value.startswith("/"):
            return _under_roots(value, model_roots)
        if not REPO_ID_RE.match(value):
            return None, (f"must be an absolute path under a model root or a repository id like org/name, "
                          f"got {json_spelled(value)}")
        return value, None
    return None, f"unsupported flag kind {kind}"  # pragma: no cover - specs are static


def _under_roots(value: str, model_roots: Sequence[str]) -> tuple[str | None, str | None]:
    message = path_under_roots_problem(value, model_roots)
    if message:
        return None, message
    return posixpath.normpath(value), None


def path_under_roots_problem(value: Any, model_roots: Sequence[str]) -> str | None:
    """Why ``value`` is not an acceptable path under one of ``model_roots``, or None.

    The lexical rules of :func:`path_problem`, then: the normalised path lies strictly inside
    one of the roots (a root itself is not a model: ``'/models' is a model root itself; give a
    model file or directory under it``). This is the rule of ``spec.model.path``
    and of every path-typed flag, so a recipe can only point an engine at files below the
    directories an operator configured (``CEILING_MODEL_ROOTS``), never at ``/etc/shadow``.
    """
    message = path_problem(value)
    if message:
        return message
    clean = posixpath.normpath(value)
    roots = [posixpath.normpath(str(r)) for r in model_roots]
    if clean in roots:
        return f"{json_spelled(clean)} is a model root itself; give a model file or directory under it"
    if not any(clean.startswith(r.rstrip("/") + "/") for r in roots):
        return f"{json_spelled(clean)} is not under a model root ({', '.join(roots) or 'none configured'})"
    return None


def path_problem(value: str) -> str | None:
    """Why ``value`` is not an acceptable absolute path, or None.

    Rules: a string, absolute, no ``..`` segment, no NUL/newline, not starting with ``-``,
    at most :data:`MAX_PATH_LEN` characters. Purely lexical: the path may live on another
    host, so the filesystem is never consulted.
    """
    if not isinstance(value, str):
        return f"must be a string, got {json_spelled(value)}"
    if value.startswith("-"):
        return f"must not start with '-', got {json_spelled(value)}"
    if not value or len(value) > MAX_PATH_LEN:
        return f"must be 1-{MAX_PATH_LEN} characters"
    if any(c in value for c in "\x00\n\r"):
        return "must not contain NUL or line breaks"
    if not value.startswith("/"):
        return f"must be an absolute path, got {json_spelled(value)}"
    if ".." in value.split("/"):
        return f"must not contain a '..' segment, got {json_spelled(value)}"
    return None


def flag_type_text(spec: FlagSpec) -> str:
    """One-line description of what ``spec`` accepts, for the recipe reference
    (``docs/recipes.md``) and error messages: ``"float 0.01-1"``, ``"one of: a, b"``..."""
    kind = spec.kind
    if kind in ("int", "float"):
        if spec.min is None and spec.max is None:
            return kind
        return f"{kind} in [{_num(spec.min)}, {_num(spec.max)}]"
    if kind == "bool":
        return "bool (true renders `--flag true`, false `--flag false`)" if spec.bool_style == "value" else \
            "bool (true adds the switch)"
    if kind == "choice":
        return "one of: " + ", ".join(f"`{c}`" for c in spec.choices)
    return {
        "name": "name (letters, digits, `_ . + -`)",
        "names": "comma-separated names",
        "path": "absolute path under a model root",
        "template": "built-in template name, or absolute path under a model root",
        "model": "absolute path under a model root, or repository id `org/name`",
        "port": "port 1024-65535 (unique across the recipe)",
    }[kind]


def flag_argv(name: str, spec: FlagSpec, value: Any) -> list[str]:
    """Render one validated flag as argv items (``[]`` for a false switch)."""
    if spec.kind == "bool":
        if spec.bool_style == "value":
            return [f"--{name}", "true" if value else "false"]
        return [f"--{name}"] if value else []
    if spec.kind == "float":
        return [f"--{name}", repr(float(value))]
    return [f"--{name}", str(value)]


def flags_argv(flags: dict[str, Any], allow: dict[str, FlagSpec]) -> list[str]:
    """Render a validated flag dict in sorted flag-name order (stable argv for golden tests)."""
    out: list[str] = []
    for name in sorted(flags):
        out.extend(flag_argv(name, allow[name], flags[name]))
    return out


def url_host(host: str) -> str:
    """Host to use when *connecting* to a server bound to ``host`` on the same node.

    A wildcard bind (``0.0.0.0`` / ``::``) is reached through loopback; IPv6 literals are
    bracketed for URLs (RFC 3986 section 3.2.2).
    """
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    if ":" in host:
        return f"[{host}]"
    return host


def http_url(host: str, port: int, path: str = "") -> str:
    """``http://HOST:PORT/path`` for a server bound to ``host`` (see :func:`url_host`)."""
    return f"http://{url_host(host)}:{port}{path}"


@dataclass
class RenderContext:
    """What an adapter needs to render one process, all already validated and normalised.

    ``spec`` is the whole normalised recipe spec, ``role_name`` the role being rendered,
    ``role`` its normalised dict, ``executables`` a copy of ``settings.CEILING_EXECUTABLES``.
    """

    spec: dict
    topology: str
    role_name: str
    role: dict
    executables: dict[str, str]
    cpu_count: int = 0


@dataclass
class RenderedCommand:
    """An adapter's output for one process: the bare engine argv (no pinning wrapper), the
    engine-specific env it needs, its ports and how to tell that it is up."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    health_path: str = "/health"
    generate: dict | None = None
    extra_readiness: list[dict] = field(default_factory=list)


class EngineAdapter:
    """Interface of one engine: static facts used by validation plus argv renderers.

    Subclasses set the class attributes and implement :meth:`render_worker` and, for engines
    with a PD topology, :meth:`render_router`.
    """

    name: str = ""
    uses_gpus: bool = True
    # Whether the engine opens spec.model.path at start (the simulator never reads it).
    reads_model_path: bool = True
    topologies: tuple[str, ...] = ("single", "pd")
    transfer_backends: tuple[str, ...] = ()
    worker_flags: dict[str, FlagSpec] = {}
    router_flags: dict[str, FlagSpec] = {}
    worker_reserved: dict[str, str] = {}
    router_reserved: dict[str, str] = {}
    # Per-role default ports, used when a recipe leaves a port out.
    default_ports: dict[str, int] = {}
    default_bootstrap_port: int | None = None
    default_side_channel_ports: dict[str, int] = {}

    def render_worker(self, ctx: RenderContext) -> RenderedCommand:  # pragma: no cover - abstract
        raise NotImplementedError

    def render_router(self, ctx: RenderContext) -> RenderedCommand:  # pragma: no cover - abstract
        raise NotImplementedError(f"{self.name} has no router")

    def expected_gpu_count(self, role: dict) -> tuple[int, str]:
        """GPUs a role must hold given its TP/DP and flags, and the rule as a sentence."""
        return role["tp"] * role["dp"], f"tp × dp = {role['tp']} × {role['dp']} = {role['tp'] * role['dp']}"

    def parallel_problems(self, role: dict) -> dict[str, str]:
        """Extra TP/DP/EP consistency rules of the engine: ``{"ep": message}``; empty when fine."""
        return {}


def _num(value: float | None) -> str:
    if value is None:
        return "unbounded"
    if float(value).is_integer():
        return str(int(value))
    return str(value)


# Router flags every PD router renderer sets itself (sglang-router and its fork vllm-router take
# the same names), mapped to the recipe field that controls each.
PD_ROUTER_RESERVED: dict[str, str] = {
    "host": "spec.roles.router.host",
    "port": "spec.roles.router.port",
    "pd-disaggregation": "spec.topology",
    "prefill": "spec.roles.prefill",
    "decode": "spec.roles.decode",
    "worker-urls": "spec.roles",
    "api-key": "spec.secrets",
}
