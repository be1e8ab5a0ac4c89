"""A small, safe expression evaluator for manifest constraints and cost formulas.

Manifests hold expressions such as ``impl != 'baseline' or BLOCK_H == 16`` (grid constraints) and
``2 * batch * heads * topk * (d_qk + d_v)`` (cost formulas). They come from package authors, so
they are parsed with :mod:`ast` and walked over a whitelist instead of being passed to ``eval``:
numbers, strings, booleans, names bound by the caller, arithmetic (``+ - * / // % **``), unary
``- + not``, comparisons (including ``in``/``not in`` over a literal tuple or list), ``and``/``or``,
``x if c else y`` and the functions ``min``, ``max``, ``abs``, ``ceil``, ``floor``, ``cdiv``.
Anything else (attributes, subscripts, other calls, lambdas, comprehensions) is refused with
:class:`ExprError` naming the construct.

Numbers follow the rules of the control plane's :mod:`kernels.safeexpr` (shared from there, no
Django involved): every constant, bound value and result is real, finite and at most
``MAX_ABS_VALUE`` (1e30) in magnitude, and ``**`` takes an exponent of at most ``MAX_POWER`` (64)
and no fractional power of a negative number.
"""
from __future__ import annotations

import ast
import math
import operator

from ..safeexpr import number_problem, power_problem

__all__ = ["ExprError", "evaluate", "check"]


class ExprError(ValueError):
    """An expression that does not parse, uses a construct outside the whitelist, names an unknown
    variable or fails to evaluate (e.g. division by zero). The message carries the reason."""


_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_FUNCS = {
    "min": min, "max": max, "abs": abs, "ceil": math.ceil, "floor": math.floor,
    "cdiv": lambda a, b: -(-a // b),
}


def _parse(text: str) -> ast.Expression:
    if not isinstance(text, str):
        raise ExprError(f"expression must be a string, got {type(text).__name__}")
    if len(text) > 1000:
        raise ExprError("expression longer than 1000 characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"cannot parse {text!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            problem = number_problem(node.value)
            if problem:
                raise ExprError(f"{text!r}: the constant {ast.get_source_segment(text, node)} {problem}")
    return tree


def _number(value, node: ast.AST):
    """``value`` (the result of ``node``) when :func:`kernels.safeexpr.number_problem` accepts it."""
    problem = number_problem(value)
    if problem:
        raise ExprError(f"{ast.unparse(node)} gives {value!r}, which {problem}")
    return value


def _eval(node: ast.AST, names: dict):
    if isinstance(node, ast.Expression):
        return _eval(node.body, names)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (int, float, str, bool)):
            return node.value
        raise ExprError(f"constant {node.value!r} is not allowed")
    if isinstance(node, ast.Name):
        if node.id in names:
            value = names[node.id]
            problem = number_problem(value)
            if problem:
                raise ExprError(f"the value of {node.id} ({value!r}) {problem}")
            return value
        if node.id in ("True", "False"):
            return node.id == "True"
        raise ExprError(f"unknown name {node.id!r}")
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_eval(e, names) for e in node.elts)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left, names), _eval(node.right, names)
        if isinstance(node.op, ast.Pow):
            problem = power_problem(left, right)
            if problem:
                raise ExprError(f"{ast.unparse(node)}: {problem}")
        try:
            return _number(_BINOPS[type(node.op)](left, right), node)
        except (ArithmeticError, TypeError) as exc:
            raise ExprError(f"{ast.unparse(node)}: {exc}") from None
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, names)
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return +value
        if isinstance(node.op, ast.Not):
            return not value
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            result = True
            for value in node.values:
                result = _eval(value, names)
                if not result:
                    return result
            return result
        result = False
        for value in node.values:
            result = _eval(value, names)
            if result:
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names)
        for op, comparator in zip(node.ops, node.comparators):
            if type(op) not in _CMPOPS:
                break
            right = _eval(comparator, names)
            try:
                if not _CMPOPS[type(op)](left, right):
                    return False
            except TypeError as exc:
                raise ExprError(f"{ast.unparse(node)}: {exc}") from None
            left = right
        else:
            return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, names) if _eval(node.test, names) else _eval(node.orelse, names)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS \
            and not node.keywords:
        args = [_eval(a, names) for a in node.args]
        try:
            return _number(_FUNCS[node.func.id](*args), node)
        except ExprError:
            raise
        except (ArithmeticError, TypeError, ValueError) as exc:
            raise ExprError(f"{ast.unparse(node)}: {exc}") from None
    raise ExprError(f"{type(node).__name__} is not allowed in an expression ({ast.unparse(node)!r})")


def evaluate(text: str, names: dict):
    """Evaluate the expression ``text`` with the variables ``names`` (a mapping of identifier to
    int, float, str or bool). Pure: no side effects. Raises :class:`ExprError` with the reason on
    anything the whitelist refuses or that fails to evaluate, naming ``text``."""
    tree = _parse(text)
    try:
        return _eval(tree, names)
    except ExprError as exc:
        raise ExprError(f"{text!r}: {exc}") from None


def check(text: str, allowed: set[str]) -> None:
    """Raise :class:`ExprError` unless ``text`` parses, uses only whitelisted constructs and names
    only identifiers in ``allowed`` (checked without evaluating, so no values are needed)."""
    tree = _parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in allowed and node.id not in _FUNCS \
                and node.id not in ("True", "False"):
            raise ExprError(f"{text!r} names {node.id!r}, which is not one of {sorted(allowed)}")
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Lambda, ast.ListComp, ast.DictComp,
                             ast.SetComp, ast.GeneratorExp, ast.Starred, ast.Dict, ast.Set,
                             ast.NamedExpr, ast.JoinedStr, ast.Await, ast.Yield)):
            raise ExprError(f"{type(node).__name__} is not allowed in an expression ({text!r})")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCS):
            raise ExprError(f"only {', '.join(sorted(_FUNCS))} may be called ({text!r})")
