"""The runner's safe expression evaluator: what manifests may write, and what is refused."""
import pytest

from kernels.runner.expr import ExprError, check, evaluate


def test_it_evaluates_cost_formulas_with_integer_arithmetic():
    assert evaluate("2 * batch * heads * topk * (d_qk + d_v)", {"batch": 3, "heads": 4, "topk": 5,
                                                                 "d_qk": 6, "d_v": 7}) == 2 * 3 * 4 * 5 * 13
    assert evaluate("cdiv(topk, 32) * 32", {"topk": 33}) == 64
    assert evaluate("max(a, b) - min(a, b) + abs(-2) + a // b + a % b", {"a": 7, "b": 2}) == 5 + 2 + 3 + 1


def test_it_evaluates_grid_constraints_with_strings_and_booleans():
    names = {"impl": "baseline", "BLOCK_H": 16, "NUM_SPLITS": "auto"}
    assert evaluate("impl != 'baseline' or (BLOCK_H == 16 and NUM_SPLITS == 'auto')", names) is True
    assert evaluate("impl == 'split_k' or NUM_SPLITS == 'auto'", names) is True
    assert evaluate("BLOCK_H in (32, 64)", names) is False
    assert evaluate("1 < BLOCK_H <= 16", names) is True
    assert evaluate("'x' if not BLOCK_H else 'y'", names) == "y"


@pytest.mark.parametrize("text, reason", [
    ("__import__('os').system('true')", "may be called"),
    ("batch.__class__", "Attribute"),
    ("[x for x in range(3)]", "ListComp"),
    ("lambda: 1", "Lambda"),
    ("d[0]", "Subscript"),
])
def test_it_refuses_anything_outside_the_whitelist(text, reason):
    with pytest.raises(ExprError, match=reason):
        check(text, {"batch", "d"})
    with pytest.raises(ExprError):
        evaluate(text, {"batch": 1, "d": (1,)})


def test_it_names_unknown_variables_and_arithmetic_errors():
    with pytest.raises(ExprError, match="unknown name 'heads'"):
        evaluate("heads * 2", {})
    with pytest.raises(ExprError, match="division by zero"):
        evaluate("1 / batch", {"batch": 0})
    with pytest.raises(ExprError, match="exponent"):
        evaluate("2 ** 100000", {})
    with pytest.raises(ExprError, match="not one of"):
        check("batch * headz", {"batch", "heads"})
    with pytest.raises(ExprError, match="cannot parse"):
        evaluate("batch *", {"batch": 1})
