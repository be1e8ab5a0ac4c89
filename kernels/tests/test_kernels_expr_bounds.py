"""Numbers in manifest expressions stay real, finite and within 1e30 (kernels.safeexpr, which the
control plane and the runner both use), a manifest whose cost formula breaks that is refused at its
field path, and kernel_register warns about a grid its constraints leave empty."""
import shutil
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from kernels.manifest import ManifestError, manifest_load
from kernels.safeexpr import ExpressionError, expr_compile, expr_evaluate
from kernels.tests.conftest import REAL_PACKAGES, TEST_MANIFEST, write_package

ENV = {"batch": 4, "topk": 640, "big": 10 ** 20}


@pytest.mark.parametrize("text, reason", [
    ("max(batch, 1e999)", "the constant 1e999 is not a finite number"),
    ("min(batch, -1e999)", "the constant 1e999 is not a finite number"),
    ("batch * 1e31", "the constant 1e31 exceeds 1e+30 in magnitude"),
    ("batch + 10000000000000000000000000000000", "exceeds 1e+30 in magnitude"),
    ("max(big * big, 1)", "exceeds 1e+30 in magnitude"),
    ("(batch - 100) ** 0.5 + batch * topk",
     "(-96) ** 0.5: a negative number raised to a fractional power is not a real number"),
    ("big ** 2", "exceeds 1e+30 in magnitude"),
    ("(1 / big) ** -2", "exceeds 1e+30 in magnitude"),
    ("batch ** 65", "the exponent must be a number of at most 64"),
])
def test_every_number_must_be_real_finite_and_within_1e30(text, reason):
    with pytest.raises(ExpressionError) as err:
        expr_evaluate(text, ENV)
    assert reason in str(err.value), str(err.value)


def test_the_refusal_names_the_expression():
    with pytest.raises(ExpressionError) as err:
        expr_evaluate("max(batch, 1e999)", ENV)
    assert "'max(batch, 1e999)'" in str(err.value)
    with pytest.raises(ExpressionError) as err:
        expr_evaluate("max(big * big, 1)", ENV)
    assert str(err.value) == f"'max(big * big, 1)': big * big gives {10 ** 40}, which exceeds 1e+30 in magnitude"


def test_a_value_bound_to_a_name_is_checked_too():
    with pytest.raises(ExpressionError, match=r"the value of heads \(inf\) is not a finite number"):
        expr_evaluate("max(heads, 1)", {"heads": float("inf")})
    with pytest.raises(ExpressionError, match=r"the value of heads \(nan\) is not a finite number"):
        expr_evaluate("heads * 2", {"heads": float("nan")})


def test_tiny_and_boundary_values_are_accepted():
    # batch ** -64 is about 3e-39: finite and far inside the bound, not "too large".
    assert 0 < expr_evaluate("batch ** -64", ENV) < 1e-38
    assert expr_evaluate("10 ** 30", {}) == 10 ** 30
    assert expr_evaluate("1e30", {}) == 1e30
    assert expr_evaluate("(-2) ** 3 + (-8) ** 2.0", {}) == -8 + 64.0
    assert expr_evaluate("max(batch, 1e30)", ENV) == 1e30


def test_infinite_constants_are_refused_before_any_evaluation():
    with pytest.raises(ExpressionError, match="the constant 1e999 is not a finite number"):
        expr_compile("max(batch, 1e999)", names={"batch"})
    with pytest.raises(ExpressionError, match="the constant 1e999 is not a finite number"):
        expr_compile("batch in (1, 1e999)", names={"batch"})


def _manifest(tmp_path, **replace):
    text = TEST_MANIFEST
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return manifest_load(write_package(tmp_path, manifest=text))


FLOPS = 'flops = "2 * batch * heads * topk * (d_qk + d_v)"'
BYTES = 'bytes = "batch * topk * d_qk * 2 + batch * heads * (d_qk + d_v) * 2"'


@pytest.mark.parametrize("old, new, path, message", [
    (FLOPS, 'flops = "max(batch, 1e999)"', "cost.flops",
     "'max(batch, 1e999)': the constant 1e999 is not a finite number"),
    (BYTES, 'bytes = "(batch - 100) ** 0.5 + batch * topk"', "cost.bytes",
     "shape small batch 1: '(batch - 100) ** 0.5 + batch * topk': (-99) ** 0.5: a negative number raised "
     "to a fractional power is not a real number"),
    # 8 heads x 1e29 is inside the bound at batch 1; batch 4 crosses it.
    (FLOPS, 'flops = "batch * heads * 1e29"', "cost.flops",
     "shape small batch 4: 'batch * heads * 1e29': batch * heads * 1e29 gives 3.2"),
    ("heads = 8", "heads = inf", "shapes.0.heads", "Infinity is not a finite number"),
])
def test_a_cost_formula_out_of_range_is_refused_at_its_field_path(tmp_path, old, new, path, message):
    with pytest.raises(ManifestError) as err:
        _manifest(tmp_path, **{old: new})
    assert any(message in m for m in err.value.errors.get(path, [])), err.value.errors


