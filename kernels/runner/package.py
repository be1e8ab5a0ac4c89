"""Read a kernel package: ``manifest.toml`` (stdlib ``tomllib``), its Python modules and variants.

This is the runner's own small parse of the manifest (the control plane validates manifests
more thoroughly in ``kernels/manifest.py``, which imports Django; the runner must not). It checks
what the runner relies on and raises :class:`PackageError` with the field and the reason:

* ``name`` equals the directory name; ``language`` is ``triton`` or ``cuda``; ``entry`` and every
  ``sources`` file exist inside the package directory;
* ``reference`` is ``file.py:function``;
* ``[[shapes]]`` each have ``name``, positive integer ``heads``/``d_qk``/``d_v``/``topk`` and a
  list of positive ``batches`` (other integer fields such as ``kv_len`` are kept);
* ``[tolerance]`` has ``atol``/``rtol``; ``[cost]`` has ``bytes``/``flops`` expressions over the
  shape fields and ``batch``.

Expressions (cost formulas, ``[cuda] requires`` and ``dynamic_shared``) are read and evaluated by
the control plane's own :mod:`kernels.safeexpr` (it imports no Django), so the runner accepts
exactly the language the control plane registered and computes the same numbers from it.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..safeexpr import ExpressionError, expr_compile, expr_evaluate


class PackageError(ValueError):
    """A manifest, variants file or package module that the runner cannot use; the message names
    the file, the field and the reason."""


@dataclass
class Package:
    """A parsed kernel package. ``root`` is the package directory; ``manifest`` the raw TOML
    tables; ``shapes`` the ``[[shapes]]`` list (dicts); ``tolerance`` ``{"atol", "rtol"}``;
    ``cost`` ``{"bytes", "flops"}`` expressions; ``cuda`` the ``[cuda]`` table (may be empty)."""

    root: Path
    name: str
    language: str
    entry: str
    reference: str
    sources: list[str]
    shapes: list[dict]
    tolerance: dict
    cost: dict
    grid: dict = field(default_factory=dict)
    cuda: dict = field(default_factory=dict)
    manifest: dict = field(default_factory=dict)

    def shape(self, name: str) -> dict:
        """Return the shape called ``name``; PackageError if the manifest has none."""
        for shape in self.shapes:
            if shape["name"] == name:
                return shape
        raise PackageError(f"{self.name}: no shape named {name!r} (have {', '.join(s['name'] for s in self.shapes)})")

    def cost_of(self, shape: dict, batch: int) -> tuple[float, float]:
        """Return ``(bytes, flops)`` of one call for ``shape`` at ``batch`` from the manifest's cost
        formulas (units: bytes moved to/from HBM, floating-point operations)."""
        names = {k: v for k, v in shape.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        names["batch"] = batch
        try:
            return (float(expr_evaluate(self.cost["bytes"], names)),
                    float(expr_evaluate(self.cost["flops"], names)))
        except ExpressionError as exc:
            raise PackageError(f"{self.name}: [cost]: {exc}") from None

    def load_module(self, relpath: str, tag: str = ""):
        """Import the package file ``relpath`` as a fresh module (a unique name per package, file and
        ``tag``; the package directory is put on ``sys.path`` so sibling imports work). Raises
        PackageError if the file is missing or fails to import, with the exception text."""
        path = (self.root / relpath).resolve()
        if not path.is_file() or self.root.resolve() not in path.parents:
            raise PackageError(f"{self.name}: {relpath} is not a file inside the package")
        modname = f"_kpkg_{self.name}_{path.stem}{tag}"
        if modname in sys.modules:
            return sys.modules[modname]
        if str(self.root) not in sys.path:
            sys.path.insert(0, str(self.root))
        spec = importlib.util.spec_from_file_location(modname, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[modname]
            raise PackageError(f"{self.name}: importing {relpath} failed: {type(exc).__name__}: {exc}") from exc
        return module

    def reference_fn(self):
        """Return the reference callable named by ``reference = "file.py:function"``."""
        file, _, func = self.reference.partition(":")
        module = self.load_module(file, "_ref")
        fn = getattr(module, func, None)
        if not callable(fn):
            raise PackageError(f"{self.name}: {file} has no function {func!r}")
        return fn


def _need(table: dict, key: str, kind, where: str):
    if key not in table:
        raise PackageError(f"{where}: missing {key!r}")
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise PackageError(f"{where}: {key!r} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def load_package(path: str | Path) -> Package:
    """Parse ``<path>/manifest.toml`` and return a :class:`Package`.

    Reads files only. Raises PackageError with the field and reason on a missing or malformed
    manifest (see the module docstring for what is checked)."""
    root = Path(path)
    mpath = root / "manifest.toml"
    if not mpath.is_file():
        raise PackageError(f"{root}: no manifest.toml")
    try:
        data = tomllib.loads(mpath.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise PackageError(f"{mpath}: {exc}") from None
    where = str(mpath)
    name = _need(data, "name", str, where)
    if name != root.resolve().name:
        raise PackageError(f"{where}: name {name!r} must equal the directory name {root.resolve().name!r}")
    language = _need(data, "language", str, where)
    if language not in ("triton", "cuda"):
        raise PackageError(f"{where}: language must be 'triton' or 'cuda', got {language!r}")
    entry = _need(data, "entry", str, where)
    sources = _need(data, "sources", list, where)
    for rel in [entry, *sources]:
        p = (root / rel).resolve()
        if not p.is_file() or root.resolve() not in p.parents:
            raise PackageError(f"{where}: {rel!r} is not a file inside the package")
    reference = _need(data, "reference", str, where)
    if ":" not in reference:
        raise PackageError(f"{where}: reference must be 'file.py:function', got {reference!r}")
    shapes = data.get("shapes")
    if not isinstance(shapes, list) or not shapes:
        raise PackageError(f"{where}: needs at least one [[shapes]] table")
    for i, shape in enumerate(shapes):
        swhere = f"{where}: shapes[{i}]"
        _need(shape, "name", str, swhere)
        for key in ("heads", "d_qk", "d_v", "topk"):
            if _need(shape, key, int, swhere) <= 0:
                raise PackageError(f"{swhere}: {key} must be positive")
        batches = _need(shape, "batches", list, swhere)
        if not batches or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in batches):
            raise PackageError(f"{swhere}: batches must be a non-empty list of positive integers")
    tolerance = _need(data, "tolerance", dict, where)
    for key in ("atol", "rtol"):
        if not isinstance(tolerance.get(key), (int, float)) or tolerance[key] < 0:
            raise PackageError(f"{where}: [tolerance] {key} must be a non-negative number")
    cost = _need(data, "cost", dict, where)
    for key in ("bytes", "flops"):
        text = _need(cost, key, str, f"{where}: [cost]")
        allowed = {k for s in shapes for k, v in s.items() if isinstance(v, int)} | {"batch"}
        try:
            expr_compile(text, names=allowed)
        except ExpressionError as exc:
            raise PackageError(f"{where}: [cost] {key}: {exc}") from None
    cuda = data.get("cuda", {}) or {}
    if language == "cuda" and not isinstance(cuda.get("kernel"), str):
        raise PackageError(f"{where}: [cuda] kernel (the kernel symbol) is required for language 'cuda'")
    return Package(root=root, name=name, language=language, entry=entry, reference=reference,
                   sources=list(sources), shapes=shapes, tolerance=tolerance, cost=cost,
                   grid=data.get("grid", {}) or {}, cuda=cuda, manifest=data)


def load_variants(path: str | Path) -> list[dict]:
    """Read ``variants.json``: a list of ``{"variant_id": int|str, "params": {...}}``. Raises
    PackageError on a file that is not such a list (duplicate ids included)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise PackageError(f"{path}: {exc}") from None
    if not isinstance(data, list):
        raise PackageError(f"{path}: must hold a JSON list of variants")
    seen = set()
    for i, item in enumerate(data):
        if not isinstance(item, dict) or "variant_id" not in item or not isinstance(item.get("params"), dict):
            raise PackageError(f"{path}: item {i} must be {{\"variant_id\": ..., \"params\": {{...}}}}")
        vid = item["variant_id"]
        if not isinstance(vid, (int, str)) or isinstance(vid, bool):
            raise PackageError(f"{path}: item {i}: variant_id must be an integer or a string")
        if vid in seen:
            raise PackageError(f"{path}: variant_id {vid!r} appears twice")
        seen.add(vid)
    return data


def variants_sha256(variants: list[dict]) -> str:
    """Fingerprint of a variants list: the sha256 hex digest of its canonical JSON, a list of
    ``{"params": {...}, "variant_id": ...}`` objects written with sorted keys and separators
    ``(",", ":")``, the objects ordered by that text so that the order of the file does not matter.
    Only ``variant_id`` and ``params`` count (keys a runner adds to a variant, such as a cubin path,
    do not). ``bench`` writes it into ``results.json`` as ``variants_sha256``; the control plane
    computes it from a job's own variants to refuse results measured from another variants list.
    Raises KeyError for an entry without ``variant_id`` or ``params``."""
    entries = sorted(json.dumps({"params": v["params"], "variant_id": v["variant_id"]}, sort_keys=True,
                                separators=(",", ":")) for v in variants)
    return hashlib.sha256(("[" + ",".join(entries) + "]").encode("utf-8")).hexdigest()
