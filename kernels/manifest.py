"""Kernel packages on disk: load and validate ``manifest.toml``, expand the parameter grid.

A package is a directory ``kernels/packages/<name>/`` holding ``manifest.toml`` (read with the
standard library's :mod:`tomllib`) and the sources it lists. The manifest's structure, shared by
the control plane and the standalone runner::

    name, title, language ("triton" | "cuda"), description, dtype (optional, default "bf16"),
    baseline (optional: what the grid's ``impl = "baseline"`` variants are, in one line of at most
              200 characters without parentheses; the pages say what a speedup is over in these
              words, else in the parenthesis after "baseline" in the description),
    sources = [relative paths], reference = "file.py:function", entry = "kernel.py" | "kernel.cu"
    [grid]       PARAM = [int | str, ...] for every parameter; constraints = ["expr", ...]
    [[shapes]]   name = "...", batches = [int, ...], and numeric fields (heads, d_qk, ...)
    [tolerance]  atol, rtol
    [cost]       bytes = "expr", flops = "expr"   (per call, over shape fields and ``batch``)
    [engine]     env = "NAME", flag = "--flag"    (how a recipe hands the exported config over)
    [cuda]       kernel, nvcc_flags, defines, harness, dynamic_shared (language "cuda" only;
                 dynamic_shared: an expression over the grid parameters giving the bytes of dynamic
                 shared memory a variant's largest launch asks for, added to ptxas's static figure
                 in the build facts so the shared-memory discard sees it; harness: the Python
                 file that launches the built cubin when benchmarking; requires: an expression
                 over the grid parameters and ``cc``, the target compute capability as an integer
                 (90 for 9.0), true where a variant can be built for that target, e.g.
                 ``"impl == 'baseline' or cc == 90"`` for sm_90a-only wgmma code: a job for another
                 target leaves the others out before building, see :func:`grid_for_target`)

:func:`manifest_load` reports every problem at once as :class:`ManifestError`, whose ``errors``
map a dotted field path (``grid.BLOCK_H.1``, ``shapes.0.heads``, ``cost.bytes``) to messages that
name the bad value. Types are checked with pydantic in strict mode (TOML's types map one to one,
so ``"16"`` is never silently read as 16); cross-field rules are checked here. Expressions
(constraints, costs) go through :mod:`kernels.safeexpr`, never ``eval``.

:func:`grid_expand` takes the cartesian product of the grid (optionally restricted to a subset of
each parameter's values) in manifest order, drops combinations that fail a constraint and counts,
per constraint, how many combinations it was the first to refuse.

No Django settings needed (its one import from the control plane,
:func:`controlplane.jsonsafe.json_spelled`, reads none): this module is usable wherever the
package directory is.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, ValidationError

from controlplane.jsonsafe import json_spelled, not_integer, shown_value
from kernels.safeexpr import ExpressionError, SafeExpr, expr_compile, expr_evaluate, number_problem

MANIFEST_FILE = "manifest.toml"
PACKAGE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_]{0,62}$")
IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
SHAPE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
DTYPE_RE = re.compile(r"^[a-z0-9_]{1,16}$")
FLAG_RE = re.compile(r"^--[a-z0-9][a-z0-9-]{0,62}$")
# Environment variables a package may name for its exported config. Ceiling's own namespace
# only for names ending in _CONFIG (so CEILING_PROC_ID and friends stay Ceiling's), and the
# engines' own prefixes; the recipe's general env denylist still applies on top
# (:func:`kernels.references.kernel_refs_validate`).
ENGINE_ENV_RE = re.compile(r"^(?:CEILING_[A-Z0-9_]+_CONFIG|SGLANG_[A-Z0-9_]+|SGL_[A-Z0-9_]+|VLLM_[A-Z0-9_]+)$")
# nvcc options a CUDA package may ask for. The runner adds -gencode, -D and -Xptxas -v itself;
# anything that picks a host compiler, an output path or passes options through to another tool
# (-ccbin, -o, -Xcompiler, --compiler-options, -I outside the package) is not a tuning knob.
NVCC_FLAG_RE = re.compile(
    r"^(?:-O[0-3]|-lineinfo|--use_fast_math|-use_fast_math|--extra-device-vectorization|"
    r"-std=c\+\+(?:14|17|20)|--std=c\+\+(?:14|17|20)|-ftz=(?:true|false)|-prec-div=(?:true|false)|"
    r"-prec-sqrt=(?:true|false)|-fmad=(?:true|false)|--restrict|-maxrregcount=\d{1,3}|"
    r"--maxrregcount=\d{1,3}|-G|-Xptxas=-O[0-3])$"
)
# Most variants one grid may expand to before constraints: a job builds each one.
MAX_GRID_COMBINATIONS = 20_000
MAX_PARAM_VALUES = 64
MAX_SHAPES = 32
MAX_BATCHES = 32
# Shape fields that cost formulas read besides the numbers a shape declares.
COST_EXTRA_NAMES = ("batch",)

Value = int | str


class ManifestError(ValueError):
    """A manifest that cannot be used. ``errors`` maps a dotted field path to messages."""

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = errors
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))


# --- typed structure (pydantic, strict) -------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Tolerance(_Strict):
    atol: StrictFloat | StrictInt = Field(ge=0)
    rtol: StrictFloat | StrictInt = Field(ge=0)


class _Cost(_Strict):
    bytes: StrictStr
    flops: StrictStr


class _Engine(_Strict):
    env: StrictStr = ""
    flag: StrictStr = ""


class _Cuda(_Strict):
    kernel: StrictStr
    nvcc_flags: list[StrictStr] = []
    defines: list[StrictStr] = []
    harness: StrictStr | None = None
    dynamic_shared: StrictStr | None = None
    requires: StrictStr | None = None


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    name: StrictStr
    batches: list[StrictInt] = Field(min_length=1, max_length=MAX_BATCHES)


class _Manifest(_Strict):
    name: StrictStr
    title: StrictStr = Field(min_length=1, max_length=200)
    language: Literal["triton", "cuda"]
    description: StrictStr = ""
    dtype: StrictStr = "bf16"
    baseline: StrictStr | None = None
    sources: list[StrictStr] = Field(min_length=1)
    reference: StrictStr
    entry: StrictStr
    grid: dict[str, Any]
    shapes: list[_Shape] = Field(min_length=1, max_length=MAX_SHAPES)
    tolerance: _Tolerance
    cost: _Cost
    engine: _Engine
    cuda: _Cuda | None = None


# --- the validated manifest -------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """One benchmark shape: ``name``, the batch sizes to run, and its numeric ``fields``
    (``{"heads": 64, "d_qk": 512, ...}``) that cost formulas and the kernel read."""

    name: str
    batches: tuple[int, ...]
    fields: dict[str, int | float]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, **self.fields, "batches": list(self.batches)}


@dataclass(frozen=True)
class Manifest:
    """A validated package manifest (see the module docstring for the fields).

    ``grid`` keeps manifest order (``{param: [values]}``); ``constraints`` are the checked
    expressions in order; ``path`` is the package directory (None for a manifest validated from
    text alone, e.g. a stored copy).
    """

    name: str
    title: str
    language: str
    description: str
    dtype: str
    sources: tuple[str, ...]
    reference: str
    entry: str
    grid: dict[str, list[Value]]
    constraints: tuple[SafeExpr, ...]
    shapes: tuple[Shape, ...]
    atol: float
    rtol: float
    cost_bytes: SafeExpr
    cost_flops: SafeExpr
    engine_env: str
    engine_flag: str
    cuda: dict[str, Any] | None
    path: Path | None = None
    #: What the ``impl = "baseline"`` variants are (the manifest's ``baseline``), None when not said.
    baseline: str | None = None

    @property
    def params(self) -> list[str]:
        """Grid parameter names in manifest order."""
        return list(self.grid)

    def shape(self, name: str) -> Shape:
        """The shape called ``name``; KeyError when there is none."""
        for s in self.shapes:
            if s.name == name:
                return s
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (what :class:`kernels.models.KernelPackage` stores): the manifest's own
        structure, with ``grid.constraints`` as the expression texts."""
        out: dict[str, Any] = {
            "name": self.name, "title": self.title, "language": self.language, "description": self.description,
            "dtype": self.dtype, "sources": list(self.sources), "reference": self.reference, "entry": self.entry,
            "grid": {**{k: list(v) for k, v in self.grid.items()}, "constraints": [c.text for c in self.constraints]},
            "shapes": [s.as_dict() for s in self.shapes],
            "tolerance": {"atol": self.atol, "rtol": self.rtol},
            "cost": {"bytes": self.cost_bytes.text, "flops": self.cost_flops.text},
            "engine": {"env": self.engine_env, "flag": self.engine_flag},
        }
        if self.baseline is not None:
            out["baseline"] = self.baseline
        if self.cuda is not None:
            out["cuda"] = dict(self.cuda)
        return out

    def cost(self, shape: str | Shape, batch: int) -> tuple[float, float]:
        """``(bytes, flops)`` of one call at ``batch`` for ``shape`` from the manifest's cost
        formulas (bytes moved to or from HBM, floating-point operations). Raises
        :class:`ExpressionError` when a formula fails (it was checked for every declared shape
        and batch at load, so only an undeclared batch can fail)."""
        s = self.shape(shape) if isinstance(shape, str) else shape
        bindings = {**s.fields, "batch": batch}
        return float(self.cost_bytes.evaluate(bindings)), float(self.cost_flops.evaluate(bindings))


