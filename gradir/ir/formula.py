"""The formula language of element-wise ops (``Op.FORMULA``, ``Op.VJP``), defined once.

A formula is a Python expression over names (an op's operands and attributes; in a ``VJP`` also
``dY`` and ``Y``), numbers, the operators ``+ - * / **``, unary ``-``/``+``, the comparisons
``< <= > >= == !=`` (for ``where``), and the functions of ``FUNCTIONS``.  Every implementation is
derived from the one entry a function has here:

* ``evaluate``: NumPy, on arrays of any dtype (float64 for references; in an array's own dtype
  for the generated NumPy kernels: numbers and attributes are rounded to it first);
* ``scalar_source``: numba/``math`` source for one element (the fused loops and the generated
  compiled kernels, ``gradir.backends.cpu.kernels.fused_codegen``);
* ``Function.transcendental``: numba compiles such a function to a libm call per element, which
  neither vectorizes nor rounds as NumPy's SIMD code does: the fusion pass keeps ops that call one
  out of fused groups unless their kernel is the same loop (a generated kernel) or provides its own
  element function.

``check`` validates a formula when an op class is defined (``OpDefinitionError`` naming the op and
its file): no other syntax, no unknown name, each function with its number of arguments.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping, Optional

import numpy as np

from ..errors import Diagnostic, OpDefinitionError, Span

__all__ = ["Function", "FUNCTIONS", "check", "fail", "describe", "evaluate", "free_names", "calls", "is_transcendental",
           "scalar_source"]


def _erf(x: Any) -> Any:
    from scipy.special import erf
    return erf(x)


def _sigmoid(x: Any) -> Any:
    return 1 / (1 + np.exp(-x))


# A scalar translation takes the translated argument nodes and ``const`` (a float -> the node of
# that constant rounded to the loop's dtype) and returns the node computing the function.
Scalar = Callable[[list, Callable[[float], ast.expr]], ast.expr]


def _call(fn: str) -> Scalar:
    return lambda args, const: ast.Call(ast.Name(fn, ast.Load()), list(args), [])


def _where(args: list, const: Callable[[float], ast.expr]) -> ast.expr:
    return ast.IfExp(test=args[0], body=args[1], orelse=args[2])


def _not(args: list, const: Callable[[float], ast.expr]) -> ast.expr:
    return ast.UnaryOp(ast.Not(), args[0])


def _and(args: list, const: Callable[[float], ast.expr]) -> ast.expr:
    return ast.BoolOp(ast.And(), list(args))


def _sigmoid_scalar(args: list, const: Callable[[float], ast.expr]) -> ast.expr:
    e = ast.Call(ast.Name("math.exp", ast.Load()), [ast.UnaryOp(ast.USub(), args[0])], [])
    return ast.BinOp(const(1.0), ast.Div(), ast.BinOp(const(1.0), ast.Add(), e))


def _pick(op: ast.cmpop) -> Scalar:
    """NumPy's ``maximum``/``minimum`` for one element: ``a`` when it wins or is NaN, else ``b``
    (so NaN propagates from either side, and of two equal zeros the second is the result)."""
    def build(args: list, const: Callable[[float], ast.expr]) -> ast.expr:
        a, b = args
        test = ast.BoolOp(ast.Or(), [ast.Compare(a, [op], [b]), ast.Compare(a, [ast.NotEq()], [a])])
        return ast.IfExp(test=test, body=a, orelse=b)
    return build


@dataclass(frozen=True)
class Function:
    """One function (or constant, ``arity`` None) of the formula language."""

    name: str
    numpy: Any  # the NumPy implementation (a callable), or the constant's value
    arity: Optional[int]
    scalar: Optional[Scalar]  # builds the numba expression of one element (None: a constant)
    transcendental: bool = False  # one libm call per element when compiled (see the module docstring)
    doc: str = ""


def _fn(name: str, numpy: Any, arity: int, scalar: Scalar, transcendental: bool, doc: str) -> Function:
    return Function(name, numpy, arity, scalar, transcendental, doc)


FUNCTIONS: dict[str, Function] = {f.name: f for f in [
    _fn("exp", np.exp, 1, _call("math.exp"), True, "e to the power x"),
    _fn("log", np.log, 1, _call("math.log"), True, "natural logarithm"),
    _fn("log1p", np.log1p, 1, _call("math.log1p"), True, "log(1 + x), accurate near 0"),
    _fn("expm1", np.expm1, 1, _call("math.expm1"), True, "exp(x) - 1, accurate near 0"),
    _fn("tanh", np.tanh, 1, _call("math.tanh"), True, "hyperbolic tangent"),
    _fn("sin", np.sin, 1, _call("math.sin"), True, "sine"),
    _fn("cos", np.cos, 1, _call("math.cos"), True, "cosine"),
    _fn("sqrt", np.sqrt, 1, _call("math.sqrt"), True, "square root (NaN below 0)"),
    _fn("erf", _erf, 1, _call("math.erf"), True, "the error function"),
    _fn("sigmoid", _sigmoid, 1, _sigmoid_scalar, True, "1 / (1 + exp(-x))"),
    _fn("abs", np.abs, 1, _call("abs"), False, "absolute value"),
    _fn("where", np.where, 3, _where, False, "a where c holds, else b"),
    _fn("maximum", np.maximum, 2, _pick(ast.Gt()), False, "the larger of a and b (NaN if either is)"),
    _fn("minimum", np.minimum, 2, _pick(ast.Lt()), False, "the smaller of a and b (NaN if either is)"),
    _fn("logical_not", np.logical_not, 1, _not, False, "true where x is false (Bool)"),
    _fn("logical_and", np.logical_and, 2, _and, False, "true where a and b are (Bool)"),
    _fn("zeros_like", np.zeros_like, 1, lambda args, const: const(0.0), False, "0 (of x's shape)"),
    Function("pi", math.pi, None, None, False, "the constant pi"),
]}

_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)
_UNARY = (ast.USub, ast.UAdd)
_COMPARE = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)


def fail(where: str, message: str, filename: Optional[str] = None, line: Optional[int] = None) -> OpDefinitionError:
    """The ``OpDefinitionError`` for ``message`` about ``where`` (e.g. ``"op Softsign: FORMULA"``),
    located at ``filename``:``line`` when known."""
    span = Span(line, 1, 2) if line and filename else None
    return OpDefinitionError(Diagnostic(f"{where}: {message}", span, None, filename))


@lru_cache(maxsize=None)
def _parse(text: str) -> ast.Expression:
    return ast.parse(text, mode="eval")


def _problems(tree: ast.Expression, names: set[str]) -> Iterable[str]:
    """What is wrong with a parsed formula, in words (nothing when it is well-formed)."""
    for node in ast.walk(tree.body):
        if isinstance(node, ast.Name):
            if node.id not in names and node.id not in FUNCTIONS:
                known = sorted(names)
                yield (f"unknown name '{node.id}' (it may use {', '.join(known) if known else 'no names'} and the "
                       f"functions {', '.join(sorted(FUNCTIONS))})")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                yield f"constant {node.value!r} is not a number"
        elif isinstance(node, ast.Call):
            f = node.func.id if isinstance(node.func, ast.Name) else None
            fn = FUNCTIONS.get(f) if f is not None and f not in names else None
            if fn is None or fn.arity is None:
                yield f"'{ast.unparse(node.func)}' is not a function of the formula language"
            elif node.keywords or len(node.args) != fn.arity or any(isinstance(a, ast.Starred) for a in node.args):
                yield f"{f}() takes {fn.arity} argument{'s' if fn.arity != 1 else ''}: {ast.unparse(node)}"
        elif isinstance(node, ast.BinOp):
            if not isinstance(node.op, _BINOPS):
                yield f"operator {type(node.op).__name__} is not part of the formula language (+ - * / **)"
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, _UNARY):
                yield f"unary operator {type(node.op).__name__} is not part of the formula language (-x, +x)"
        elif isinstance(node, ast.Compare):
            if not all(isinstance(o, _COMPARE) for o in node.ops):
                yield "only the comparisons < <= > >= == != are part of the formula language"
        elif isinstance(node, ast.expr):
            yield f"'{ast.unparse(node)}' is not part of the formula language"
    for node in ast.walk(tree.body):  # a function used as a value, e.g. ``exp + 1``
        if isinstance(node, ast.Name) and node.id in FUNCTIONS and node.id not in names \
                and FUNCTIONS[node.id].arity is not None and not _called(tree, node):
            yield f"function '{node.id}' is used without calling it"


def _called(tree: ast.Expression, name: ast.Name) -> bool:
    return any(isinstance(n, ast.Call) and n.func is name for n in ast.walk(tree.body))


def check(text: object, names: Iterable[str], *, where: str = "formula", filename: Optional[str] = None,
          line: Optional[int] = None) -> None:
    """Raise ``OpDefinitionError`` unless ``text`` is a formula over ``names`` and ``FUNCTIONS``.

    ``where`` starts the message (e.g. ``"op Softsign: FORMULA"``); ``filename`` and ``line`` locate
    it (the file and line that define the op)."""
    if not isinstance(text, str) or not text.strip():
        raise fail(where, f"must be a non-empty string (a formula), got {text!r}", filename, line)
    try:
        tree = _parse(text)
    except SyntaxError as e:
        raise fail(where, f"{text!r} is not a valid expression ({e.msg})", filename, line) from None
    problems = list(dict.fromkeys(_problems(tree, set(names))))
    if problems:
        raise fail(where, f"{text!r}: " + "; ".join(problems), filename, line)


def free_names(text: str) -> set[str]:
    """The names a formula reads, other than the language's functions and constants."""
    return {n.id for n in ast.walk(_parse(text).body) if isinstance(n, ast.Name) and n.id not in FUNCTIONS}