def test_a_tiny_cost_is_accepted(tmp_path):
    m = _manifest(tmp_path, **{FLOPS: 'flops = "batch ** -64"'})
    assert 0 < m.cost("small", 1)[1] == 1.0 and m.cost("small", 4)[1] < 1e-38


@pytest.fixture
def packages_dir(tmp_path, settings):
    root = tmp_path / "packages"
    root.mkdir()
    settings.CEILING_KERNEL_PACKAGES_DIR = str(root)
    return root


def _flagship_copy(root, old, new):
    dest = root / "sparse_mla_decode"
    shutil.copytree(REAL_PACKAGES / "sparse_mla_decode", dest,
                    ignore=shutil.ignore_patterns("results", "__pycache__", "tuning"))
    manifest = dest / "manifest.toml"
    text = manifest.read_text()
    assert old in text
    manifest.write_text(text.replace(old, new, 1))
    return dest


@pytest.mark.django_db
@pytest.mark.parametrize("field, formula, message", [
    ("flops", "max(batch, 1e999)", "cost.flops: 'max(batch, 1e999)': the constant 1e999 is not a finite number"),
    ("bytes", "(batch - 100) ** 0.5 + batch * topk",
     "cost.bytes: shape v4-flash batch 1: '(batch - 100) ** 0.5 + batch * topk': (-99) ** 0.5: a negative "
     "number raised to a fractional power is not a real number"),
])
def test_kernel_register_refuses_the_formula_with_its_usual_error_lines(packages_dir, field, formula, message):
    from kernels.models import KernelPackage

    text = (REAL_PACKAGES / "sparse_mla_decode" / "manifest.toml").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(f"{field} = "))
    d = _flagship_copy(packages_dir, line, f'{field} = "{formula}"')
    err = StringIO()
    with pytest.raises(CommandError, match=r"1 package\(s\) refused"):
        call_command("kernel_register", str(d), stdout=StringIO(), stderr=err)
    assert f"{d}: manifest.{message}" in err.getvalue(), err.getvalue()
    assert not KernelPackage.objects.filter(name="sparse_mla_decode").exists()


@pytest.mark.django_db
def test_kernel_register_warns_when_the_constraints_leave_no_variant(packages_dir):
    from kernels.models import KernelPackage

    d = write_package(packages_dir, manifest=TEST_MANIFEST.replace('"BLOCK * num_warps <= 256"', '"BLOCK > 64"'))
    out, err = StringIO(), StringIO()
    call_command("kernel_register", str(d), stdout=out, stderr=err)
    assert "toy_attn: triton, 0 variants of 12 combinations (12 pruned by constraints)" in out.getvalue()
    warning = err.getvalue()
    assert ("toy_attn: warning: the constraints leave no variant of 12 combinations; no job can run on this "
            "package (#0 \"impl != 'baseline' or BLOCK == 16\" pruned 4; #1 'BLOCK > 64' pruned 8)") in warning
    # Registered all the same: the package page shows what each constraint pruned.
    assert KernelPackage.objects.filter(name="toy_attn").exists()

    write_package(packages_dir)  # the original constraints: 7 variants, no warning
    out, err = StringIO(), StringIO()
    call_command("kernel_register", str(d), stdout=out, stderr=err)
    assert "7 variants of 12" in out.getvalue() and "warning" not in err.getvalue()


@pytest.mark.django_db
def test_kernel_register_warns_when_a_constraint_cannot_be_evaluated(packages_dir):
    text = (TEST_MANIFEST.replace("num_warps = [4, 8]", 'num_warps = [4, "auto"]')
            .replace('"BLOCK * num_warps <= 256"', '"num_warps > 2"'))
    d = write_package(packages_dir, manifest=text)
    err = StringIO()
    call_command("kernel_register", str(d), stdout=StringIO(), stderr=err)
    assert ("toy_attn: warning: the grid cannot be expanded: grid.constraints.1: 'num_warps > 2': cannot order str "
            "against int for impl=baseline,BLOCK=16,num_warps=auto; no job can run on this package") in err.getvalue()
