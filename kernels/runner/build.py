"""Build facts for kernel variants without a GPU: Triton (``triton.compile`` to a named target) and
CUDA C++ (``nvcc``).

For each variant the result is one dict (the ``builds.json`` item of the runner contract)::

    {"variant_id", "ok", "error", "registers", "spills_bytes", "shared_bytes", "tensor_core",
     "tensor_core_evidence": "wgmma"|"mma"|"none", "build_s", "compiler", "log"}

* Triton: the package's ``compile_specs(params, shape)`` names each kernel a launch would run,
  with its signature and constexprs, for every shape of the manifest (constexprs depend on the
  shape). Each distinct kernel is compiled with ``triton.compile(ASTSource(...),
  target=GPUTarget("cuda", cc, 32))`` into a fresh cache directory (so ``build_s`` is a real
  compile), then ``ptxas -v`` (Triton's own, same flags and arch) is run on the PTX to read
  registers per thread, spill stores and static shared memory; Triton's dynamic shared memory is
  ``metadata.shared``. Integer arguments are specialised from the spec's ``int_values`` the way
  Triton's launcher specialises them on the device (1 is a constant, multiples of 16 are marked
  divisible), so the facts are those of the binary a launch would run. The PTX is searched for
  ``wgmma.mma_async`` (Hopper warp-group MMA) and ``mma.sync`` (warp MMA). A variant's facts are
  the worst over its kernels and shapes (most registers, spills and shared memory);
  ``tensor_core`` is true when its main kernel (the first spec) uses MMA instructions for every
  shape.
* CUDA: ``nvcc -cubin -gencode arch=compute_XX,code=sm_XX`` (``90a`` for cc 9.0 and later, which
  ``wgmma`` needs) with ``[cuda].nvcc_flags``, ``-D<NAME>=<value>`` for each grid parameter listed
  in ``[cuda].defines`` and ``-Xptxas -v``; the ptxas report of the function named by
  ``[cuda].kernel`` (or, if no symbol has that exact name, the heaviest entry point whose name contains
  it) gives registers, spills and static shared memory (plus ``[cuda].dynamic_shared`` evaluated on
  the variant's parameters, the dynamic shared memory its launch asks for), and ``cuobjdump -sass``
  (``HGMMA`` / ``HMMA``) the tensor-core evidence, or the PTX (``nvcc -ptx``) where no cuobjdump is
  found.

Only argv lists are run, and only the executables ``nvcc``, ``ptxas`` and ``cuobjdump``.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..safeexpr import ExpressionError, expr_evaluate
from .package import Package

LOG_LIMIT = 8000            # characters of compiler output kept per variant
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.+-]+$")


class BuildError(RuntimeError):
    """A build step that failed; the message is the reason (compiler output included)."""


def parse_target(text: str) -> int:
    """Turn ``"cuda:90"`` (or ``"cuda:9.0"``, ``"90"``) into the integer compute capability 90.
    Raises ValueError on anything else."""
    value = text.split(":", 1)[1] if text.startswith("cuda:") else text
    if re.fullmatch(r"\d+\.\d", value):
        major, minor = value.split(".")
        return int(major) * 10 + int(minor)
    if re.fullmatch(r"\d{2,3}", value):
        return int(value)
    raise ValueError(f"target must look like cuda:90 or cuda:9.0, got {text!r}")


def arch_name(cc: int) -> str:
    """``sm_90a`` for cc >= 9.0 (architecture-specific features such as wgmma), else ``sm_XX``."""
    return f"sm_{cc}a" if cc >= 90 else f"sm_{cc}"


_PTXAS_FUNC = re.compile(r"(?:Compiling entry function|Function properties for) '?([^'\s]+)'?")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(log: str) -> dict[str, dict]:
    """Parse a ``ptxas -v`` report into ``{function: {"registers", "spill_stores", "spill_loads",
    "smem"}}`` (ints; bytes for the last three). Functions appear in the order ptxas reports them."""
    funcs: dict[str, dict] = {}
    current = None
    for line in log.splitlines():
        m = _PTXAS_FUNC.search(line)
        if m:
            current = funcs.setdefault(m.group(1), {"registers": None, "spill_stores": 0,
                                                     "spill_loads": 0, "smem": 0})
            continue
        if current is None:
            continue
        if (m := _PTXAS_SPILL.search(line)):
            current["spill_stores"], current["spill_loads"] = int(m.group(1)), int(m.group(2))
        if (m := _PTXAS_REGS.search(line)):
            current["registers"] = int(m.group(1))
            if (s := _PTXAS_SMEM.search(line)):
                current["smem"] = int(s.group(1))
    return funcs


def tensor_core_evidence(text: str) -> str:
    """``"wgmma"`` if PTX/SASS ``text`` holds warp-group MMA (``wgmma.mma_async`` / ``HGMMA``),
    ``"mma"`` for warp MMA (``mma.sync`` / ``HMMA``), else ``"none"``."""
    if "wgmma.mma_async" in text or "HGMMA" in text:
        return "wgmma"
    if re.search(r"\bmma\.sync\b", text) or "HMMA" in text:
        return "mma"
    return "none"


def _truncate(text: str) -> str:
    return text if len(text) <= LOG_LIMIT else text[:LOG_LIMIT // 2] + "\n...\n" + text[-LOG_LIMIT // 2:]


def _result(variant_id, compiler: str) -> dict:
    return {"variant_id": variant_id, "ok": False, "error": None, "registers": None, "spills_bytes": None,
            "shared_bytes": None, "tensor_core": None, "tensor_core_evidence": "none", "build_s": 0.0,
            "compiler": compiler, "log": ""}


# --------------------------------------------------------------------------------------------
# Triton
# --------------------------------------------------------------------------------------------
def triton_version() -> str:
    """``"triton 3.6.0"`` for the installed Triton (import error propagates)."""
    import triton

    return f"triton {triton.__version__}"


def _triton_compile_spec(spec: dict, cc: int) -> dict:
    """Compile one kernel spec for ``cc``; return its facts and PTX. Raises BuildError."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource, make_backend

    fn = spec["fn"]
    constexprs = dict(spec["constexprs"])
    divisible = set()
    # Specialise integer arguments as Triton's launcher does on the device: 1 becomes a constant,
    # multiples of 16 are marked divisible (which lets gathered loads vectorise and pipeline).
    for name, value in (spec.get("int_values") or {}).items():
        if name in spec.get("do_not_specialize", ()):
            continue
        if value == 1:
            constexprs[name] = 1
        elif value % 16 == 0:
            divisible.add(name)
    signature = {name: "constexpr" if name in constexprs else spec["signature"][name] for name in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
             if signature[name].startswith("*") or name in divisible}
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    target = GPUTarget("cuda", cc, 32)
    backend = make_backend(target)
    options = backend.parse_options({"num_warps": spec["num_warps"], "num_stages": spec["num_stages"]})
    try:
        compiled = triton.compile(src, target=target, options=options.__dict__)
    except Exception as exc:  # Triton raises CompilationError, RuntimeError, AssertionError, ...
        raise BuildError(f"{type(exc).__name__}: {exc}") from None
    ptx = compiled.asm["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        ptx_path = Path(tmp) / "k.ptx"
        ptx_path.write_text(ptx)
        argv = [get_ptxas(cc).path, "-v", f"--gpu-name={arch_name(cc)}", str(ptx_path), "-o", str(Path(tmp) / "k.o")]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise BuildError(f"ptxas failed ({proc.returncode}): {proc.stderr.strip()}")
    funcs = parse_ptxas(proc.stderr)
    facts = funcs.get(compiled.metadata.name) or (next(iter(funcs.values())) if funcs else {})
    return {
        "registers": facts.get("registers"),
        "spills_bytes": facts.get("spill_stores", 0),
        "shared_bytes": int(compiled.metadata.shared) + int(facts.get("smem", 0)),
        "evidence": tensor_core_evidence(ptx),
        "ptxas": proc.stderr.strip(),
    }


def build_triton(package: Package, variant: dict, cc: int) -> dict:
    """Build facts for one Triton variant (see the module docstring). Never raises for a variant
    that fails to build: the result has ``ok: false`` and the reason in ``error``."""
    vid, params = variant["variant_id"], variant["params"]
    try:
        result = _result(vid, triton_version())
    except ImportError:
        result = _result(vid, "triton (not installed)")
        result["error"] = "Triton is not installed in this Python: cannot build Triton variants"
        return result
    started = time.perf_counter()
    log: list[str] = []
    try:
        module = package.load_module(package.entry)
        compile_specs = getattr(module, "compile_specs", None)
        if compile_specs is None:
            raise BuildError(f"{package.entry} has no compile_specs(params, shape)")
        seen: dict = {}
        main_evidence = []
        for shape in package.shapes:
            specs = compile_specs(params, shape)
            for i, spec in enumerate(specs):
                key = (spec["fn"].__name__, tuple(sorted(spec["constexprs"].items())), spec["num_warps"],
                       spec["num_stages"])
                if key not in seen:
                    t0 = time.perf_counter()
                    seen[key] = _triton_compile_spec(spec, cc)
                    f = seen[key]
                    log.append(f"{shape['name']}/{spec['name']}: {f['registers']} registers, "
                               f"{f['spills_bytes']} B spill stores, {f['shared_bytes']} B shared, "
                               f"tensor cores: {f['evidence']}, {time.perf_counter() - t0:.2f} s")
                if i == 0:
                    main_evidence.append(seen[key]["evidence"])
        facts = list(seen.values())
        result.update({
            "ok": True,
            "registers": max((f["registers"] or 0) for f in facts),
            "spills_bytes": max(f["spills_bytes"] for f in facts),
            "shared_bytes": max(f["shared_bytes"] for f in facts),
            "tensor_core": all(e != "none" for e in main_evidence),
            "tensor_core_evidence": "wgmma" if "wgmma" in main_evidence else "mma" if "mma" in main_evidence else "none",
        })
    except (BuildError, ValueError, KeyError, TypeError) as exc:
        result["error"] = str(exc) or type(exc).__name__
        log.append(result["error"])
    result["build_s"] = round(time.perf_counter() - started, 3)
    result["log"] = _truncate("\n".join(log))
    return result


# --------------------------------------------------------------------------------------------
# CUDA C++
# --------------------------------------------------------------------------------------------
def find_tool(name: str) -> str | None:
    """Locate ``nvcc``/``ptxas``/``cuobjdump``: ``$CEILING_<NAME>`` (e.g. ``CEILING_NVCC``), then
    ``PATH``, then ``$CUDA_HOME/bin`` and ``/usr/local/cuda/bin``; for ``cuobjdump`` also the copy
    Triton ships. Returns None when absent. Raises ValueError for a name outside the allowlist."""
    if name not in ("nvcc", "ptxas", "cuobjdump"):
        raise ValueError(f"{name} is not an allowed build tool")
    explicit = os.environ.get(f"CEILING_{name.upper()}")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = shutil.which(name)
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if base and os.access(Path(base) / "bin" / name, os.X_OK):
            return str(Path(base) / "bin" / name)
    if name == "cuobjdump":
        try:
            import triton

            bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
            if os.access(bundled, os.X_OK):
                return str(bundled)
        except ImportError:
            pass
    return None


def nvcc_version(nvcc: str) -> str:
    """``"nvcc 13.0"`` from ``nvcc --version`` (``"nvcc ?"`` if the banner has no release)."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"release (\d+\.\d+)", out)
    return f"nvcc {m.group(1) if m else '?'}"


def nvcc_argv(package: Package, params: dict, cc: int, nvcc: str, out: Path, kind: str = "-cubin") -> list[str]:
    """The nvcc argv for one CUDA variant: ``kind`` (``-cubin`` or ``-ptx``), the gencode for ``cc``,
    the manifest's flags, ``-D`` for each ``[cuda].defines`` parameter, ``-Xptxas -v``. Raises
    ValueError on a define whose value is not a plain token or a parameter the variant lacks."""
    arch = f"{cc}a" if cc >= 90 else str(cc)
    argv = [nvcc, kind, "-gencode", f"arch=compute_{arch},code=sm_{arch}"]
    flags = package.cuda.get("nvcc_flags", [])
    if not all(isinstance(f, str) for f in flags):
        raise ValueError("[cuda] nvcc_flags must be strings")
    argv += flags
    for name in package.cuda.get("defines", []):
        if name not in params:
            raise ValueError(f"[cuda] defines names {name!r}, which this variant's params lack")
        value = str(params[name])
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or not _SAFE_VALUE.match(value):
            raise ValueError(f"-D{name}={value!r} is not a plain name=value token")
        argv.append(f"-D{name}={value}")
    if kind == "-cubin":
        argv += ["-Xptxas", "-v"]
    argv += [str((package.root / package.entry).resolve()), "-o", str(out)]
    return argv


def _target_refusal(package: Package, params: dict, cc: int) -> str | None:
    """Why ``params`` is not built for ``cc`` (the manifest's ``[cuda] requires`` is false for it,
    or cannot be evaluated), or None. The control plane leaves such variants out before building
    (``kernels.manifest.grid_for_target``); a variants file given to the runner by hand gets the
    same rule as a build failure with this reason instead of the compiler's ``#error``."""
    text = (package.cuda or {}).get("requires")
    if not text:
        return None
    try:
        ok = expr_evaluate(text, {**params, "cc": cc})
    except ExpressionError as exc:
        return f"[cuda] requires: {exc}"
    if ok:
        return None
    return f"not built for compute capability {cc / 10:.1f}: [cuda] requires ({text}) is false for this variant"


def build_cuda(package: Package, variant: dict, cc: int) -> dict:
    """Build facts for one CUDA C++ variant with nvcc (see the module docstring). Never raises
    for a failed build: ``ok: false`` with the compiler's message in ``error``."""
    vid, params = variant["variant_id"], variant["params"]
    nvcc = find_tool("nvcc")
    result = _result(vid, nvcc_version(nvcc) if nvcc else "nvcc (not found)")
    started = time.perf_counter()
    refusal = _target_refusal(package, params, cc)
    if refusal:
        result["error"] = refusal
        return result
    if nvcc is None:
        result["error"] = "nvcc not found (set CEILING_NVCC or put CUDA's bin on PATH)"
        return result
    kernel = package.cuda["kernel"]
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        try:
            argv = nvcc_argv(package, params, cc, nvcc, cubin)
        except ValueError as exc:
            result["error"] = str(exc)
            return result
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=package.root)
        log = (proc.stdout + proc.stderr).strip()
        result["log"] = _truncate(" ".join(argv[1:]) + "\n" + log)
        if proc.returncode != 0:
            errors = [ln for ln in log.splitlines() if "error" in ln.lower()]
            result["error"] = _truncate("\n".join(errors) or log or f"nvcc exited {proc.returncode}")
            result["build_s"] = round(time.perf_counter() - started, 3)
            return result
        funcs = parse_ptxas(log)
        # the exact symbol, else every entry point whose name contains it (a package that builds one
        # kernel per head dim reports the heaviest: most registers, then spills, then shared memory)
        matching = [f for name, f in funcs.items() if name == kernel] \
            or [f for name, f in funcs.items() if kernel in name]
        facts = max(matching, key=lambda f: (f["registers"] or 0, f["spill_stores"], f["smem"]), default=None)
        if facts is None:
            result["error"] = f"ptxas reported no function named {kernel!r} (saw: {', '.join(funcs) or 'none'})"
            result["build_s"] = round(time.perf_counter() - started, 3)
            return result
        cuobjdump = find_tool("cuobjdump")
        evidence_text = ""
        if cuobjdump:
            sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, timeout=300)
            evidence_text = sass.stdout if sass.returncode == 0 else ""
        if not evidence_text:
            ptx = Path(tmp) / "k.ptx"
            subprocess.run(nvcc_argv(package, params, cc, nvcc, ptx, kind="-ptx"), capture_output=True,
                           text=True, timeout=900, cwd=package.root)
            evidence_text = ptx.read_text() if ptx.exists() else ""
        evidence = tensor_core_evidence(evidence_text)
        shared = facts["smem"]
        if package.cuda.get("dynamic_shared"):
            try:
                shared += int(expr_evaluate(package.cuda["dynamic_shared"], dict(params)))
            except (ExpressionError, TypeError, ValueError) as exc:
                result["error"] = f"[cuda] dynamic_shared: {exc}"
                result["build_s"] = round(time.perf_counter() - started, 3)
                return result
        result.update({"ok": True, "registers": facts["registers"], "spills_bytes": facts["spill_stores"],
                       "shared_bytes": shared, "tensor_core": evidence != "none",
                       "tensor_core_evidence": evidence})
    result["build_s"] = round(time.perf_counter() - started, 3)
    return result


def build_variant(package: Package, variant: dict, cc: int) -> dict:
    """Build facts for ``variant`` of ``package`` for compute capability ``cc`` (e.g. 90)."""
    if package.language == "triton":
        return build_triton(package, variant, cc)
    return build_cuda(package, variant, cc)