class _Errors:
    def __init__(self) -> None:
        self.errors: dict[str, list[str]] = {}

    def add(self, path: str, message: str) -> None:
        self.errors.setdefault(path, []).append(message)

    def raise_if_any(self) -> None:
        if self.errors:
            raise ManifestError(self.errors)


def _loc(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if not (isinstance(p, str) and p in ("str", "int", "float")
                                                  or str(p).startswith(("constrained-", "function-"))))


def manifest_validate(raw: Any, *, package_dir: Path | None = None, dir_name: str | None = None) -> Manifest:
    """Validate a parsed manifest (the dict :mod:`tomllib` returns) and return a :class:`Manifest`.

    ``package_dir``: when given, every listed file (``sources``, the ``reference`` module,
    ``entry``) must exist inside it as a regular file, and ``name`` must equal ``dir_name``
    (default: the directory's name). Raises :class:`ManifestError` with every problem found.
    """
    errs = _Errors()
    if not isinstance(raw, dict):
        raise ManifestError({"manifest": [f"must be a TOML table, got {type(raw).__name__}"]})
    try:
        typed = _Manifest.model_validate(raw)
    except ValidationError as exc:
        for e in exc.errors():
            path = _loc(e["loc"]) or "manifest"
            msg = e["msg"]
            if e["type"] == "extra_forbidden":
                msg = f"unknown field {json_spelled(path.rsplit('.', 1)[-1])}"
            elif e["type"] == "missing":
                msg = "is required"
            elif "input" in e and e["type"] not in ("missing",):
                msg = f"{msg} (got {json_spelled(e['input'])})" if not isinstance(e["input"], (dict, list)) else msg
            errs.add(path, msg)
        raise ManifestError(errs.errors) from None

    name = typed.name
    if not PACKAGE_NAME_RE.match(name):
        errs.add("name", f"{json_spelled(name)} must be 1-63 lowercase letters, digits or '_', starting with a letter or digit")
    expected = dir_name if dir_name is not None else (package_dir.name if package_dir is not None else None)
    if expected is not None and name != expected:
        errs.add("name", f"{json_spelled(name)} must equal the package directory name {json_spelled(expected)}")
    if not DTYPE_RE.match(typed.dtype):
        errs.add("dtype", f"{json_spelled(typed.dtype)} must be a short lowercase name such as bf16")
    if typed.baseline is not None and (problem := _baseline_problem(typed.baseline)):
        errs.add("baseline", problem)

    # Files.
    for i, src in enumerate(typed.sources):
        _file_check(errs, f"sources.{i}", src, package_dir)
    if len(set(typed.sources)) != len(typed.sources):
        errs.add("sources", "lists a file twice")
    ref_file, sep, ref_func = typed.reference.partition(":")
    if not sep or not ref_file.endswith(".py") or not IDENT_RE.match(ref_func):
        errs.add("reference", f"{json_spelled(typed.reference)} must be 'module_file.py:function'")
    else:
        _file_check(errs, "reference", ref_file, package_dir)
    suffix = ".cu" if typed.language == "cuda" else ".py"
    if not typed.entry.endswith(suffix):
        errs.add("entry", f"{json_spelled(typed.entry)}: a {typed.language} package's entry must be a {suffix} file")
    _file_check(errs, "entry", typed.entry, package_dir)
    if typed.entry not in typed.sources:
        errs.add("entry", f"{json_spelled(typed.entry)} must also be listed in sources")

    # Grid and constraints.
    grid_raw = dict(typed.grid)
    constraints_raw = grid_raw.pop("constraints", [])
    grid: dict[str, list[Value]] = {}
    if not grid_raw:
        errs.add("grid", "needs at least one parameter (PARAM = [values])")
    for param, values in grid_raw.items():
        path = f"grid.{param}"
        if not IDENT_RE.match(param):
            errs.add(path, f"parameter name {json_spelled(param)} must be an identifier (letters, digits, '_')")
            continue
        if param in COST_EXTRA_NAMES or param in ("name", "batches"):
            errs.add(path, f"{json_spelled(param)} is reserved")
            continue
        if not isinstance(values, list) or not values:
            errs.add(path, f"must be a non-empty list of integers or strings, got {json_spelled(values)}")
            continue
        if len(values) > MAX_PARAM_VALUES:
            errs.add(path, f"has {len(values)} values; at most {MAX_PARAM_VALUES}")
            continue
        good = True
        for j, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, str)):
                errs.add(f"{path}.{j}", f"must be an integer or a string, got {not_integer(v, json_spelled(v))}")
                good = False
            elif isinstance(v, str) and not re.match(r"^[A-Za-z0-9_.-]{1,32}$", v):
                errs.add(f"{path}.{j}", f"string value {json_spelled(v)} may hold only letters, digits, '_', '.', '-'")
                good = False
        if good and len({(type(v), v) for v in values}) != len(values):
            errs.add(path, "lists a value twice")
        if good:
            grid[param] = list(values)
    constraints: list[SafeExpr] = []
    if not isinstance(constraints_raw, list):
        errs.add("grid.constraints", "must be a list of expression strings")
        constraints_raw = []
    for i, text in enumerate(constraints_raw):
        try:
            constraints.append(expr_compile(text, names=set(grid_raw)))
        except ExpressionError as exc:
            errs.add(f"grid.constraints.{i}", str(exc))
    combos = 1
    for values in grid.values():
        combos *= len(values)
    if combos > MAX_GRID_COMBINATIONS:
        errs.add("grid", f"expands to {combos} combinations before constraints; at most {MAX_GRID_COMBINATIONS}")

    # Shapes.
    shapes: list[Shape] = []
    seen_shapes: set[str] = set()
    for i, s in enumerate(typed.shapes):
        path = f"shapes.{i}"
        if not SHAPE_NAME_RE.match(s.name):
            errs.add(f"{path}.name", f"{json_spelled(s.name)} must be 1-63 letters, digits, '.', '_' or '-'")
        if s.name in seen_shapes:
            errs.add(f"{path}.name", f"shape {json_spelled(s.name)} is declared twice")
        seen_shapes.add(s.name)
        if any(b < 1 for b in s.batches):
            errs.add(f"{path}.batches", f"batch sizes must be >= 1, got {s.batches}")
        if len(set(s.batches)) != len(s.batches):
            errs.add(f"{path}.batches", "lists a batch size twice")
        fields: dict[str, int | float] = {}
        for key, value in (s.model_extra or {}).items():
            if not IDENT_RE.match(key) or key in COST_EXTRA_NAMES:
                errs.add(f"{path}.{key}", f"{json_spelled(key)} is not a usable shape field name")
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                errs.add(f"{path}.{key}", f"shape fields must be numbers, got {json_spelled(value)}")
            elif number_problem(value):
                errs.add(f"{path}.{key}", f"{json_spelled(value)} {number_problem(value)}")
            elif value <= 0:
                errs.add(f"{path}.{key}", f"must be > 0, got {json_spelled(value)}")
            else:
                fields[key] = value
        shapes.append(Shape(name=s.name, batches=tuple(sorted(s.batches)), fields=fields))

    # Costs: compiled over the fields every shape has, then evaluated for each shape and batch.
    common = set.intersection(*(set(s.fields) for s in shapes)) if shapes else set()
    names = common | set(COST_EXTRA_NAMES)
    cost_exprs: dict[str, SafeExpr] = {}
    for key in ("bytes", "flops"):
        try:
            cost_exprs[key] = expr_compile(getattr(typed.cost, key), names=names)
        except ExpressionError as exc:
            errs.add(f"cost.{key}", str(exc))
    for key, expr in cost_exprs.items():
        for s in shapes:
            for b in s.batches:
                try:
                    value = expr.evaluate({**s.fields, "batch": b})
                except ExpressionError as exc:
                    errs.add(f"cost.{key}", f"shape {s.name} batch {b}: {exc}")
                    break
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                    errs.add(f"cost.{key}", f"shape {s.name} batch {b}: must give a positive number, "
                                            f"got {json_spelled(value)}")
                    break

    # Engine hand-over.
    env, flag = typed.engine.env, typed.engine.flag
    if not env and not flag:
        errs.add("engine", "needs env (an environment variable) or flag (an engine option) to hand the config over")
    if env:
        problem = engine_env_problem(env)
        if problem:
            errs.add("engine.env", problem)
    if flag and not FLAG_RE.match(flag):
        errs.add("engine.flag", f"{json_spelled(flag)} must look like --some-option (lowercase letters, digits, '-')")

    # CUDA specifics.
    cuda: dict[str, Any] | None = None
    if typed.language == "cuda":
        if typed.cuda is None:
            errs.add("cuda", "is required for language 'cuda' (kernel, nvcc_flags, defines)")
        else:
            if not IDENT_RE.match(typed.cuda.kernel):
                errs.add("cuda.kernel", f"{json_spelled(typed.cuda.kernel)} must be a C identifier")
            for i, f in enumerate(typed.cuda.nvcc_flags):
                if not NVCC_FLAG_RE.match(f):
                    errs.add(f"cuda.nvcc_flags.{i}", f"{json_spelled(f)} is not an allowed nvcc option (optimisation and "
                                                     "math options only; the runner sets targets and defines)")
            for i, d in enumerate(typed.cuda.defines):
                if d not in grid_raw:
                    errs.add(f"cuda.defines.{i}", f"{json_spelled(d)} is not a grid parameter ({', '.join(grid_raw)})")
            cuda = {"kernel": typed.cuda.kernel, "nvcc_flags": list(typed.cuda.nvcc_flags),
                    "defines": list(typed.cuda.defines)}
            if typed.cuda.harness is not None:
                if not typed.cuda.harness.endswith(".py"):
                    errs.add("cuda.harness", f"{json_spelled(typed.cuda.harness)} must be a .py file (make_inputs, launch)")
                _file_check(errs, "cuda.harness", typed.cuda.harness, package_dir)
                if typed.cuda.harness not in typed.sources:
                    errs.add("cuda.harness", f"{json_spelled(typed.cuda.harness)} must also be listed in sources")
                cuda["harness"] = typed.cuda.harness
            if typed.cuda.dynamic_shared is not None:
                try:
                    expr_compile(typed.cuda.dynamic_shared, names=set(grid_raw))
                except ExpressionError as exc:
                    errs.add("cuda.dynamic_shared", str(exc))
                cuda["dynamic_shared"] = typed.cuda.dynamic_shared
            if typed.cuda.requires is not None:
                if "cc" in grid_raw:
                    errs.add("cuda.requires", "names the target as cc: rename the grid parameter 'cc'")
                try:
                    expr_compile(typed.cuda.requires, names=set(grid_raw) | {"cc"})
                except ExpressionError as exc:
                    errs.add("cuda.requires", str(exc))
                cuda["requires"] = typed.cuda.requires
    elif typed.cuda is not None:
        errs.add("cuda", "only applies to language 'cuda'")
    if typed.baseline is not None and "grid.impl" not in errs.errors and "baseline" not in grid.get("impl", []):
        errs.add("baseline", "describes the impl = 'baseline' variants, but the grid's impl has no 'baseline'")

    errs.raise_if_any()
    return Manifest(
        name=name, title=typed.title, language=typed.language, description=typed.description, dtype=typed.dtype,
        sources=tuple(typed.sources), reference=typed.reference, entry=typed.entry, grid=grid,
        constraints=tuple(constraints), shapes=tuple(shapes), atol=float(typed.tolerance.atol),
        rtol=float(typed.tolerance.rtol), cost_bytes=cost_exprs["bytes"], cost_flops=cost_exprs["flops"],
        engine_env=env, engine_flag=flag, cuda=cuda, path=package_dir,
        baseline=" ".join(typed.baseline.split()) if typed.baseline is not None else None,
    )


