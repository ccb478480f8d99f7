"""Sizes of a traced graph: an integer times a product of size symbols (``64*s1``).

The probe prints every symbolic size as Python over ``s0, s1, ...`` (the input dimensions).
Almost all are such products (a batch, ``s0*s1`` after a flatten); the rest (``s0 + 1``,
``(s0//2)``) become their own symbols, ``d0, d1, ...``, which the candidate's forward computes
once from the s's. Products then stay closed under multiplication and compare by value, which
is all the compiler needs: numels, row-major strides, broadcasting. (sympy would do it too, at
the cost of printing its results back into Triton.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod

_FACTOR = re.compile(r"^(?:\d+|[sd]\d+)$")
SYMBOL = re.compile(r"\b[sd]\d+\b")


@dataclass(frozen=True)
class Size:
    """``coeff * syms[0] * syms[1] * ...`` (syms sorted, repeated for powers)."""

    coeff: int = 1
    syms: tuple[str, ...] = ()

    @property
    def static(self) -> bool:
        return not self.syms

    def __mul__(self, other: "Size | int") -> "Size":
        other = other if isinstance(other, Size) else Size(int(other))
        return Size(self.coeff * other.coeff, tuple(sorted(self.syms + other.syms)))

    def code(self) -> str:
        """Python and Triton source: ``64*s1``, ``s0`` or ``4096``."""
        parts = ([str(self.coeff)] if self.coeff != 1 or not self.syms else []) + list(self.syms)
        return "*".join(parts)

    def atom(self) -> str:
        """``code()``, parenthesised when it is a product (safe inside any expression)."""
        text = self.code()
        return f"({text})" if "*" in text else text

    def __str__(self) -> str:
        return self.code()


ONE = Size(1)


def numel(shape) -> Size:
    out = ONE
    for s in shape:
        out = out * s
    return out


def non_one(shape) -> tuple[Size, ...]:
    return tuple(s for s in shape if s != ONE)


def row_major(shape) -> list[Size]:
    """The contiguous strides of ``shape``."""
    strides, acc = [], ONE
    for s in reversed(shape):
        strides.append(acc)
        acc = acc * s
    return list(reversed(strides))


class SizeTable:
    """Parses the trace's sizes; opaque expressions become ``d`` symbols with their definition."""

    def __init__(self) -> None:
        self.derived: dict[str, str] = {}  # "d0" -> "(s0//2)"
        self._by_text: dict[str, str] = {}

    def parse(self, value) -> Size:
        if isinstance(value, bool):
            raise ValueError(f"not a size: {value!r}")
        if isinstance(value, int):
            return Size(value)
        if isinstance(value, Size):
            return value
        text = str(value).replace(" ", "")
        factors = text.split("*")
        if all(_FACTOR.match(f) for f in factors):
            ints = [int(f) for f in factors if f.isdigit()]
            return Size(prod(ints), tuple(sorted(f for f in factors if not f.isdigit())))
        if text not in self._by_text:
            name = f"d{len(self.derived)}"
            self._by_text[text] = name
            self.derived[name] = str(value)
        return Size(1, (self._by_text[text],))

    def shape(self, values) -> tuple[Size, ...]:
        return tuple(self.parse(v) for v in values)