def calls(text: str) -> set[str]:
    """The language's functions (and constants) a formula uses."""
    return {n.id for n in ast.walk(_parse(text).body) if isinstance(n, ast.Name) and n.id in FUNCTIONS}


def is_transcendental(text: str) -> bool:
    """Whether the formula calls a function compiled to one libm call per element."""
    return any(FUNCTIONS[f].transcendental for f in calls(text))


class _Constants(ast.NodeTransformer):
    """Numbers become names bound to values of the evaluation dtype (``evaluate(dtype=...)``)."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        self.values.append(float(node.value))
        return ast.Name(f"_k{len(self.values) - 1}", ast.Load())


@lru_cache(maxsize=None)
def _code(text: str, typed: bool) -> tuple[Any, tuple[float, ...]]:
    tree = ast.parse(text, mode="eval")
    values: tuple[float, ...] = ()
    if typed:
        t = _Constants()
        tree = ast.fix_missing_locations(t.visit(tree))
        values = tuple(t.values)
    return compile(tree, "<formula>", "eval"), values


def evaluate(text: str, env: Mapping[str, Any], dtype: Any = None) -> Any:
    """The formula computed with NumPy on ``env`` (names -> arrays or numbers).

    With ``dtype``, numbers, attributes and ``pi`` are values of that dtype first, so the whole
    formula is computed in it (the generated NumPy kernels); without, NumPy's own promotion applies
    (float64 operands: the float64 references)."""
    code, values = _code(text, dtype is not None)
    scope: dict[str, Any] = {name: f.numpy for name, f in FUNCTIONS.items()}
    if dtype is not None:
        typ = np.dtype(dtype).type
        scope["pi"] = typ(math.pi)
        scope.update((f"_k{k}", typ(v)) for k, v in enumerate(values))
        scope.update((k, typ(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                     for k, v in env.items())
    else:
        scope.update(env)
    unknown = set(code.co_names) - set(scope)
    if unknown:
        raise ValueError(f"formula {text!r} uses unknown names {sorted(unknown)}")
    with np.errstate(all="ignore"):
        return eval(code, {"__builtins__": {}}, scope)  # noqa: S307 - formulas are checked op class data


class _Translate(ast.NodeTransformer):
    """A formula's AST with operands as locals, attributes and numbers as dtype constants."""

    def __init__(self, env: Mapping[str, str], attrs: Mapping[str, Any], const: Callable[[float], str]) -> None:
        self.env, self.attrs = env, attrs
        self.const = lambda v: ast.Name(const(v), ast.Load())

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.env:
            return ast.Name(self.env[node.id], ast.Load())
        if node.id in self.attrs:
            return self.const(float(self.attrs[node.id]))
        fn = FUNCTIONS.get(node.id)
        if fn is not None and fn.arity is None:
            return self.const(float(fn.numpy))
        raise ValueError(f"formula name {node.id!r} cannot be compiled")

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ValueError(f"formula constant {node.value!r} cannot be compiled")
        return self.const(float(node.value))

    def visit_Call(self, node: ast.Call) -> ast.AST:
        args = [self.visit(a) for a in node.args]
        f = node.func.id if isinstance(node.func, ast.Name) else None
        fn = FUNCTIONS.get(f) if f is not None else None
        if fn is None or fn.scalar is None or len(args) != fn.arity or node.keywords:
            raise ValueError(f"formula call {ast.unparse(node)!r} cannot be compiled")
        return fn.scalar(args, self.const)


def scalar_source(text: str, env: Mapping[str, str], attrs: Mapping[str, Any], const: Callable[[float], str]) -> str:
    """numba source computing one element of the formula: operand names become the locals
    ``env`` maps them to, attributes, numbers and constants the names ``const(value)`` returns
    (constants of the loop's dtype)."""
    return ast.unparse(_Translate(env, attrs, const).visit(_parse_fresh(text)))


def _parse_fresh(text: str) -> ast.Expression:
    return ast.parse(text, mode="eval")  # a fresh tree: the translation rewrites it


def describe() -> str:
    """The language in Markdown (for the docs): operators, then each function and constant."""
    lines = ["Operators: `+ - * / **`, unary `-` and `+`, comparisons `< <= > >= == !=` (for `where`); "
             "numbers; the op's operand and attribute names.", ""]
    for f in FUNCTIONS.values():
        params = {1: "x", 2: "a, b", 3: "c, a, b"}.get(f.arity or 0, "")
        head = f"`{f.name}`" if f.arity is None else f"`{f.name}({params})`"
        lines.append(f"- {head}: {f.doc}" + (" (one libm call per element when compiled)" if f.transcendental else ""))
    return "\n".join(lines) + "\n"
