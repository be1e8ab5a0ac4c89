"""The runner's output stored: build facts with discard reasons, benchmark results with derived
numbers, the best variant per bucket, and the exported engine-style config files.

Part of :mod:`kernels.services`, which lists the rules and where they come from.
"""
from __future__ import annotations

import math
import re
import statistics
from typing import Annotated, Any

from django.db import transaction
from pydantic import (BaseModel, ConfigDict, Field, Strict, StrictBool, StrictInt, StrictStr, ValidationError,
                      model_validator)

from controlplane.errors import InvalidInput
from controlplane.jsonsafe import json_spelled
from kernels.manifest import Manifest
from kernels.models import KernelBenchmark, KernelBest, KernelBuild, KernelJob, KernelVariant
from kernels.services.common import (
    BUILD_LOG_CHARS,
    CC_RE,
    KNOWN_CCS,
    SHARED_MEM_LIMIT_BYTES,
    _write_json,
    configs_dir,
    device_cc_problem,
    job_manifest,
    log,
)
from kernels.services.progress import _broadcast


#: A number written as a JSON number: the string "7.5" or true is refused, not read as one.
Num = Annotated[float, Strict()]
#: A compiler version ("13.0", "3.6.0", "3.4.0+git1a2b"): it becomes part of a directory name.
VERSION_RE = r"^[0-9][0-9A-Za-z.+-]{0,40}$"
#: Counts stored in 32-bit columns.
INT32_MAX = 2**31 - 1
#: The most 32-bit registers one thread may use on every NVIDIA GPU since compute capability 3.5
#: (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability": maximum number
#: of 32-bit registers per thread, 255).
MAX_REGISTERS_PER_THREAD = 255
#: Relative slack when a result row's numbers are checked against each other or against values
#: recomputed here: the runner derives them in floating point from the same formulas (and compares
#: outputs in fp32), so only rounding separates the two; a larger gap is a number that was not
#: derived from the row's own measurement.
CROSSCHECK_REL_TOL = 0.01
#: Largest roofline fraction a timing may show. The roofline uses the ceilings the run measured
#: (a device-to-device copy's GB/s, cuBLAS's dense bf16 TFLOP/s), which a kernel can beat only up
#: to the GPU's datasheet peaks: on an H200, 4.8 TB/s and 989 TFLOP/s (NVIDIA H200 datasheet)
#: against the 4249-4275 GB/s and 781-804 TFLOP/s its stored runs measured, 1.13x and at most
#: 1.27x. A row faster than this many times the measured roofline did not time the manifest's
#: bytes and FLOPs.
MAX_ROOFLINE_FRACTION = 1.3


class _BuildFact(BaseModel):
    # Every key of the runner's contract is named here: an unknown one is refused (a file edited by
    # hand or written by another tool, whose extra field would otherwise be dropped unseen).
    model_config = ConfigDict(extra="forbid")

    variant_id: StrictInt | StrictStr
    ok: StrictBool
    error: str | None = None
    registers: StrictInt | None = Field(default=None, ge=0)
    spills_bytes: StrictInt | None = Field(default=None, ge=0)
    shared_bytes: StrictInt | None = Field(default=None, ge=0)
    tensor_core: StrictBool | None = None
    tensor_core_evidence: str | None = None
    build_s: Num | None = Field(default=None, ge=0)
    # "nvcc 13.0", "triton 3.6.0": a name, a space, a version (the config directory's name is
    # made from it, so two spellings must not map to one directory)
    compiler: str | None = Field(default=None, pattern=r"^[a-z]+ " + VERSION_RE[1:])
    log: str | None = None


class _Device(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # NVIDIA's device names ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB") have no underscore:
    # config files name the device with its spaces as underscores, so one must not be allowed
    # and no other character the file name would change ("/", "(" ...): "NVIDIA/H200" and "NVIDIA
    # H200" must not share a file
    # and words are separated by one space ("NVIDIA  H200" would be a second device of one GPU)
    name: StrictStr = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9.-]*( [A-Za-z0-9.-]+)*$")
    cc: StrictStr
    sm_count: StrictInt | None = Field(default=None, ge=1, le=100_000)
    l2_bytes: StrictInt | None = Field(default=None, ge=0, le=2**40)
    # measured ceilings: GB/s and TFLOP/s within what a GPU can be (a roofline from 1e-300 GB/s is
    # not a measurement)
    hbm_gbps: Num | None = Field(default=None, ge=1, le=1e6, allow_inf_nan=False)
    bf16_tflops: Num | None = Field(default=None, ge=0.01, le=1e6, allow_inf_nan=False)
    driver: str | None = None
    # the Triton or CUDA version names the compiler (and its config directory) when no builds do
    cuda: str | None = Field(default=None, pattern=VERSION_RE)
    torch: str | None = None
    triton: str | None = Field(default=None, pattern=VERSION_RE)


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")

    variant_id: StrictInt | StrictStr
    shape: StrictStr
    batch: StrictInt = Field(ge=1, le=INT32_MAX)
    correct: StrictBool | None = None
    # NaN or infinite for an output with NaN or Inf values or of the wrong shape; never negative
    max_abs_err: Num | None = None
    max_rel_err: Num | None = None
    error: str | None = None
    # a kernel launch takes time: 0 µs is a broken measurement, and would win every bucket
    median_us: Num | None = Field(default=None, gt=0, allow_inf_nan=False)
    p10_us: Num | None = Field(default=None, gt=0, allow_inf_nan=False)
    p90_us: Num | None = Field(default=None, gt=0, allow_inf_nan=False)
    min_us: Num | None = Field(default=None, gt=0, allow_inf_nan=False)
    reps: StrictInt | None = Field(default=None, ge=0, le=INT32_MAX)
    gbps: Num | None = Field(default=None, ge=0, allow_inf_nan=False)
    tflops: Num | None = Field(default=None, ge=0, allow_inf_nan=False)
    roofline_us: Num | None = Field(default=None, gt=0, allow_inf_nan=False)
    roofline_fraction: Num | None = Field(default=None, gt=0, allow_inf_nan=False)
    bound: str | None = None
    timing: str | None = None

    @model_validator(mode="after")
    def _ordered(self) -> "_Result":
        """min ≤ p10 ≤ median ≤ p90: percentiles of one set of repetitions; errors not negative."""
        for k in ("max_abs_err", "max_rel_err"):
            v = getattr(self, k)
            if v is not None and v < 0:
                raise ValueError(f"{k} {v:g} is negative: an error is an absolute value")
        if self.median_us is not None and self.reps == 0:
            # a median of no repetitions is no measurement (the runner times at least one)
            raise ValueError(f"median_us {self.median_us:g} with reps {self.reps}: a timed row gives the "
                             "number of timed repetitions, at least 1")
        order = [(k, getattr(self, k)) for k in ("min_us", "p10_us", "median_us", "p90_us")]
        given = [(k, v) for k, v in order if v is not None]
        for (k1, v1), (k2, v2) in zip(given, given[1:]):
            if v1 > v2:
                raise ValueError(f"{k1} {v1:g} is above {k2} {v2:g}: min ≤ p10 ≤ median ≤ p90 for one set of repetitions")
        return self


