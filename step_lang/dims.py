"""Stream and tile dimensions: static integers and sympy symbols.

A dimension is either a non-negative ``int`` (static) or a sympy expression over integer,
non-negative symbols (dynamic). Two kinds of symbol exist:

* a *regular* symbol (:func:`regular`) stands for one data-dependent value per stream, e.g. the
  number of tokens routed to an expert;
* a *ragged* symbol (:class:`RaggedSymbol`) may take a different value at every position, e.g. the
  length of each row of a ragged tensor.

The paper's absorbing rule is implemented by :func:`absorb`: an expression that combines a ragged
symbol with anything else is replaced by a fresh ragged symbol, because the product or sum of
position-dependent values has no closed form worth keeping.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import sympy as sp

__all__ = [
    "Dim",
    "RaggedSymbol",
    "absorb",
    "as_dim",
    "ceil_div",
    "dim_str",
    "dims_equal",
    "is_ragged",
    "is_static",
    "product",
    "ragged",
    "regular",
    "shape_str",
]

Dim = int | sp.Expr


class RaggedSymbol(sp.Symbol):
    """A dimension symbol whose value may differ from one position of the stream to the next."""

    def __new__(cls, name: str):
        return super().__new__(cls, name, integer=True, nonnegative=True)


#: A name: of a dynamic dim, a graph, a node, a tensor (``\Z``: ``$`` would let a final newline in).
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def regular(name: str) -> sp.Symbol:
    """A dynamic-regular dimension symbol (one value per stream)."""
    return sp.Symbol(name, integer=True, nonnegative=True)


def ragged(name: str) -> RaggedSymbol:
    """A ragged dimension symbol (one value per position)."""
    return RaggedSymbol(name)


def as_dim(value: object, *, what: str = "dimension") -> Dim:
    """Normalise a user-supplied dimension.

    ``int`` (or a sympy Integer) must be non-negative; ``str``, an identifier, makes a regular
    symbol (``"16"`` is no identifier: it would be a dynamic dim that prints as 16); sympy
    expressions are kept, but a sympy number must be an integer. Anything else raises
    ``TypeError``.
    """
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int or a sympy expression, not {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{what} must be non-negative, not {value}")
        return value
    if isinstance(value, str):
        if not IDENTIFIER.match(value):
            raise ValueError(
                f"{what} must be an int or an identifier naming a dynamic dim, not {value!r}"
            )
        return regular(value)
    if isinstance(value, sp.Expr):
        if value.is_Integer:
            return as_dim(int(value), what=what)
        if value.is_number:
            raise ValueError(f"{what} must be a whole number of elements, not {value}")
        return value
    raise TypeError(f"{what} must be an int or a sympy expression, not {value!r}")


def is_static(d: Dim) -> bool:
    """True if the dimension is a plain integer."""
    return isinstance(d, int)


def is_ragged(d: Dim) -> bool:
    """True if the dimension involves a ragged symbol."""
    return not isinstance(d, int) and any(isinstance(s, RaggedSymbol) for s in d.free_symbols)


def _simplify(expr: sp.Expr) -> Dim:
    """Sympy's automatic canonical form, as an int when constant (no costly ``simplify``)."""
    expr = sp.sympify(expr)
    if expr.is_Integer:
        return int(expr)
    return expr


def absorb(expr: Dim, fresh: Callable[[], RaggedSymbol]) -> Dim:
    """Apply the absorbing rule: a compound expression over a ragged symbol becomes ``fresh()``."""
    if isinstance(expr, int):
        return expr
    expr = _simplify(expr)
    if isinstance(expr, int) or not is_ragged(expr) or isinstance(expr, RaggedSymbol):
        return expr
    return fresh()


def product(dims: Iterable[Dim]) -> Dim:
    """The product of dimensions, as an int when all are static."""
    result: Dim = 1
    for d in dims:
        result = result * d
    return result if isinstance(result, int) else _simplify(result)


def ceil_div(d: Dim, s: int) -> Dim:
    """``ceil(d / s)`` for a positive static divisor."""
    if isinstance(d, int):
        return -(-d // s)
    return _simplify(sp.ceiling(d / s))


def dims_equal(a: Dim, b: Dim) -> bool | None:
    """``True``/``False`` when equality is decided, ``None`` when it depends on runtime values."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if a == b:
        return True
    diff = sp.expand(sp.sympify(a) - sp.sympify(b))
    if diff == 0:
        return True
    if diff.is_Integer:
        return False
    return None


def dim_str(d: Dim) -> str:
    """A compact rendering of one dimension."""
    return str(d)


def shape_str(shape: Iterable[Dim]) -> str:
    """Render a stream shape outermost-first, as in the paper: ``[1, D0, 4]``."""
    return "[" + ", ".join(dim_str(d) for d in shape) + "]"
