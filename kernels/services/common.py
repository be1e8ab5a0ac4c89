"""Shared pieces of the kernel services: directories, limits and constants, the stored manifests
of packages and jobs, and the runner's ``variants.json``.

Part of :mod:`kernels.services`, which lists the rules and where they come from.
"""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from django.conf import settings

from controlplane.errors import InvalidInput
from kernels.manifest import GridExpansion, Manifest, ManifestError, grid_expand, manifest_from_stored
from kernels.models import KernelJob, KernelPackage


log = logging.getLogger(__name__)


# Compute capabilities a job may target: the ones NVIDIA lists for shipped GPUs in "CUDA GPUs -
# Compute Capability" (developer.nvidia.com/cuda-gpus) and in the "Compute Capabilities" appendix
# of the CUDA C++ Programming Guide: Volta 7.0 and 7.2 (Xavier), Turing 7.5, Ampere 8.0, 8.6 and
# 8.7 (Orin), Ada 8.9, Hopper 9.0, Blackwell 10.0 (B200), 10.3 (B300), 11.0 (Thor; 10.1 before
# CUDA 13), 12.0 (RTX 50, RTX PRO) and 12.1 (GB10). Anything else fails in the compiler
# ("'sm_999a' is not a recognized processor"), so it is refused when the job is created.
KNOWN_CCS: tuple[str, ...] = ("7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.1", "10.3",
                              "11.0", "12.0", "12.1")


# Compute capability of NVIDIA data-centre GPUs by the model in their device name (as NVML and
# torch report it: "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA GH200 480GB"), from NVIDIA's
# "CUDA GPUs" compute capability list. Only models whose name fixes the compute capability; a
# device matching none is not checked.
DEVICE_CC_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(?:GH200|H100|H200|H800|H20)\b"), "9.0"),
    (re.compile(r"\b(?:A100|A800|A30)\b"), "8.0"),
    (re.compile(r"\b(?:L4|L40|L40S)\b"), "8.9"),
    (re.compile(r"\b(?:GB200|B200|B100)\b"), "10.0"),
    (re.compile(r"\bV100\b"), "7.0"),
    (re.compile(r"\bT4\b"), "7.5"),
)


def device_cc(name: str) -> str | None:
    """The compute capability ``name`` (a CUDA device name, in any letter case) fixes
    (:data:`DEVICE_CC_PATTERNS`): ``"9.0"`` for ``"NVIDIA H200"`` or ``"nvidia h200"``; None for a
    device the table does not know."""
    for pattern, cc in DEVICE_CC_PATTERNS:
        if pattern.search((name or "").upper()):
            return cc
    return None


def device_cc_problem(name: str, cc: str) -> str | None:
    """Why compute capability ``cc`` cannot be that of device ``name`` (its model fixes another,
    :func:`device_cc`), in words; None when it can or the model is not in the table."""
    fixed = device_cc(name)
    if fixed in (None, cc):
        return None
    return f"{name} is a compute capability {fixed} GPU (NVIDIA's CUDA GPUs list); the file says {cc}"


# Largest shared memory one thread block may use, in bytes, per compute capability: "Maximum
# amount of shared memory per thread block" in the technical specifications table of NVIDIA's
# CUDA C++ Programming Guide (compute capabilities section); KB there are 1024 bytes. Covers
# every entry of :data:`KNOWN_CCS`.
SHARED_MEM_LIMIT_BYTES: dict[str, int] = {
    "7.0": 96 * 1024, "7.2": 96 * 1024, "7.5": 64 * 1024,
    "8.0": 163 * 1024, "8.6": 99 * 1024, "8.7": 163 * 1024, "8.9": 99 * 1024,
    "9.0": 227 * 1024, "10.0": 227 * 1024, "10.1": 227 * 1024, "10.3": 227 * 1024, "11.0": 227 * 1024,
    "12.0": 99 * 1024, "12.1": 99 * 1024,
}


# A compute capability as written (9.0, 12.0): ASCII digits only (``\d`` would take any script's
# digits) and nothing after them (``$`` would take a trailing newline).
CC_RE = re.compile(r"^[0-9]{1,2}\.[0-9]\Z")


# Most variants one job may hold: each is a compile, and the variant table must stay usable.
MAX_JOB_VARIANTS = 5000


# Progress rows are written at most this often (seconds); the last line is always written.
PROGRESS_PERIOD_S = 0.5


# Build logs kept per variant (characters).
BUILD_LOG_CHARS = 4000


DEFAULT_STEP_TIMEOUT_S = 3600.0


NO_GPU_NOTE = "no GPU on node {node}: builds only"
# What every "builds only" note starts with (the note written when the job is created and the one
# it ends with): a job whose note starts so is dispatched to its node like one without a note.
NO_GPU_PREFIX = NO_GPU_NOTE.split("{", 1)[0]


