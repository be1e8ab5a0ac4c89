"""A small, safe expression language for kernel manifests: grid constraints and cost formulas.

Manifests are text written by people and stored in the database, and their expressions are
evaluated on the control plane, so they are never handed to ``eval``. :func:`expr_compile` parses
one expression with :mod:`ast` and accepts only this whitelist (anything else is an
:class:`ExpressionError` that names what was found and where):

* constants: ``int``, ``float``, ``str`` (``True``/``False`` too, as the result of comparisons);
* names bound at evaluation time (grid parameters, shape fields, ``batch``); an unknown name is
  refused when the allowed names are given at compile time;
* arithmetic ``+ - * / // % **`` and unary ``-``/``+``; ``**`` with an exponent of at most
  :data:`MAX_POWER`, so ``9 ** 9 ** 9`` cannot exhaust memory;
* comparisons ``== != < <= > >=`` (chained too), ``in``/``not in`` with a tuple or list literal
  of constants on the right;
* ``and``, ``or``, ``not``;
* calls of ``min`` and ``max`` with positional arguments only.

Attribute access, subscripts, calls of anything else (``__import__``, ``open``), lambdas,
comprehensions, f-strings, conditional expressions and walrus assignments are refused. Evaluation
walks the checked tree itself; no ``compile``/``eval`` is ever called. This module has no Django
imports so the kernel runner could reuse it.

Every number is real, finite and at most :data:`MAX_ABS_VALUE` in magnitude: the constants written
(``1e999`` reads as infinity and is refused when the expression is compiled), the values bound to
names, and the result of every operation and of ``min``/``max``. A negative number raised to a
fractional power (``(batch - 100) ** 0.5`` for ``batch < 100``) has no real value and is refused
before it is computed. Tiny magnitudes (``batch ** -64``) are finite and within the bound, so they
are accepted. :func:`number_problem` and :func:`power_problem` state these rules once. The
standalone kernel runner (:mod:`kernels.runner`) reads and evaluates manifests with this module
too, so a GPU node accepts exactly the expressions the control plane registered and evaluates them
the same way.
"""
from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Longest expression text accepted (characters); manifests hold one-line formulas.
MAX_LENGTH = 500
# Most AST nodes in one expression: bounds evaluation time.
MAX_NODES = 200
# Largest exponent of ``**``: cost formulas need squares and cubes, never 2 ** 1000.
MAX_POWER = 64
# Largest magnitude of any number (constant, bound name, intermediate or final value): byte and
# FLOP counts of real kernels stay far below 1e30.
MAX_ABS_VALUE = 1e30

Value = int | float | str | bool

_BINOPS: dict[type, Any] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_BINOP_TEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
               ast.Pow: "**"}
_CMPOPS: dict[type, Any] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_FUNCS = {"min": min, "max": max}

# Words for the nodes people are most likely to try, so the refusal says what was found.
_REFUSED_TEXT: dict[type, str] = {
    ast.Attribute: "attribute access", ast.Subscript: "subscripts", ast.Lambda: "lambdas",
    ast.ListComp: "comprehensions", ast.SetComp: "comprehensions", ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions", ast.JoinedStr: "f-strings", ast.IfExp: "conditional expressions",
    ast.NamedExpr: "assignments", ast.Starred: "star arguments", ast.Dict: "dict literals", ast.Set: "set literals",
    ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield",
}


class ExpressionError(ValueError):
    """An expression outside the whitelist, with an unknown name, or that failed to evaluate
    (division by zero, a number out of range, a type mismatch). The message names the expression
    and the reason."""


@dataclass(frozen=True)
class SafeExpr:
    """A checked expression: its source ``text``, the names it reads (``names``) and the parsed
    tree. Evaluate with :meth:`evaluate`."""

    text: str
    names: frozenset[str]
    tree: ast.Expression

    def evaluate(self, bindings: Mapping[str, Value]) -> Value:
        """Value of the expression with ``bindings`` for its names. Raises
        :class:`ExpressionError` for a missing name or an evaluation error."""
        missing = sorted(n for n in self.names if n not in bindings)
        if missing:
            raise ExpressionError(f"{self.text!r}: no value for {', '.join(missing)}")
        try:
            return _eval(self.tree.body, bindings, self.text)
        except ExpressionError:
            raise
        except ZeroDivisionError:
            raise ExpressionError(f"{self.text!r}: division by zero") from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise ExpressionError(f"{self.text!r}: {exc}") from None