#: Most characters of a manifest's ``baseline``: a phrase the pages put in parentheses.
MAX_BASELINE_CHARS = 200


def _baseline_problem(text: str) -> str | None:
    """Why ``text`` cannot be a manifest's ``baseline`` (empty, more than one line, longer than
    :data:`MAX_BASELINE_CHARS`, holding a parenthesis), None when it can."""
    if not text.strip():
        return "is empty: say what the impl = 'baseline' variants are, or leave it out"
    if "\n" in text.strip() or "\r" in text:
        return "must be one line: the pages show it in parentheses after 'baseline implementation'"
    if len(text.strip()) > MAX_BASELINE_CHARS:
        return f"has {len(text.strip())} characters; at most {MAX_BASELINE_CHARS}"
    if "(" in text or ")" in text:
        return "may not hold parentheses: the pages show it in parentheses after 'baseline implementation'"
    return None


def engine_env_problem(name: str) -> str | None:
    """Why ``name`` may not carry an exported kernel config to an engine, or None when it may.

    Allowed: ``CEILING_<...>_CONFIG`` and the engines' own prefixes (``SGLANG_``, ``SGL_``,
    ``VLLM_``), upper case; names that load code (``*_PLUGIN``, ``*_PLUGIN_DIR``, ``*_PATH``
    suffixes) are refused, following the recipe env denylist of :mod:`deployments.recipes`.
    """
    if not isinstance(name, str) or not ENGINE_ENV_RE.match(name):
        return (f"{json_spelled(name)} is not an allowed config variable: use CEILING_<NAME>_CONFIG or an engine prefix "
                "(SGLANG_, SGL_, VLLM_), upper case")
    if name.endswith(("_PLUGIN", "_PLUGIN_DIR", "_PLUGIN_PATH", "_MODULE_DIR", "_LIBRARY_PATH", "_PLUGINS")):
        return f"{json_spelled(name)} names a variable that makes a process load code; not allowed for a kernel config"
    return None


