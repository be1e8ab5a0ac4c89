"""Performance profiles for the ``sim`` engine.

A profile is JSON data (``deployments/data/sim_profiles/<name>.json``) describing one model on one
hardware setup. Every time is in seconds of the modelled system; the server multiplies them by its
``--time-scale``. Shape of the file::

    {
      "name": "...", "description": "...", "model": "...", "hardware": "...",
      "extends": "other-profile",            (optional: start from another profile's values)
      "context_length": 65536,               (tokens)
      "startup_delay_s": 20.0,               (/health answers 503 this long after start)
      "jitter": 0.0,                         (relative service-time jitter, 0 = deterministic)
      "prefill": {"fixed_s", "per_token_s", "max_batch_tokens"},
      "decode": {"fixed_s", "per_seq_s", "per_kv_token_s", "max_running_requests",
                 "kv_capacity_tokens", "admission_reserve_tokens"},
      "kv_transfer": {"bytes_per_token", "bandwidth_bytes_per_s", "fixed_s"},
      "eos": {"min_tokens", "max_tokens"},   (range of the pseudo-EOS position without ignore_eos)
      "derivation": {"<section>.<field>": "how the number was obtained", ...}
    }

The model: a prefill batch of ``n`` prompt tokens takes ``fixed_s + per_token_s * n``; a decode
step over ``b`` running sequences holding ``k`` KV tokens in total takes
``fixed_s + per_seq_s * b + per_kv_token_s * k`` and gives every running sequence one token; a KV
hand-over of ``n`` tokens takes ``fixed_s + n * bytes_per_token / bandwidth_bytes_per_s`` with the
bandwidth term serialised on the one link.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PROFILE_DIR = Path(__file__).resolve().parents[2] / "data" / "sim_profiles"


class ProfileError(ValueError):
    """A profile name that does not resolve, or a file with a missing or invalid field."""


@dataclass(frozen=True)
class PrefillModel:
    """Prefill cost: ``fixed_s + per_token_s * tokens`` per batch of at most ``max_batch_tokens``."""

    fixed_s: float
    per_token_s: float
    max_batch_tokens: int

    def batch_time_s(self, tokens: int) -> float:
        """Modelled seconds to prefill a batch holding ``tokens`` prompt tokens."""
        return self.fixed_s + self.per_token_s * tokens


@dataclass(frozen=True)
class DecodeModel:
    """Decode cost and capacity: step time per batch, KV capacity (tokens) and admission rules."""

    fixed_s: float
    per_seq_s: float
    per_kv_token_s: float
    max_running_requests: int
    kv_capacity_tokens: int
    admission_reserve_tokens: int

    def step_time_s(self, batch: int, kv_tokens: int) -> float:
        """Modelled seconds for one decode step over ``batch`` sequences holding ``kv_tokens``."""
        return self.fixed_s + self.per_seq_s * batch + self.per_kv_token_s * kv_tokens


@dataclass(frozen=True)
class KvTransferModel:
    """KV hand-over from prefill to decode: a fixed latency plus bytes over an effective bandwidth."""

    bytes_per_token: int
    bandwidth_bytes_per_s: float
    fixed_s: float

    def wire_time_s(self, tokens: int) -> float:
        """Seconds the link is busy moving ``tokens`` tokens of KV (serialised between requests)."""
        return tokens * self.bytes_per_token / self.bandwidth_bytes_per_s


@dataclass(frozen=True)
class EosModel:
    """Where the deterministic pseudo-EOS falls (in output tokens) when ``ignore_eos`` is off."""

    min_tokens: int = 8
    max_tokens: int = 255


@dataclass(frozen=True)
class SimProfile:
    """One performance profile; see the module docstring for the file format and the formulas."""

    name: str
    description: str
    model: str
    hardware: str
    context_length: int
    startup_delay_s: float
    jitter: float
    prefill: PrefillModel
    decode: DecodeModel
    kv_transfer: KvTransferModel
    eos: EosModel
    derivation: dict[str, str] = field(default_factory=dict)
    source: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The profile as plain JSON-serialisable data (what ``/get_server_info`` reports)."""
        return asdict(self)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _resolve_path(name_or_path: str) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix == ".json" or "/" in name_or_path:
        if not candidate.is_file():
            raise ProfileError(f"profile file {name_or_path!r} does not exist")
        return candidate
    if not name_or_path.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ProfileError(f"profile name {name_or_path!r} may hold only letters, digits, '-', '_', '.'")
    path = PROFILE_DIR / f"{name_or_path}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.json")))
        raise ProfileError(f"unknown profile {name_or_path!r}; known: {known}")
    return path