class _Results(BaseModel):
    """The envelope of a results payload; its device and each row are validated on their own
    (:class:`_Device`, :class:`_Result`), so every row's problems are found in one pass."""

    model_config = ConfigDict(extra="forbid")

    device: Any
    variants_sha256: str | None = None  # checked by the ingest (kernels.services.transfer)
    results: list[Any]


def _pydantic_errors(exc: ValidationError, prefix: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"] if str(p) not in ("int", "str", "float", "bool"))
        key = ".".join(p for p in (prefix, loc) if p) or "payload"
        msg = "is required" if e["type"] == "missing" else e["msg"]
        if e["type"] == "value_error":      # a validator's own sentence, without pydantic's prefix
            msg = str((e.get("ctx") or {}).get("error") or msg)
        out.setdefault(key, []).append(msg)
    return out


def _finite(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


def _variants_by_id(job: KernelJob) -> dict[int, KernelVariant]:
    return {v.pk: v for v in job.variants.all()}


def _variant_of(raw: int | str, variants: dict[int, KernelVariant], path: str,
                errors: dict[str, list[str]]) -> KernelVariant | None:
    try:
        vid = int(raw)
    except (TypeError, ValueError):
        vid = None
    variant = variants.get(vid) if vid is not None else None
    if variant is None:
        errors.setdefault(path, []).append(f"variant_id {json_spelled(raw)} is not a variant of this job")
    return variant


def shared_limit_bytes(cc: str) -> int | None:
    """Shared memory per block allowed on compute capability ``cc`` (bytes), None when unknown."""
    return SHARED_MEM_LIMIT_BYTES.get(cc)


def build_discard_reason(*, cc: str, spills_bytes: int | None, shared_bytes: int | None) -> str:
    """Why a successful build may not be benchmarked ("" when it may): it spills registers to local
    memory, or its shared memory per block exceeds the target's limit (:data:`SHARED_MEM_LIMIT_BYTES`)."""
    if spills_bytes:
        return f"spills {spills_bytes} bytes of registers to local memory"
    limit = shared_limit_bytes(cc)
    if shared_bytes is not None and limit is not None and shared_bytes > limit:
        return (f"needs {shared_bytes / 1024:.1f} KiB of shared memory per block; compute capability {cc} "
                f"allows {limit // 1024} KiB")
    return ""


def kernel_builds_store(*, job_id: int, payload: Any) -> dict[str, int]:
    """Store the runner's ``builds.json`` for job ``job_id`` (idempotent: a variant's build row is
    replaced). ``payload`` is the list of build facts of the contract (``{"variant_id", "ok",
    "error", "registers", "spills_bytes", "shared_bytes", "tensor_core", "tensor_core_evidence",
    "build_s", "compiler", "log"}``), or an object with that list under ``"builds"``.

    A successful build that spills or exceeds the target's shared memory is stored discarded with
    the reason (:func:`build_discard_reason`). Updates the job's counts and ``compiler`` (the most
    common compiler string), and for a Triton compiler (``"triton 3.6.0"``) ``triton_version``
    (``"3.6.0"``) while the job has none (results measured with it set it too); while the job is in its ``compile`` phase, its ``progress_done`` is
    raised to at least the builds it holds (ok + failed), so a build stored before its progress line
    was read (the runner ended by a cancel in between) is counted. Returns ``{"stored", "ok",
    "failed", "discarded"}``. Raises :class:`InvalidInput` (``builds.<i>.<field>``) for a malformed
    payload, an unknown variant or more registers per thread than :data:`MAX_REGISTERS_PER_THREAD`;
    nothing is stored then.
    """
    job = KernelJob.objects.select_related("package").get(pk=job_id)
    language = job_manifest(job).language
    items = payload.get("builds") if isinstance(payload, dict) else payload
    if not isinstance(items, list):
        raise InvalidInput({"builds": ["must be a list of build facts (or an object with a 'builds' list)"]})
    variants = _variants_by_id(job)
    errors: dict[str, list[str]] = {}
    facts: list[tuple[KernelVariant, _BuildFact]] = []
    for i, item in enumerate(items):
        try:
            fact = _BuildFact.model_validate(item)
        except ValidationError as exc:
            errors.update(_pydantic_errors(exc, f"builds.{i}"))
            continue
        if fact.tensor_core_evidence not in (None, "wgmma", "mma", "none"):
            errors.setdefault(f"builds.{i}.tensor_core_evidence", []).append(
                f"{json_spelled(fact.tensor_core_evidence)} must be wgmma, mma or none")
        if fact.registers is not None and fact.registers > MAX_REGISTERS_PER_THREAD:
            errors.setdefault(f"builds.{i}.registers", []).append(
                f"{fact.registers} registers per thread: no NVIDIA GPU since compute capability 3.5 lets a thread "
                f"use more than {MAX_REGISTERS_PER_THREAD} (CUDA C++ Programming Guide, Technical Specifications "
                "per Compute Capability)")
        want = COMPILER_OF_LANGUAGE.get(language)
        if fact.compiler and want and not fact.compiler.lower().startswith(want):
            errors.setdefault(f"builds.{i}.compiler", []).append(
                f"{json_spelled(fact.compiler[:64])} did not build {job.package.name}: a {language} package is built by {want} "
                "(this builds file belongs to another package's job)")
        variant = _variant_of(fact.variant_id, variants, f"builds.{i}.variant_id", errors)
        if variant is not None:
            facts.append((variant, fact))
    if errors:
        raise InvalidInput(errors)
    compilers: dict[str, int] = {}
    with transaction.atomic():
        for variant, f in facts:
            reason = build_discard_reason(cc=job.target_cc, spills_bytes=f.spills_bytes,
                                          shared_bytes=f.shared_bytes) if f.ok else ""
            if f.compiler:
                compilers[f.compiler] = compilers.get(f.compiler, 0) + 1
            KernelBuild.objects.update_or_create(variant=variant, defaults=dict(
                ok=f.ok, error=(f.error or "")[:8000] if not f.ok else (f.error or ""), registers=f.registers,
                spills_bytes=f.spills_bytes, shared_bytes=f.shared_bytes, tensor_core=f.tensor_core,
                tensor_core_evidence=f.tensor_core_evidence or "", build_s=_finite(f.build_s),
                compiler=(f.compiler or "")[:64], log=(f.log or "")[-BUILD_LOG_CHARS:], discarded=bool(reason),
                discard_reason=reason,
            ))
        counts = _build_counts(job)
        update: dict[str, Any] = {"builds_ok": counts["ok"], "builds_failed": counts["failed"],
                                  "builds_discarded": counts["discarded"]}
        if compilers:
            update["compiler"] = max(compilers.items(), key=lambda kv: kv[1])[0]
            name, _, version = update["compiler"].partition(" ")
            if name.lower() == "triton" and version and not job.triton_version:
                # the Triton that built the variants: known before any result names it
                update["triton_version"] = version[:64]
        notes = []
        if shared_limit_bytes(job.target_cc) is None and counts["ok"]:
            notes.append(f"the shared-memory limit of compute capability {job.target_cc} is not known here: "
                         "shared memory was not checked")
        if notes and notes[0] not in job.note:
            update["note"] = "; ".join(filter(None, [job.note, *notes]))
        KernelJob.objects.filter(pk=job.pk).update(**update)
        reported = counts["ok"] + counts["failed"]
        KernelJob.objects.filter(pk=job.pk, phase="compile", progress_done__lt=reported).update(progress_done=reported)
    _broadcast(job.pk)
    return {"stored": len(facts), **counts}


#: The compiler a build fact of a package in each language names (its ``compiler`` starts with it).
COMPILER_OF_LANGUAGE = {"triton": "triton", "cuda": "nvcc"}


def _stored_spelling(name: str) -> str | None:
    """How stored kernel jobs spell device ``name`` when one spells it in another letter case
    (``"NVIDIA H200"`` for ``"nvidia h200"``); else None."""
    return (KernelJob.objects.filter(device_name__iexact=name).exclude(device_name=name)
            .values_list("device_name", flat=True).first())


def _device_problems(job: KernelJob, dev: "_Device", language: str) -> dict[str, list[str]]:
    """Why results measured on ``dev`` do not belong to ``job``: a compute capability that is not a
    known one, not the one the device's name fixes (:func:`kernels.services.common.device_cc_problem`),
    or not the one the job's variants were built for; a device other than the one whose
    results the job already holds (a job is one device's measurement: its best rows and config
    files are keyed by it); for a Triton package, no Triton version or another one than the one that
    built the job's variants."""
    errors: dict[str, list[str]] = {}
    if not CC_RE.match(dev.cc):
        errors["device.cc"] = [f"{json_spelled(dev.cc)} is not a compute capability such as 9.0"]
    elif dev.cc not in KNOWN_CCS:
        errors["device.cc"] = [f"{json_spelled(dev.cc)} is not a compute capability of an NVIDIA GPU "
                               f"({', '.join(KNOWN_CCS)})"]
    elif (spelled := _stored_spelling(dev.name)) not in (None, dev.name):
        errors["device.name"] = [f"{json_spelled(dev.name)} is {json_spelled(spelled)} spelled in another letter case, as stored kernel "
                                 f"jobs name it: write it {json_spelled(spelled)} (one GPU, one set of config files)"]
    elif problem := device_cc_problem(dev.name, dev.cc):
        errors["device.cc"] = [problem]
    elif job.target_cc and dev.cc != job.target_cc:
        errors["device.cc"] = [f"kernel job #{job.pk} built its variants for compute capability {job.target_cc}; "
                               f"these results were measured on {dev.cc}: create a job for that target"]
    held = KernelBenchmark.objects.filter(variant__job=job).exists()
    if "device.cc" not in errors and held and job.device_name and (job.device_name, job.device_cc) != (dev.name, dev.cc):
        errors["device.name"] = [f"kernel job #{job.pk} holds results measured on {job.device_name} (cc "
                                 f"{job.device_cc}); these were measured on {dev.name} (cc {dev.cc}): ingest them "
                                 "into a job of their own (kernel_job_ingest --new)"]
    if language == "triton" and not dev.triton:
        errors["device.triton"] = ["is required for a Triton package: the Triton version the results were measured "
                                   "with (the runner's bench writes it) decides which compiler's configs they are"]
    elif (language == "triton" and job.compiler.startswith("triton ")
            and job.compiler != f"triton {dev.triton}"):
        errors["device.triton"] = [f"kernel job #{job.pk}'s variants were compiled by {job.compiler}; these results "
                                   f"were measured with triton {dev.triton}: ingest them into a job of their own"]
    return errors


def _build_counts(job: KernelJob) -> dict[str, int]:
    builds = KernelBuild.objects.filter(variant__job=job)
    return {"ok": builds.filter(ok=True).count(), "failed": builds.filter(ok=False).count(),
            "discarded": builds.filter(ok=True, discarded=True).count()}


def roofline_point(manifest: Manifest, shape: str, batch: int, hbm_gbps: float | None,
              bf16_tflops: float | None) -> tuple[float | None, str]:
    """Roofline time of one call (µs) and which term bounds it: max(bytes / HBM bandwidth,
    FLOPs / bf16 rate), both measured on the device; (None, "") without both rates."""
    if not hbm_gbps or not bf16_tflops:
        return None, ""
    nbytes, flops = manifest.cost(shape, batch)
    mem_us = nbytes / (hbm_gbps * 1e9) * 1e6
    cmp_us = flops / (bf16_tflops * 1e12) * 1e6
    return (mem_us, "memory") if mem_us >= cmp_us else (cmp_us, "compute")


def _row_name(variant: KernelVariant | None, r: _Result) -> str:
    """``variant <key>, shape <name>, batch <n>``: a results row as error messages name it."""
    return f"variant {variant.key if variant is not None else r.variant_id}, shape {r.shape}, batch {r.batch}"


def _derived_problems(manifest: Manifest, dev: _Device, r: _Result, row: str) -> list[tuple[str, str]]:
    """``(field, message)`` for each derived number of result ``r`` that is not what the runner's
    bench derives (:mod:`kernels.runner.bench`) from the row's ``median_us`` (µs), the manifest's
    ``[cost]`` bytes and FLOPs per call at the row's shape and batch, and the ceilings measured on
    ``dev`` (``hbm_gbps`` GB/s, ``bf16_tflops`` TFLOP/s):

    * ``roofline_us = max(bytes / hbm_gbps, FLOPs / bf16_tflops)`` (µs) and ``bound`` (the larger
      term; either name when the two are within :data:`CROSSCHECK_REL_TOL`), on every row (both
      are stored for every row), when the device carries both ceilings;
    * on a timed row (correct, with ``median_us``): ``gbps = bytes / median_us`` (GB/s), ``tflops
      = FLOPs / median_us`` (TFLOP/s), ``roofline_fraction = roofline_us / median_us``, with the
      row's own ``roofline_us`` when the device has no ceilings (a fraction with no roofline at
      all is refused). Untimed rows keep none of these, so they are not checked there.

    A value further than :data:`CROSSCHECK_REL_TOL` (relative) from the recomputed one is a
    problem; the message names ``row``, the field, the file's value and the recomputed one."""
    nbytes, flops = manifest.cost(r.shape, r.batch)
    out: list[tuple[str, str]] = []

    def check(field: str, expected: float, how: str) -> None:
        given = getattr(r, field)
        if given is not None and not math.isclose(given, expected, rel_tol=CROSSCHECK_REL_TOL):
            out.append((field, f"{row}: {field} is {given:.6g} in the file; {how} gives {expected:.6g}"))

    roof_us = r.roofline_us
    if dev.hbm_gbps and dev.bf16_tflops:
        mem_us = nbytes / (dev.hbm_gbps * 1e9) * 1e6
        cmp_us = flops / (dev.bf16_tflops * 1e12) * 1e6
        roof_us = max(mem_us, cmp_us)
        check("roofline_us", roof_us, f"max(bytes / hbm_gbps, FLOPs / bf16_tflops) with {nbytes:.6g} bytes and "
              f"{flops:.6g} FLOPs per call (the manifest's [cost]) and the device's measured hbm_gbps "
              f"{dev.hbm_gbps:.6g}, bf16_tflops {dev.bf16_tflops:.6g}")
        bound = "memory" if mem_us >= cmp_us else "compute"
        if (r.bound in ("memory", "compute") and r.bound != bound
                and not math.isclose(mem_us, cmp_us, rel_tol=CROSSCHECK_REL_TOL)):
            out.append(("bound", f"{row}: bound is {r.bound} in the file; the larger roofline term gives {bound} "
                                 f"(bytes / hbm_gbps {mem_us:.6g} µs, FLOPs / bf16_tflops {cmp_us:.6g} µs)"))
    if r.correct is True and r.median_us is not None:
        med = r.median_us
        check("gbps", nbytes / (med * 1e-6) / 1e9,
              f"{nbytes:.6g} bytes per call (the manifest's [cost]) / median_us {med:.6g}")
        check("tflops", flops / (med * 1e-6) / 1e12,
              f"{flops:.6g} FLOPs per call (the manifest's [cost]) / median_us {med:.6g}")
        if roof_us is not None:
            check("roofline_fraction", roof_us / med, f"roofline_us {roof_us:.6g} / median_us {med:.6g}")
            if roof_us / med > MAX_ROOFLINE_FRACTION:
                out.append(("median_us", f"{row}: median_us {med:.6g} is {roof_us / med:.3g}x faster than the roofline "
                                         f"the run measured ({roof_us:.6g} µs): beyond what the GPU's datasheet peaks "
                                         f"allow over its measured ceilings (at most {MAX_ROOFLINE_FRACTION:g}x), so "
                                         "not a measurement of this work"))
        elif r.roofline_fraction is not None:
            out.append(("roofline_fraction", f"{row}: roofline_fraction is {r.roofline_fraction:.6g} in the file with "
                                             "no roofline to derive it from (the device has no hbm_gbps and "
                                             "bf16_tflops, the row no roofline_us)"))
    return out


def _correct_problems(manifest: Manifest, r: _Result, row: str) -> list[tuple[str, str]]:
    """``(field, message)`` for each reason result ``r``, marked ``correct``, cannot be what the
    runner's bench writes for a correct row (:func:`kernels.runner.bench.bench_variant`); none for
    a row not marked correct.

    * Timing: bench times every row that passes its check; the only correct row without
      ``median_us`` is one whose timing failed, and it carries the reason in ``error`` ("timing
      failed: ..."). A correct row with neither is refused.
    * Errors: bench passes a row when its output is finite and every element satisfies ``|out -
      ref| <= atol + rtol * |ref|`` (the manifest's ``[tolerance]``), and writes ``max_abs_err =
      max |out - ref|`` and ``max_rel_err = max_abs_err / max |ref|`` (infinite when the reference
      is all zeros and the error is not). So on a correct row: ``max_abs_err`` is finite (it can
      only be NaN or infinite against a reference that is itself NaN or infinite, which proves
      nothing); ``max_rel_err`` is not NaN, is 0 only with ``max_abs_err`` 0, and is infinite only
      with ``max_abs_err <= atol``; and the element with the largest error satisfies
      ``max_abs_err <= atol + rtol * max |ref|`` with ``max |ref| = max_abs_err / max_rel_err``.
      :data:`CROSSCHECK_REL_TOL` of slack allows for rounding.

    Limits: this is all a row's two errors can prove. ``max_abs_err`` alone proves nothing (the
    tolerance grows with ``|ref|``, which only ``max_rel_err`` reveals), so a row giving only one of
    them, or neither, is not checked here (:func:`_reference_scale_problems` compares rows of one
    file). A row marked wrong is taken as marked: bench also fails outputs of the wrong shape or
    with NaN or Inf values, and a wrong row is never timed nor chosen."""
    if r.correct is not True:
        return []
    out: list[tuple[str, str]] = []
    if r.median_us is None and not (r.error or "").strip():
        out.append(("median_us", f"{row}: marked correct but not timed: the runner times every correct row, and one "
                                 "whose timing failed carries the reason in error (\"timing failed: ...\")"))
    abs_err, rel_err = r.max_abs_err, r.max_rel_err
    atol, rtol = manifest.atol, manifest.rtol
    if abs_err is not None and not math.isfinite(abs_err):
        out.append(("max_abs_err", f"{row}: max_abs_err is {abs_err} on a row marked correct: the runner fails "
                                   "non-finite outputs, so only a non-finite reference gives this, and a comparison "
                                   "with it proves nothing"))
        return out
    if rel_err is not None and math.isnan(rel_err):
        out.append(("max_rel_err", f"{row}: max_rel_err is nan on a row marked correct"))
        return out
    if abs_err is None or rel_err is None:
        return out
    slack = 1 + CROSSCHECK_REL_TOL
    if rel_err == 0 and abs_err > 0:
        out.append(("max_rel_err", f"{row}: max_rel_err is 0 with max_abs_err {abs_err:.6g}: max_rel_err is "
                                   "max_abs_err / max |ref|, 0 only when there is no error"))
    elif math.isinf(rel_err):
        if abs_err > atol * slack:
            out.append(("max_abs_err", f"{row}: max_abs_err {abs_err:.6g} with an infinite max_rel_err (a reference "
                                       f"of zeros, where only atol applies) exceeds atol {atol:g}: the row cannot "
                                       "have passed the tolerance check"))
    elif rel_err > 0:
        max_ref = abs_err / rel_err
        allowed = atol + rtol * max_ref
        if abs_err > allowed * slack:
            out.append(("max_abs_err", f"{row}: max_abs_err {abs_err:.6g} exceeds atol {atol:g} + rtol {rtol:g} x "
                                       f"max |ref| {max_ref:.6g} (max_abs_err / max_rel_err) = {allowed:.6g}: the "
                                       "element with that error fails the manifest's tolerance, so the row cannot "
                                       "be correct"))
    return out


def _reference_scale_problems(rows: list[tuple[str, str, _Result]]) -> dict[str, list[str]]:
    """Errors (``<path>.max_abs_err``) for the rows marked correct whose ``max |ref| = max_abs_err
    / max_rel_err`` disagrees, by more than :data:`CROSSCHECK_REL_TOL`, with the median of the
    other correct rows of the same shape and batch. ``rows`` are ``(path, name, result)`` of one
    results file.

    The runner's bench (:func:`kernels.runner.bench.run_bench`) computes the reference output once
    per shape and batch and compares every variant with it, so in the file of one run every row of
    a shape and batch divides by the same ``max |ref|``; a row that does not was not measured
    against that reference (an edited ``max_abs_err``, say). Rows without both errors finite and
    above 0 give no ``max |ref|`` and are left out; a shape and batch with one such row is not
    checked (there is nothing to compare with)."""
    groups: dict[tuple[str, int], list[tuple[str, str, float]]] = {}
    for path, name, r in rows:
        a, e = r.max_abs_err, r.max_rel_err
        if r.correct is True and a is not None and e is not None and 0 < a < math.inf and 0 < e < math.inf:
            groups.setdefault((r.shape, r.batch), []).append((path, name, a / e))
    errors: dict[str, list[str]] = {}
    for (shape, batch), items in groups.items():
        if len(items) < 2:
            continue
        median = statistics.median(s for _, _, s in items)
        for j, (path, name, scale) in enumerate(items):
            if math.isclose(scale, median, rel_tol=CROSSCHECK_REL_TOL):
                continue
            others = statistics.median(s for k, (_, _, s) in enumerate(items) if k != j)
            if not math.isclose(scale, others, rel_tol=CROSSCHECK_REL_TOL):
                errors.setdefault(f"{path}.max_abs_err", []).append(
                    f"{name}: max_abs_err / max_rel_err gives max |ref| {scale:.6g}, the other correct rows of shape "
                    f"{shape}, batch {batch} give {others:.6g}: one run compares every variant with the same "
                    "reference output, so the errors of this row were not measured against it")
    return errors


def kernel_results_store(*, job_id: int, payload: Any) -> dict[str, int]:
    """Store the runner's ``results.json`` for job ``job_id`` and pick and export the best variants.

    ``payload`` = ``{"device": {"name", "cc", "sm_count", "l2_bytes", "hbm_gbps", "bf16_tflops",
    "driver", "cuda", "torch", "triton"}, "results": [{"variant_id", "shape", "batch", "correct",
    "max_abs_err", "max_rel_err", "error", "median_us", "p10_us", "p90_us", "min_us", "reps",
    "gbps", "tflops", "roofline_us", "roofline_fraction", "bound"}]}`` (the contract's shape). The
    device block becomes the job's calibration snapshot. A result with ``correct`` not true keeps
    no timing. Missing derived numbers are computed from the manifest's cost formulas and the
    measured rates (GB/s, TFLOP/s, roofline µs and fraction, bound); given ones must match those
    within :data:`CROSSCHECK_REL_TOL` (:func:`_derived_problems`). A row marked correct must be
    timed, or say in ``error`` why its timing failed, and its errors must fit the manifest's
    tolerance and the other rows' reference (:func:`_correct_problems`,
    :func:`_reference_scale_problems`, which also say what cannot be checked). A result for a
    variant whose build failed or was discarded is refused. Re-storing replaces the same (variant,
    shape, batch).

    Then :func:`kernel_best_select` and :func:`kernel_best_export` run. Returns ``{"stored",
    "correct", "wrong", "best"}``. Raises :class:`InvalidInput` (``device.<field>``,
    ``results.<i>.<field>``, every problem of the file at once) for a malformed payload or numbers
    that contradict each other; nothing is stored then.
    """
    job = KernelJob.objects.select_related("package").get(pk=job_id)
    manifest = job_manifest(job)
    try:
        parsed = _Results.model_validate(payload)
    except ValidationError as exc:
        raise InvalidInput(_pydantic_errors(exc, "")) from None
    errors: dict[str, list[str]] = {}
    try:
        dev: _Device | None = _Device.model_validate(parsed.device)
    except ValidationError as exc:
        dev = None   # the rows are still checked; their numbers that need the device are not
        errors.update(_pydantic_errors(exc, "device"))
    if dev is not None:
        errors.update(_device_problems(job, dev, manifest.language))
        for key in ("hbm_gbps", "bf16_tflops"):
            value = getattr(dev, key)
            if value is not None and (not math.isfinite(value) or value <= 0):
                errors[f"device.{key}"] = [f"must be a positive number, got {json_spelled(value)}"]
    results: list[tuple[int, _Result]] = []
    for i, raw in enumerate(parsed.results):
        try:
            results.append((i, _Result.model_validate(raw)))
        except ValidationError as exc:
            errors.update(_pydantic_errors(exc, f"results.{i}"))
    variants = _variants_by_id(job)
    builds = {b.variant_id: b for b in KernelBuild.objects.filter(variant__job=job)}
    shape_batches = {s.name: set(s.batches) for s in manifest.shapes}
    rows: list[tuple[KernelVariant, _Result]] = []
    named: list[tuple[str, str, _Result]] = []
    seen: dict[tuple[int, str, int], int] = {}
    for i, r in results:
        path = f"results.{i}"
        variant = _variant_of(r.variant_id, variants, f"{path}.variant_id", errors)
        if variant is not None:
            first = seen.setdefault((variant.pk, r.shape, r.batch), i)
            if first != i:
                errors.setdefault(path, []).append(
                    f"repeats results.{first} (variant {variant.key}, shape {r.shape}, batch {r.batch}): one "
                    "measurement per variant, shape and batch")
        if r.shape not in shape_batches:
            errors.setdefault(f"{path}.shape", []).append(f"{json_spelled(r.shape)} is not a shape of {job.package.name}")
        elif r.batch not in shape_batches[r.shape]:
            errors.setdefault(f"{path}.batch", []).append(f"{r.batch} is not a batch of shape {r.shape}")
        elif job.shapes and r.shape not in job.shapes:
            # stored, it would never show: the job's tables and best picks cover its own shapes
            errors.setdefault(f"{path}.shape", []).append(
                f"{json_spelled(r.shape)} is not a shape kernel job #{job.pk} benchmarks ({', '.join(job.shapes)})")
        elif job.batches and r.batch not in job.batches:
            errors.setdefault(f"{path}.batch", []).append(
                f"{r.batch} is not a batch kernel job #{job.pk} benchmarks ({', '.join(map(str, job.batches))})")
        if r.bound not in (None, "", "memory", "compute"):
            errors.setdefault(f"{path}.bound", []).append(f"{json_spelled(r.bound)} must be memory or compute")
        if variant is not None:
            b = builds.get(variant.pk)
            if b is not None and (not b.ok or b.discarded):
                errors.setdefault(f"{path}.variant_id", []).append(
                    f"variant {variant.key} was not benchmarkable: "
                    + (b.discard_reason if b.ok else f"its build failed ({(b.error or '')[:200]})"))
            rows.append((variant, r))
        if r.shape in shape_batches and r.batch in shape_batches[r.shape]:
            name = _row_name(variant, r)
            named.append((path, name, r))
            derived = _derived_problems(manifest, dev, r, name) if dev is not None else []
            for field, message in derived + _correct_problems(manifest, r, name):
                errors.setdefault(f"{path}.{field}", []).append(message)
    for path, messages in _reference_scale_problems(named).items():
        errors.setdefault(path, []).extend(messages)
    if errors:
        raise InvalidInput(errors)
    hbm, tfl = _finite(dev.hbm_gbps), _finite(dev.bf16_tflops)
    if not rows:
        # nothing measured: the job's device snapshot (and its best entries) stay as they were
        benches = KernelBenchmark.objects.filter(variant__job=job)
        return {"stored": 0, "correct": benches.filter(correct=True).count(),
                "wrong": benches.filter(correct=False).count(),
                "best": KernelBest.objects.filter(job=job).count()}
    with transaction.atomic():
        KernelJob.objects.filter(pk=job.pk).update(
            device_name=dev.name, device_cc=dev.cc, sm_count=dev.sm_count, l2_bytes=dev.l2_bytes, hbm_gbps=hbm,
            bf16_tflops=tfl, driver_version=(dev.driver or "")[:64], cuda_version=(dev.cuda or "")[:32],
            torch_version=(dev.torch or "")[:64], triton_version=(dev.triton or "")[:64],
        )
        for variant, r in rows:
            timed = r.correct is True and r.median_us is not None
            roof_us, bound = roofline_point(manifest, r.shape, r.batch, hbm, tfl)
            fields: dict[str, Any] = dict(
                correct=r.correct, max_abs_err=_finite(r.max_abs_err), max_rel_err=_finite(r.max_rel_err),
                error=(r.error or "")[:8000], reps=r.reps if timed else None,
                median_us=_finite(r.median_us) if timed else None, p10_us=_finite(r.p10_us) if timed else None,
                p90_us=_finite(r.p90_us) if timed else None, min_us=_finite(r.min_us) if timed else None,
                roofline_us=_finite(r.roofline_us) if r.roofline_us is not None else roof_us,
                bound=(r.bound or bound or ""), timing=(r.timing or "")[:255],
            )
            if timed and fields["median_us"]:
                nbytes, flops = manifest.cost(r.shape, r.batch)
                med = fields["median_us"]
                fields["gbps"] = _finite(r.gbps) if r.gbps is not None else nbytes / (med * 1e-6) / 1e9
                fields["tflops"] = _finite(r.tflops) if r.tflops is not None else flops / (med * 1e-6) / 1e12
                frac = _finite(r.roofline_fraction)
                if frac is None and fields["roofline_us"]:
                    frac = fields["roofline_us"] / med
                fields["roofline_fraction"] = frac
            else:
                fields.update(gbps=None, tflops=None, roofline_fraction=None)
            KernelBenchmark.objects.update_or_create(variant=variant, shape=r.shape, batch=r.batch, defaults=fields)
        benches = KernelBenchmark.objects.filter(variant__job=job)
        correct = benches.filter(correct=True).count()
        wrong = benches.filter(correct=False).count()
        KernelJob.objects.filter(pk=job.pk).update(benchmarks_total=benches.count(), benchmarks_correct=correct,
                                                   benchmarks_wrong=wrong)
    job.refresh_from_db()
    if not job.compiler:
        version = dev.triton if manifest.language == "triton" else dev.cuda
        if version:
            KernelJob.objects.filter(pk=job.pk).update(
                compiler=f"{'triton' if manifest.language == 'triton' else 'nvcc'} {version}"[:64])
            job.refresh_from_db()
    best = kernel_best_select(job=job)
    if job.device_name and job.device_cc:
        # also when this job holds no entry now: a re-pick may have removed one from its bucket
        kernel_best_export(job=job)
    _broadcast(job.pk, force=True)
    return {"stored": len(rows), "correct": correct, "wrong": wrong, "best": len(best)}


def _qualifying(**filters) -> Any:
    """Correct, timed benchmarks of variants with a stored build that succeeded and was not
    discarded, fastest first (``filters`` narrow :class:`KernelBenchmark`). A variant measured
    without its build facts (results ingested without their builds file) never qualifies: whether
    it spills or needs more shared memory than its target has is not known, and the best variant
    is what an engine is handed."""
    return (KernelBenchmark.objects.filter(correct=True, median_us__isnull=False, variant__build__ok=True,
                                           variant__build__discarded=False, **filters)
            .select_related("variant", "variant__job").order_by("median_us", "variant__job_id", "variant__ordinal"))


def _best_fields(b: KernelBenchmark, base: float | None) -> dict[str, Any]:
    """The :class:`KernelBest` fields for measurement ``b`` with the baseline ``base`` (µs)."""
    return dict(job=b.variant.job, variant=b.variant, benchmark=b, package_hash=b.variant.job.package_hash,
                median_us=b.median_us, roofline_fraction=b.roofline_fraction, baseline_us=base,
                speedup=(base / b.median_us) if base and b.median_us else None)


def _bucket_filter(*, package, device_name: str, cc: str, compiler: str) -> dict[str, Any]:
    """:class:`KernelBenchmark` filters for the measurements of every job of one (package,
    device, cc, compiler) bucket (``"unknown"``: jobs whose compiler was never named)."""
    out: dict[str, Any] = dict(variant__job__package=package, variant__job__device_name=device_name,
                               variant__job__device_cc=cc)
    if compiler == "unknown":
        out["variant__job__compiler__in"] = ["", "unknown"]
    else:
        out["variant__job__compiler"] = compiler
    return out


def _baseline_of(b: KernelBenchmark) -> float | None:
    """The fastest qualifying baseline (``impl == "baseline"``) of ``b``'s job at ``b``'s point (µs)."""
    return (_qualifying(shape=b.shape, batch=b.batch, variant__job=b.variant.job, variant__params__impl="baseline")
            .values_list("median_us", flat=True).first())


def _repick(*, package, device_name: str, cc: str, compiler: str, shape: str, batch: int,
            package_hash: str | None = None) -> KernelBest | None:
    """Set the :class:`KernelBest` of one (package, device, cc, compiler, shape, batch) to the
    fastest qualifying measurement of any job of that bucket (of jobs built from sources
    ``package_hash`` when given), or delete it when none qualifies (after the job that held it
    was re-measured, lost a build or moved to another bucket). Returns the row, or None."""
    lookup = dict(package=package, device_name=device_name, cc=cc, shape=shape, batch=batch, compiler=compiler)
    same_sources = {"variant__job__package_hash": package_hash} if package_hash else {}
    b = _qualifying(shape=shape, batch=batch, **same_sources,
                    **_bucket_filter(package=package, device_name=device_name, cc=cc, compiler=compiler)).first()
    if b is None:
        KernelBest.objects.filter(**lookup).delete()
        return None
    row, _ = KernelBest.objects.update_or_create(**lookup, defaults=_best_fields(b, _baseline_of(b)))
    return row


def kernel_best_select(*, job: KernelJob) -> list[KernelBest]:
    """Pick the fastest correct variant of ``job`` per (shape, batch) and store it as the
    :class:`KernelBest` of (package, device name, cc, shape, batch, compiler) when it beats the
    stored one (lower median), the stored one came from other sources (package hash), or the
    stored one is this job's (re-measured slower, it is re-picked from every job of the bucket
    built from the same sources). Variants without a stored build, or whose build failed or was
    discarded, never qualify. ``baseline_us`` and ``speedup`` compare with the fastest variant
    whose ``impl`` parameter is ``"baseline"`` for the same (shape, batch). Returns the rows this
    job now holds."""
    if not job.device_name or not job.device_cc:
        return []
    compiler = job.compiler or "unknown"
    benches = _qualifying(variant__job=job).order_by("shape", "batch", "median_us", "variant__ordinal")
    best: dict[tuple[str, int], KernelBenchmark] = {}
    baseline: dict[tuple[str, int], float] = {}
    for b in benches:
        key = (b.shape, b.batch)
        best.setdefault(key, b)
        if b.variant.params.get("impl") == "baseline":
            baseline.setdefault(key, b.median_us)
    held: list[KernelBest] = []
    # Entries this job holds that it can no longer back: another bucket (its device or compiler
    # changed), or a (shape, batch) where none of its variants qualifies any more (re-measured
    # wrong, build discarded). Each is re-picked from every job of its bucket.
    stale = [(r.device_name, r.cc, r.compiler, r.shape, r.batch) for r in KernelBest.objects.filter(job=job)
             if (r.device_name, r.cc, r.compiler) != (job.device_name, job.device_cc, compiler)
             or (r.shape, r.batch) not in best]
    stale_buckets = {key[:3] for key in stale}
    with transaction.atomic():
        for device_name, cc, comp, shape, batch in stale:
            _repick(package=job.package, device_name=device_name, cc=cc, compiler=comp, shape=shape, batch=batch)
        for (shape, batch), b in best.items():
            lookup = dict(package=job.package, device_name=job.device_name, cc=job.device_cc, shape=shape,
                          batch=batch, compiler=compiler)
            current = KernelBest.objects.select_for_update().filter(**lookup).first()
            if (current is not None and current.job_id != job.pk and current.package_hash == job.package_hash
                    and current.median_us <= b.median_us):
                continue
            if current is not None and current.job_id == job.pk and current.median_us < b.median_us:
                # this job's entry, re-measured slower: another job of the bucket (same sources) may
                # hold a faster measurement than this job's next best
                row = _repick(package=job.package, device_name=job.device_name, cc=job.device_cc,
                              compiler=compiler, shape=shape, batch=batch, package_hash=job.package_hash)
                if row is not None and row.job_id == job.pk:
                    held.append(row)
                continue
            row, _ = KernelBest.objects.update_or_create(
                **lookup, defaults=_best_fields(b, baseline.get((shape, batch))))
            held.append(row)
    manifest = job_manifest(job)
    for device_name, cc, comp in stale_buckets - {(job.device_name, job.device_cc, compiler)}:
        _export_bucket(package=job.package, device_name=device_name, cc=cc, compiler=comp, dtype=manifest.dtype)
    return held


def config_filename(*, device_name: str, shape: str, dtype: str) -> str:
    """``device_name=NVIDIA_H200,shape=v4-flash,dtype=bf16.json``: SGLang's and vLLM's naming of
    tuned-config files (device name with spaces as underscores), with the shape in place of
    their ``E=..,N=..`` MoE dimensions."""
    dev = re.sub(r"[^A-Za-z0-9_.-]", "_", device_name.replace(" ", "_"))
    return f"device_name={dev},shape={shape},dtype={dtype}.json"


def config_dirname(*, compiler: str, cc: str) -> str:
    """``compiler=triton_3.6.0,cc=9.0``: the directory of one (compiler, compute capability) bucket
    under a package's config directory, so that a config tuned with another compiler or for another
    target never replaces this one's file (vLLM keeps its tuned configs per Triton version the same
    way)."""
    comp = re.sub(r"[^A-Za-z0-9_.-]", "_", (compiler or "unknown").replace(" ", "_"))
    return f"compiler={comp},cc={cc}"


def _export_bucket(*, package, device_name: str, cc: str, compiler: str, dtype: str) -> list[str]:
    """(Re)write the config files of one (package, device, cc, compiler) bucket from its stored
    best rows, one file per shape, and record each row's path; a shape left with no rows has its
    file removed. Returns the written paths."""
    out_dir = configs_dir() / package.name / config_dirname(compiler=compiler, cc=cc)
    rows = list(KernelBest.objects.filter(package=package, device_name=device_name, cc=cc,
                                          compiler=compiler).select_related("variant"))
    by_shape: dict[str, list[KernelBest]] = {}
    for r in rows:
        by_shape.setdefault(r.shape, []).append(r)
    paths: list[str] = []
    for shape, items in sorted(by_shape.items()):
        body = {str(r.batch): r.variant.params for r in sorted(items, key=lambda r: r.batch)}
        path = out_dir / config_filename(device_name=device_name, shape=shape, dtype=dtype)
        _write_json(path, body)
        KernelBest.objects.filter(pk__in=[r.pk for r in items]).update(config_path=str(path))
        paths.append(str(path))
    if out_dir.is_dir():
        prefix = config_filename(device_name=device_name, shape="", dtype=dtype).split(",shape=")[0] + ",shape="
        for old in out_dir.glob(prefix + "*.json"):
            if str(old) not in paths:
                old.unlink(missing_ok=True)
    return paths


def kernel_best_export(*, job: KernelJob) -> list[str]:
    """Write the best configs of ``job``'s device as JSON files, one per shape, and record the
    paths (``KernelBest.config_path``, ``job.config_paths``).

    Each file (:func:`config_filename`, under
    ``configs_dir()/<package>/<config_dirname(compiler, cc)>/``) maps a batch size to the chosen
    variant's parameters, ``{"1": {"impl": "split_k", "BLOCK_H": 64, ...}, "8": {...}}`` (keys
    sorted numerically), over every stored best of (package, device, cc, compiler) for that shape,
    so buckets won by an earlier job are kept and other compilers' or targets' files are not
    touched. Returns the written paths.
    """
    paths = _export_bucket(package=job.package, device_name=job.device_name, cc=job.device_cc,
                           compiler=job.compiler or "unknown", dtype=job_manifest(job).dtype)
    KernelJob.objects.filter(pk=job.pk).update(config_paths=paths)
    return paths