def no_gpu_note(*, node, cc: str) -> str | None:
    """:data:`NO_GPU_NOTE` for a job of target ``cc`` on ``node`` when the node has no GPU of that
    compute capability (the benchmark cannot run there), naming the GPUs it has when they are of
    another one; None when it has one (or ``node`` is None)."""
    if node is None or node_gpu_names(node=node, cc=cc):
        return None
    note = NO_GPU_NOTE.format(node=node.name)
    ccs = sorted(set(node.gpus.values_list("compute_capability", flat=True)) - {""})
    if node.gpus.exists():
        note += f" (its GPUs are compute capability {', '.join(ccs) or 'unknown'}, the target is {cc})"
    return note


def builds_only_plan_note(*, node, cc: str, variants: int) -> str | None:
    """The note a job gets when it is created for ``node`` without a GPU of compute capability
    ``cc``, so the API's answer and the job page say up front what the job will do: build its
    ``variants`` and record their build facts, check and time none of them, end done. It names the
    limit the builds run under (the step timeout) and how to build fewer. None when the node has
    such a GPU. Holds no ``"; "``: notes added later are joined with it."""
    head = no_gpu_note(node=node, cc=cc)
    if head is None:
        return None
    timeout = f"{_step_timeout():.0f}"
    return (f"{head}: {variants} variant{'s are' if variants != 1 else ' is'} built for compute capability {cc} "
            "and the build facts recorded (registers, spills, shared memory, tensor-core use), but none is "
            "checked against the reference or timed, and the job ends done after the builds. The builds run "
            f"one after another and the compile step is stopped after {timeout} s "
            "(CEILING_KERNEL_STEP_TIMEOUT_S): restrict the grid with params to build fewer")


def packages_dir() -> Path:
    """Where packages live: ``settings.CEILING_KERNEL_PACKAGES_DIR``, else ``kernels/packages``."""
    return Path(getattr(settings, "CEILING_KERNEL_PACKAGES_DIR", None) or Path(settings.BASE_DIR) / "kernels" / "packages")


def configs_dir() -> Path:
    """Where best configs are exported: ``settings.CEILING_KERNEL_CONFIG_DIR``, else
    ``VAR_DIR/kernels/configs``."""
    return Path(getattr(settings, "CEILING_KERNEL_CONFIG_DIR", None) or Path(settings.VAR_DIR) / "kernels" / "configs")


def jobs_dir() -> Path:
    """Work directories of jobs (``variants.json``, runner output and log): ``VAR_DIR/kernels/jobs``."""
    return Path(settings.VAR_DIR) / "kernels" / "jobs"


def _invalid(exc: ManifestError, prefix: str = "manifest") -> InvalidInput:
    return InvalidInput({f"{prefix}.{k}" if prefix and not k.startswith(prefix) else k: v
                         for k, v in exc.errors.items()})


def package_dir_of(package: KernelPackage) -> Path:
    """The package's directory: ``package.path`` (relative to the repository root, or absolute).
    Raises :class:`InvalidInput` when it is not inside :func:`packages_dir`."""
    path = Path(package.path)
    if not path.is_absolute():
        path = Path(settings.BASE_DIR) / path
    root = packages_dir().resolve()
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise InvalidInput({"path": [f"package {package.name} lives outside {root}"]})
    return resolved


def package_manifest(package: KernelPackage) -> Manifest:
    """The package's stored manifest as a :class:`Manifest` (no file access)."""
    try:
        return manifest_from_stored(package.manifest)
    except ManifestError as exc:
        raise _invalid(exc) from None


def job_manifest(job: KernelJob) -> Manifest:
    """The manifest a job was created with (a copy on the row, so later edits do not move it)."""
    try:
        return manifest_from_stored(job.manifest or job.package.manifest)
    except ManifestError as exc:
        raise _invalid(exc) from None


def package_grid(*, package: KernelPackage, subset: dict | None = None) -> GridExpansion:
    """The package's grid expanded (optionally restricted to ``subset``); see
    :func:`kernels.manifest.grid_expand`. Raises :class:`InvalidInput` (``params.<param>``)."""
    try:
        return grid_expand(package_manifest(package), subset)
    except ManifestError as exc:
        raise _invalid(exc, prefix="") from None


def node_gpu_names(*, node, cc: str) -> list[str]:
    """Names of the node's GPUs of compute capability ``cc`` (from its ``Gpu`` rows)."""
    if node is None:
        return []
    return list(node.gpus.filter(compute_capability=cc).values_list("name", flat=True))


def _step_timeout() -> float:
    return float(getattr(settings, "CEILING_KERNEL_STEP_TIMEOUT_S", DEFAULT_STEP_TIMEOUT_S))


def variants_payload(*, job: KernelJob, only_buildable: bool = False) -> list[dict[str, Any]]:
    """The runner's ``variants.json`` for ``job``: ``[{"variant_id": <row id>, "params": {...}}]``
    in grid order. ``only_buildable`` keeps variants whose build succeeded and was not discarded
    (and variants with no build row, for jobs whose builds were made elsewhere)."""
    qs = job.variants.select_related("build").order_by("ordinal")
    out = []
    for v in qs:
        build = getattr(v, "build", None)
        if only_buildable and build is not None and (not build.ok or build.discarded):
            continue
        out.append({"variant_id": v.pk, "params": v.params})
    return out


def _write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False), encoding="utf-8")
    tmp.replace(path)
    return path