def _raw(name_or_path: str, seen: tuple[str, ...] = ()) -> tuple[dict[str, Any], Path]:
    path = _resolve_path(name_or_path)
    if str(path) in seen:
        raise ProfileError(f"profile {name_or_path!r} extends itself")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ProfileError(f"profile {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path} must hold a JSON object")
    parent = data.pop("extends", None)
    if parent:
        base, _ = _raw(str(parent), (*seen, str(path)))
        base.pop("derivation", None)
        data = _merge(base, data)
    return data, path


def _num(data: dict[str, Any], section: str, key: str, kind: type, minimum: float, exclusive: bool = False) -> Any:
    where = f"{section}.{key}" if section else key
    block = data.get(section, {}) if section else data
    if not isinstance(block, dict) or key not in block:
        raise ProfileError(f"profile field {where} is missing")
    value = block[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise ProfileError(f"profile field {where} must be a {kind.__name__}, got {value!r}")
    if value < minimum or (exclusive and value == minimum):
        raise ProfileError(f"profile field {where} must be {'>' if exclusive else '>='} {minimum}, got {value!r}")
    return kind(value)


def profile_load(name_or_path: str) -> SimProfile:
    """Load and validate a profile by name (``deployments/data/sim_profiles/<name>.json``) or path.

    Raises :class:`ProfileError` naming the field for a missing file, bad JSON, a missing field or
    an out-of-range value. ``extends`` is resolved first, so a derived profile only lists changes.
    """
    data, path = _raw(name_or_path)
    eos = data.get("eos", {})
    prof = SimProfile(
        name=str(data.get("name") or path.stem),
        description=str(data.get("description", "")),
        model=str(data.get("model", "")),
        hardware=str(data.get("hardware", "")),
        context_length=_num(data, "", "context_length", int, 1),
        startup_delay_s=_num(data, "", "startup_delay_s", float, 0.0),
        jitter=float(data.get("jitter", 0.0)),
        prefill=PrefillModel(
            fixed_s=_num(data, "prefill", "fixed_s", float, 0.0),
            per_token_s=_num(data, "prefill", "per_token_s", float, 0.0),
            max_batch_tokens=_num(data, "prefill", "max_batch_tokens", int, 1),
        ),
        decode=DecodeModel(
            fixed_s=_num(data, "decode", "fixed_s", float, 0.0),
            per_seq_s=_num(data, "decode", "per_seq_s", float, 0.0),
            per_kv_token_s=_num(data, "decode", "per_kv_token_s", float, 0.0),
            max_running_requests=_num(data, "decode", "max_running_requests", int, 1),
            kv_capacity_tokens=_num(data, "decode", "kv_capacity_tokens", int, 1),
            admission_reserve_tokens=_num(data, "decode", "admission_reserve_tokens", int, 0),
        ),
        kv_transfer=KvTransferModel(
            bytes_per_token=_num(data, "kv_transfer", "bytes_per_token", int, 0),
            bandwidth_bytes_per_s=_num(data, "kv_transfer", "bandwidth_bytes_per_s", float, 0.0, exclusive=True),
            fixed_s=_num(data, "kv_transfer", "fixed_s", float, 0.0),
        ),
        eos=EosModel(min_tokens=int(eos.get("min_tokens", 8)), max_tokens=int(eos.get("max_tokens", 255))),
        derivation={str(k): str(v) for k, v in (data.get("derivation") or {}).items()},
        source=str(path),
    )
    if not 0.0 <= prof.jitter < 1.0:
        raise ProfileError(f"profile field jitter must be in [0, 1), got {prof.jitter!r}")
    if not 1 <= prof.eos.min_tokens <= prof.eos.max_tokens:
        raise ProfileError("profile fields eos.min_tokens..eos.max_tokens must be a non-empty range >= 1")
    return prof