def _file_check(errs: _Errors, path: str, rel: str, package_dir: Path | None) -> None:
    p = PurePosixPath(rel)
    if not rel or p.is_absolute() or ".." in p.parts or rel.startswith("-") or "\\" in rel:
        errs.add(path, f"{json_spelled(rel)} must be a relative path inside the package (no '..', not absolute)")
        return
    if package_dir is None:
        return
    full = (package_dir / rel)
    try:
        inside = full.resolve().is_relative_to(package_dir.resolve())
    except OSError:
        inside = False
    if not inside:
        errs.add(path, f"{json_spelled(rel)} resolves outside the package directory")
    elif not full.is_file():
        errs.add(path, f"{json_spelled(rel)} does not exist in {package_dir}")


def manifest_load(package_dir: str | Path) -> Manifest:
    """Read and validate ``<package_dir>/manifest.toml``. Raises :class:`ManifestError` for a
    missing directory or file, TOML syntax errors (with line and column) and every validation
    problem (see :func:`manifest_validate`)."""
    package_dir = Path(package_dir)
    path = package_dir / MANIFEST_FILE
    if not package_dir.is_dir():
        raise ManifestError({"package": [f"{package_dir} is not a directory"]})
    if not path.is_file():
        raise ManifestError({"manifest": [f"{path} does not exist"]})
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError({"manifest": [f"{path.name} is not valid TOML: {exc}"]}) from None
    except UnicodeDecodeError:
        raise ManifestError({"manifest": [f"{path.name} is not UTF-8 text"]}) from None
    return manifest_validate(raw, package_dir=package_dir)


