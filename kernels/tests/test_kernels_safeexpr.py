"""The manifest expression language (kernels.safeexpr): what it evaluates, and what it refuses
with a clear reason instead of evaluating."""
import pytest

from kernels.safeexpr import ExpressionError, expr_compile, expr_evaluate


def test_it_evaluates_arithmetic_comparisons_and_boolean_logic():
    env = {"impl": "split_k", "BLOCK_H": 32, "num_stages": 3, "batch": 8, "topk": 640, "d_qk": 576}
    assert expr_evaluate("batch * topk * d_qk * 2", env) == 8 * 640 * 576 * 2
    assert expr_evaluate("(BLOCK_H + num_stages * 32) * 576 * 2 <= 232448", env) is True
    assert expr_evaluate("impl != 'baseline' or BLOCK_H == 16", env) is True
    assert expr_evaluate("impl in ('head_tiled', 'split_k') and not BLOCK_H > 64", env) is True
    assert expr_evaluate("impl not in ['baseline']", env) is True
    assert expr_evaluate("min(BLOCK_H, 16) + max(1, 2) ** 3 - 7 // 2 % 2", env) == 16 + 8 - 1
    assert expr_evaluate("topk / 4", env) == 160.0
    assert expr_evaluate("1 < BLOCK_H <= 32 < topk", env) is True


@pytest.mark.parametrize("text, reason", [
    ("__import__('os')", "only min() and max() may be called, not __import__()"),
    ("__import__('os').system('id')", "attribute access (__import__('os').system) is not allowed"),
    ("open('/etc/passwd')", "only min() and max() may be called, not open()"),
    ("batch.__class__", "attribute access"),
    ("().__class__.__bases__", "attribute access"),
    ("eval('1')", "not eval()"),
    ("(lambda: 1)()", "only min() and max() may be called"),
    ("x[0]", "subscripts"),
    ("[a for a in b]", "comprehensions"),
    ("f'{a}'", "f-strings"),
    ("a if b else c", "conditional expressions"),
    ("(y := 3)", "assignments"),
    ("max(*xs)", "positional arguments only"),
    ("min(a=1, b=2)", "positional arguments only"),
    ("a in b", "'in' needs a tuple or list literal"),
    ("a in (b, c)", "may hold constants only"),
    ("{'a': 1}", "dict literals"),
    ("a @ b", "operator"),
    ("a << 2", "operator"),
    ("__builtins__", "the name __builtins__ is not allowed"),
    ("None", "constant None is not allowed"),
    ("1 +", "is not a valid expression"),
    ("", "the expression is empty"),
])
def test_it_refuses_anything_outside_the_whitelist_with_the_reason(text, reason):
    with pytest.raises(ExpressionError) as err:
        expr_compile(text)
    assert reason in str(err.value)


def test_it_refuses_unknown_names_and_lists_the_allowed_ones():
    with pytest.raises(ExpressionError) as err:
        expr_compile("BLOCK_Q * 2", names={"BLOCK_H", "BLOCK_N"})
    assert "unknown name BLOCK_Q" in str(err.value) and "allowed names: BLOCK_H, BLOCK_N" in str(err.value)


def test_it_bounds_powers_and_magnitudes_so_a_formula_cannot_exhaust_memory():
    with pytest.raises(ExpressionError, match="exponent must be a number of at most 64"):
        expr_evaluate("2 ** 9 ** 9", {})
    with pytest.raises(ExpressionError, match="exceeds"):
        expr_evaluate("10 ** 40", {})
    with pytest.raises(ExpressionError, match="exceeds"):
        expr_evaluate("x * x * x", {"x": 10 ** 11})
    with pytest.raises(ExpressionError, match="too complex"):
        expr_compile("+".join(["a"] * 150))


def test_it_reports_evaluation_errors_instead_of_raising_python_errors():
    with pytest.raises(ExpressionError, match="division by zero"):
        expr_evaluate("batch / (topk - topk)", {"batch": 1, "topk": 4})
    with pytest.raises(ExpressionError, match="cannot order str against int"):
        expr_evaluate("NUM_SPLITS > 2", {"NUM_SPLITS": "auto"})
    with pytest.raises(ExpressionError, match="no value for batch"):
        expr_compile("batch * 2").evaluate({})
    assert expr_evaluate("NUM_SPLITS == 2", {"NUM_SPLITS": "auto"}) is False