def expr_compile(text: Any, *, names: set[str] | frozenset[str] | None = None) -> SafeExpr:
    """Parse and check ``text`` against the whitelist in the module docstring.

    ``names``: the names the expression may read; None accepts any name (checked at evaluation).
    Returns a :class:`SafeExpr`. Raises :class:`ExpressionError` naming the refused construct
    (``attribute access (os.path) is not allowed``, ``only min() and max() may be called, not
    __import__()``) or the unknown name together with the allowed ones.
    """
    if not isinstance(text, str):
        raise ExpressionError(f"an expression must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ExpressionError("the expression is empty")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"the expression is {len(text)} characters long; at most {MAX_LENGTH}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"{text!r} is not a valid expression: {exc.msg}") from None
    count = sum(1 for _ in ast.walk(tree))
    if count > MAX_NODES:
        raise ExpressionError(f"{text!r} is too complex ({count} parts; at most {MAX_NODES})")
    used: set[str] = set()
    _check(tree.body, text, used)
    if names is not None:
        unknown = sorted(used - set(names))
        if unknown:
            allowed = ", ".join(sorted(names)) or "none"
            raise ExpressionError(f"{text!r} uses unknown name{'s' if len(unknown) > 1 else ''} "
                                  f"{', '.join(unknown)}; allowed names: {allowed}")
    return SafeExpr(text=text, names=frozenset(used), tree=tree)


def expr_evaluate(text: str, bindings: Mapping[str, Value]) -> Value:
    """Compile ``text`` (names limited to ``bindings``) and evaluate it once."""
    return expr_compile(text, names=set(bindings)).evaluate(bindings)


def number_problem(value: Any) -> str | None:
    """Why ``value`` may not be a number of an expression, as a clause to follow its name
    (``"is not a finite number"``), or None when it may. Strings and booleans are never a problem.

    Refused: complex numbers (``**`` of a negative base to a fractional power), infinities and NaN
    (``1e999``, ``1e200 * 1e200``), and magnitudes above :data:`MAX_ABS_VALUE`. Values below it in
    magnitude, however small, are accepted.
    """
    if isinstance(value, (bool, str)):
        return None
    if isinstance(value, complex):
        return "is a complex number, not a real one"
    if isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number"
    if isinstance(value, (int, float)) and abs(value) > MAX_ABS_VALUE:
        return f"exceeds {MAX_ABS_VALUE:g} in magnitude"
    return None


def power_problem(base: Any, exponent: Any) -> str | None:
    """Why ``base ** exponent`` may not be computed, as a sentence, or None when it may (or when
    either side is not a number: the caller reports that type error itself).

    Refused before computing: an exponent above :data:`MAX_POWER` in magnitude; a negative base
    with a fractional exponent (the result would be complex); a result whose magnitude, estimated
    from logarithms, is well above :data:`MAX_ABS_VALUE` (the exact bound is checked on the result
    with :func:`number_problem`; the estimate only keeps floats from overflowing and integers from
    growing without need).
    """
    if isinstance(exponent, (bool, str)) or not isinstance(exponent, (int, float)) or not math.isfinite(exponent) \
            or abs(exponent) > MAX_POWER:
        return f"the exponent must be a number of at most {MAX_POWER} in magnitude, got {exponent!r}"
    if isinstance(base, (bool, str)) or not isinstance(base, (int, float)):
        return None
    power = f"({base!r}) ** {exponent!r}" if base < 0 else f"{base!r} ** {exponent!r}"
    if base < 0 and not float(exponent).is_integer():
        return f"{power}: a negative number raised to a fractional power is not a real number"
    if base != 0 and abs(base) != 1 and exponent * math.log10(abs(base)) > math.log10(MAX_ABS_VALUE) + 1:
        return f"{power} exceeds {MAX_ABS_VALUE:g} in magnitude"
    return None


def _source(node: ast.AST, text: str) -> str:
    try:
        return ast.get_source_segment(text.strip(), node) or type(node).__name__
    except Exception:  # noqa: BLE001 - only used to word an error
        return type(node).__name__