def manifest_from_stored(data: dict[str, Any]) -> Manifest:
    """A :class:`Manifest` from the JSON form :meth:`Manifest.as_dict` produced (files are not
    checked: the copy was validated against its directory when it was stored)."""
    return manifest_validate(data, package_dir=None, dir_name=data.get("name"))


def package_source_hash(manifest: Manifest) -> str:
    """SHA-256 (hex) over the manifest file and every file the package lists, in a fixed order:
    a change to any of them gives a new hash, so builds and measurements can say which sources
    they came from. Requires ``manifest.path``."""
    assert manifest.path is not None
    h = hashlib.sha256()
    files = [MANIFEST_FILE, *sorted(set(manifest.sources) | {manifest.reference.partition(":")[0], manifest.entry})]
    for rel in files:
        data = (manifest.path / rel).read_bytes()
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()


# --- grid expansion ---------------------------------------------------------------------------


@dataclass
class GridExpansion:
    """The variants of a grid: ``variants`` (param dicts in manifest order, each passing every
    constraint), ``combinations`` (the product size before constraints), ``pruned`` (one entry per
    constraint: ``{"index", "source", "constraint", "pruned"}``, the combinations it was the first
    to refuse; :func:`pruned_entry` says what each field holds) and the ``subset`` that restricted
    the grid, if any."""

    variants: list[dict[str, Value]]
    combinations: int
    pruned: list[dict[str, Any]] = field(default_factory=list)
    subset: dict[str, list[Value]] | None = None

    @property
    def pruned_total(self) -> int:
        return self.combinations - len(self.variants)

    def as_dict(self) -> dict[str, Any]:
        return {"variants": len(self.variants), "combinations": self.combinations, "pruned": self.pruned,
                "pruned_total": self.pruned_total, "subset": self.subset}


