"""The runner reads manifest expressions with the control plane's own evaluator
(:mod:`kernels.safeexpr`): what the control plane refuses the runner refuses with the same reason,
and both compute the same cost, ``requires`` and shared-memory numbers for every real package."""
import shutil
from pathlib import Path

import pytest

from kernels.manifest import grid_expand, manifest_load
from kernels.runner.build import _target_refusal
from kernels.runner.package import PackageError, load_package
from kernels.safeexpr import ExpressionError, expr_compile, expr_evaluate
from kernels.tests.conftest import REAL_PACKAGES

PACKAGES = sorted(p.name for p in REAL_PACKAGES.iterdir() if (p / "manifest.toml").is_file())


def test_there_is_one_evaluator():
    import kernels.runner

    assert not (Path(kernels.runner.__file__).parent / "expr.py").exists()


@pytest.mark.parametrize("name", PACKAGES)
def test_the_runner_and_the_control_plane_compute_the_same_costs(name):
    runner, control = load_package(REAL_PACKAGES / name), manifest_load(REAL_PACKAGES / name)
    points = [(shape, batch) for shape in runner.shapes for batch in shape["batches"]]
    assert len(points) >= 7
    for shape, batch in points:
        assert runner.cost_of(shape, batch) == control.cost(shape["name"], batch), (shape["name"], batch)


def test_the_runner_keeps_the_variants_the_control_plane_expands_for_the_target():
    name = "sparse_mla_decode_cuda"
    runner, control = load_package(REAL_PACKAGES / name), manifest_load(REAL_PACKAGES / name)
    variants = grid_expand(control).variants
    assert variants and runner.cuda["requires"]
    for variant in variants:
        params = {k: v for k, v in variant.items() if k != "variant_id"}
        assert _target_refusal(runner, params, 90) is None, variant
        expected = expr_evaluate(runner.cuda["requires"], {**params, "cc": 80})
        assert (_target_refusal(runner, params, 80) is None) == bool(expected), variant


@pytest.mark.parametrize("formula, reason", [
    ("cdiv(topk, 32) * 32 * batch", "only min() and max() may be called, not cdiv()"),
    ("batch if topk else 1", "conditional expressions (batch if topk else 1) are not allowed"),
    ("abs(batch)", "only min() and max() may be called, not abs()"),
    ("batch.real", "attribute access (batch.real) is not allowed"),
    ("2 * nonsense * batch", "uses unknown name nonsense"),
])
def test_a_formula_the_control_plane_refuses_the_runner_refuses_for_the_same_reason(tmp_path, formula, reason):
    src = REAL_PACKAGES / "sparse_mla_decode"
    root = tmp_path / "sparse_mla_decode"
    shutil.copytree(src, root, ignore=shutil.ignore_patterns("results", "__pycache__", "tuning"))
    manifest = root / "manifest.toml"
    line = next(ln for ln in manifest.read_text().splitlines() if ln.startswith("flops = "))
    manifest.write_text(manifest.read_text().replace(line, f'flops = "{formula}"'))
    names = {k for shape in load_package(src).shapes for k, v in shape.items() if isinstance(v, int)} | {"batch"}
    with pytest.raises(ExpressionError) as control:
        expr_compile(formula, names=names)
    assert reason in str(control.value)
    with pytest.raises(PackageError) as runner:
        load_package(root)
    assert str(runner.value) == f"{manifest}: [cost] flops: {control.value}"


def test_a_requires_that_cannot_be_evaluated_is_a_build_refusal_with_the_reason(tmp_path):
    runner = load_package(REAL_PACKAGES / "sparse_mla_decode_cuda")
    runner.cuda = {**runner.cuda, "requires": "impl > 2"}
    refusal = _target_refusal(runner, {"impl": "baseline"}, 90)
    assert refusal == "[cuda] requires: 'impl > 2': cannot order str against int"