def _check(node: ast.AST, text: str, used: set[str]) -> None:
    """Refuse every node outside the whitelist; collect the names read into ``used``."""
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, str, bool)) or node.value is None:
            raise ExpressionError(f"{text!r}: constant {node.value!r} is not allowed (numbers and strings only)")
        problem = number_problem(node.value)
        if problem:
            raise ExpressionError(f"{text!r}: the constant {_source(node, text)} {problem}")
        return
    if isinstance(node, ast.Name):
        if node.id.startswith("__"):
            raise ExpressionError(f"{text!r}: the name {node.id} is not allowed")
        if node.id in _FUNCS:
            raise ExpressionError(f"{text!r}: {node.id} may only be called, e.g. {node.id}(a, b)")
        used.add(node.id)
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise ExpressionError(f"{text!r}: operator in {_source(node, text)!r} is not allowed "
                                  "(use + - * / // % **)")
        _check(node.left, text, used)
        _check(node.right, text, used)
        return
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            raise ExpressionError(f"{text!r}: unary operator in {_source(node, text)!r} is not allowed")
        _check(node.operand, text, used)
        return
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _check(value, text, used)
        return
    if isinstance(node, ast.Compare):
        _check(node.left, text, used)
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                if not isinstance(right, (ast.Tuple, ast.List)):
                    raise ExpressionError(f"{text!r}: 'in' needs a tuple or list literal on the right, "
                                          f"got {_source(right, text)!r}")
                for elt in right.elts:
                    if not isinstance(elt, ast.Constant):
                        raise ExpressionError(f"{text!r}: the list after 'in' may hold constants only")
                    _check(elt, text, used)
            elif type(op) in _CMPOPS:
                _check(right, text, used)
            else:
                raise ExpressionError(f"{text!r}: comparison {type(op).__name__} is not allowed "
                                      "(use == != < <= > >= in, not in)")
        return
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            raise ExpressionError(f"{text!r}: attribute access ({_source(func, text)}) is not allowed")
        if not isinstance(func, ast.Name):
            raise ExpressionError(f"{text!r}: only min() and max() may be called, not ({_source(func, text)})")
        name = func.id
        if name not in _FUNCS:
            raise ExpressionError(f"{text!r}: only min() and max() may be called, not {name}()")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise ExpressionError(f"{text!r}: {name}() takes positional arguments only")
        if len(node.args) < 2:
            raise ExpressionError(f"{text!r}: {name}() needs at least two arguments")
        for arg in node.args:
            _check(arg, text, used)
        return
    what = _REFUSED_TEXT.get(type(node), type(node).__name__)
    verb = "are" if what.endswith("s") and what != "attribute access" else "is"  # "lambdas are", "await is"
    raise ExpressionError(f"{text!r}: {what} ({_source(node, text)}) {verb} not allowed")


def _number(value: Any, text: str, node: ast.AST) -> Any:
    """``value`` (the result of ``node``) when :func:`number_problem` accepts it."""
    problem = number_problem(value)
    if problem:
        raise ExpressionError(f"{text!r}: {_source(node, text)} gives {value!r}, which {problem}")
    return value


def _eval(node: ast.AST, env: Mapping[str, Value], text: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        value = env[node.id]
        problem = number_problem(value)
        if problem:
            raise ExpressionError(f"{text!r}: the value of {node.id} ({value!r}) {problem}")
        return value
    if isinstance(node, ast.BinOp):
        left = _eval(node.left, env, text)
        right = _eval(node.right, env, text)
        if isinstance(node.op, ast.Pow):
            problem = power_problem(left, right)
            if problem:
                raise ExpressionError(f"{text!r}: {problem}")
        if isinstance(left, str) or isinstance(right, str):
            if not (isinstance(node.op, ast.Add) and isinstance(left, str) and isinstance(right, str)):
                raise ExpressionError(f"{text!r}: cannot apply {_BINOP_TEXT[type(node.op)]} to "
                                      f"{type(left).__name__} and {type(right).__name__}")
            return left + right
        return _number(_BINOPS[type(node.op)](left, right), text, node)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env, text)
        if isinstance(node.op, ast.Not):
            return not value
        if isinstance(value, str):
            raise ExpressionError(f"{text!r}: cannot negate a string")
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            result: Any = True
            for value_node in node.values:
                result = _eval(value_node, env, text)
                if not result:
                    return result
            return result
        result = False
        for value_node in node.values:
            result = _eval(value_node, env, text)
            if result:
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, text)
        for op, right_node in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                items = [e.value for e in right_node.elts]  # type: ignore[attr-defined]
                ok = left in items
                if isinstance(op, ast.NotIn):
                    ok = not ok
                right = None
            else:
                right = _eval(right_node, env, text)
                if type(op) not in (ast.Eq, ast.NotEq) and (isinstance(left, str) != isinstance(right, str)):
                    raise ExpressionError(f"{text!r}: cannot order {type(left).__name__} against "
                                          f"{type(right).__name__}")
                ok = _CMPOPS[type(op)](left, right)
            if not ok:
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        args = [_eval(a, env, text) for a in node.args]
        return _number(_FUNCS[node.func.id](*args), text, node)  # type: ignore[attr-defined]
    raise ExpressionError(f"{text!r}: {type(node).__name__} is not allowed")  # unreachable after _check