#: What left a grid summary's ``pruned`` entry's combinations out (its ``source``): one of the
#: manifest's ``grid.constraints`` (``index`` is its position, from 0), the manifest's
#: ``[cuda].requires`` for the job's target, or the variants file a job made from measurements
#: was created with (the grid variants it does not list). ``index`` is null for the last two.
PRUNED_SOURCES = ("constraint", "cuda.requires", "variants_file")

#: How grid summaries stored before ``source`` existed spelled a non-constraint entry's ``index``.
_OLD_PRUNED_INDEX = {"cuda.requires": "cuda.requires", "only": "variants_file"}


def pruned_entry(*, index: int | None, source: str, constraint: str, pruned: int) -> dict[str, Any]:
    """One entry of a grid summary's ``pruned``: ``index`` (the constraint's position in
    ``grid.constraints``, from 0; None unless ``source`` is ``"constraint"``), ``source`` (one of
    :data:`PRUNED_SOURCES`), ``constraint`` (its text) and ``pruned`` (how many combinations it
    was the first to refuse)."""
    return {"index": index, "source": source, "constraint": constraint, "pruned": pruned}


def grid_summary_read(summary: dict[str, Any] | None) -> dict[str, Any]:
    """A stored grid summary (:meth:`GridExpansion.as_dict`) in the current shape: an entry of
    ``pruned`` stored with ``"index": "only"`` or ``"index": "cuda.requires"`` (and no
    ``source``) reads as ``index`` null with that ``source``; a constraint's entry gains
    ``"source": "constraint"``. ``{}`` for None. The stored value is not changed."""
    out = dict(summary or {})
    if isinstance(out.get("pruned"), list):
        entries = []
        for entry in out["pruned"]:
            if isinstance(entry, dict) and "source" not in entry:
                index = entry.get("index")
                old = _OLD_PRUNED_INDEX.get(index) if isinstance(index, str) else None
                entry = pruned_entry(index=None if old else index, source=old or "constraint",
                                     constraint=entry.get("constraint", ""), pruned=entry.get("pruned", 0))
            entries.append(entry)
        out["pruned"] = entries
    return out


def grid_subset_validate(manifest: Manifest, subset: Any) -> dict[str, list[Value]] | None:
    """Check a restriction of the grid: ``{param: [values]}`` where each value is one of the
    manifest's for that parameter. Returns it in manifest order, or None for an empty subset.
    Raises :class:`ManifestError` with ``params.<param>`` paths; a parameter given one value
    that is not in a list (``{"impl": "split_k"}``) is refused there, naming its type as a sweep
    grid does (``must be a list of grid values (e.g. ["split_k"]), got the string "split_k"``),
    not read as a one-value list, and so is a value
    given twice in one list."""
    if subset in (None, {}):
        return None
    if not isinstance(subset, dict):
        raise ManifestError({"params": [f"must be an object of parameter: [values], got {shown_value(subset)}"]})
    errs = _Errors()
    out: dict[str, list[Value]] = {}
    for param, values in subset.items():
        if param not in manifest.grid:
            errs.add(f"params.{param}", f"not a grid parameter of {manifest.name}; parameters: "
                                        f"{', '.join(manifest.grid)}")
            continue
        if not isinstance(values, list):
            errs.add(f"params.{param}", f"must be a list of grid values (e.g. {json_spelled([values])}), "
                                        f"got {shown_value(values)}")
            continue
        if not values:
            errs.add(f"params.{param}", "needs at least one value")
            continue
        allowed = manifest.grid[param]
        seen: list = []
        for v in values:
            if isinstance(v, bool) or not any(type(v) is type(a) and v == a for a in allowed):
                errs.add(f"params.{param}", f"{json_spelled(v)} is not one of the grid's values "
                                            f"{json.dumps(allowed)}")
            elif any(type(v) is type(w) and v == w for w in seen):
                errs.add(f"params.{param}", f"{json_spelled(v)} is given twice: give each value once")
            else:
                seen.append(v)
        out[param] = [a for a in allowed if any(type(v) is type(a) and v == a for v in values)]
    errs.raise_if_any()
    return {p: out[p] for p in manifest.grid if p in out}


def grid_expand(manifest: Manifest, subset: dict[str, list[Value]] | None = None) -> GridExpansion:
    """Expand the grid (restricted to ``subset``, see :func:`grid_subset_validate`) into variants.

    Combinations are enumerated in manifest order (the first parameter varies slowest), each
    checked against the constraints in order; the first constraint that is false refuses it and
    is counted. A constraint that cannot be evaluated for a combination (e.g. ordering a string
    against a number) raises :class:`ManifestError` at ``grid.constraints.<i>``.
    """
    subset = grid_subset_validate(manifest, subset) if subset else None
    axes = {p: (subset or {}).get(p, values) for p, values in manifest.grid.items()}
    names = list(axes)
    counts = [0] * len(manifest.constraints)
    variants: list[dict[str, Value]] = []
    combinations = 0
    for combo in itertools.product(*axes.values()):
        combinations += 1
        params = dict(zip(names, combo))
        refused = False
        for i, c in enumerate(manifest.constraints):
            try:
                ok = c.evaluate(params)
            except ExpressionError as exc:
                raise ManifestError({f"grid.constraints.{i}": [f"{exc} for {variant_key(params)}"]}) from None
            if not ok:
                counts[i] += 1
                refused = True
                break
        if not refused:
            variants.append(params)
    pruned = [pruned_entry(index=i, source="constraint", constraint=c.text, pruned=counts[i])
              for i, c in enumerate(manifest.constraints)]
    return GridExpansion(variants=variants, combinations=combinations, pruned=pruned, subset=subset)


def grid_for_target(manifest: Manifest, expansion: GridExpansion, cc: str) -> GridExpansion:
    """Leave out of ``expansion`` (in place, and return it) the variants ``[cuda].requires`` refuses
    for compute capability ``cc`` (``"9.0"``; bound as the integer 90), counted as one more
    ``pruned`` entry (``"index": null, "source": "cuda.requires"``). A manifest without ``requires`` keeps every
    variant. Raises :class:`ManifestError` at ``cuda.requires`` when the expression cannot be
    evaluated for a variant."""
    text = (manifest.cuda or {}).get("requires")
    if not text:
        return expansion
    target = int(cc.replace(".", ""))
    kept = []
    for params in expansion.variants:
        try:
            ok = expr_evaluate(text, {**params, "cc": target})
        except ExpressionError as exc:
            raise ManifestError({"cuda.requires": [f"{exc} for {variant_key(params)}"]}) from None
        if ok:
            kept.append(params)
    expansion.pruned.append(pruned_entry(index=None, source="cuda.requires", constraint=f"{text} (target cc {cc})",
                                         pruned=len(expansion.variants) - len(kept)))
    expansion.variants = kept
    return expansion


def grid_refusal(manifest: Manifest, params: Any, *, subset: dict[str, list[Value]] | None = None,
                 cc: str | None = None) -> str:
    """Why ``params`` is not a variant of the grid (restricted to ``subset``, built for ``cc``),
    in words naming the parameter, value or constraint: ``"BLOCK_N=48 is not one of the grid's
    values [16, 32, 64, 128]"``, ``"constraint 1 (BLOCK_H <= 64 or impl == 'split_k') refuses
    it"``; every reason found, joined by ``"; "``. An empty string when the grid does hold it."""
    if not isinstance(params, dict):
        return f"params must be an object of parameter: value, got {json_spelled(params)}"
    reasons: list[str] = []
    unknown = [k for k in params if k not in manifest.grid]
    if unknown:
        reasons.append(f"{', '.join(json_spelled(k) for k in unknown[:5])} "
                       f"{'is not a parameter' if len(unknown) == 1 else 'are not parameters'} of the grid "
                       f"({', '.join(manifest.grid)})")
    missing = [k for k in manifest.grid if k not in params]
    if missing:
        reasons.append(f"it lacks {', '.join(missing)}")
    for k, allowed in manifest.grid.items():
        if k not in params:
            continue
        v = params[k]
        if not any(type(v) is type(a) and v == a for a in allowed):
            # quoted: the text "16" must not read like the number 16
            reasons.append(f"{k}={json_spelled(v)} is not one of the grid's values {json.dumps(allowed)}")
        elif subset and k in subset and not any(type(v) is type(a) and v == a for a in subset[k]):
            reasons.append(f"{k}={json_spelled(v)} is outside the job's params subset {json.dumps(subset[k])}")
    if reasons:
        return "; ".join(reasons)
    for i, c in enumerate(manifest.constraints):
        try:
            if not c.evaluate(params):
                return f"constraint {i} ({c.text}) refuses it"
        except ExpressionError as exc:
            return f"constraint {i} ({c.text}) cannot be evaluated for it: {exc}"
    text = (manifest.cuda or {}).get("requires")
    if text and cc:
        try:
            if not expr_evaluate(text, {**params, "cc": int(cc.replace(".", ""))}):
                return f"[cuda].requires ({text}) refuses it for compute capability {cc}"
        except (ExpressionError, ValueError) as exc:
            return f"[cuda].requires ({text}) cannot be evaluated for it: {exc}"
    return ""


def variant_key(params: dict[str, Value]) -> str:
    """Canonical text of a parameter set, in the given (manifest) order: ``impl=split_k,BLOCK_H=32``."""
    return ",".join(f"{k}={v}" for k, v in params.items())


def variant_shown(params: dict[str, Any]) -> str:
    """A parameter set as a refusal quotes it (:func:`grid_refusal`'s way): each value as
    :func:`controlplane.jsonsafe.json_spelled` shows it, so the text ``"16"`` reads ``BLOCK_H='16'``
    and not like the number 16, and ``true`` not like Python's ``True``
    (``impl='split_k',BLOCK_H=16``); :func:`variant_key` is the stored key."""
    return ",".join(f"{k}={json_spelled(v)}" for k, v in params.items())
