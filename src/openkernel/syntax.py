"""Python source parsed one thread at a time.

CPython 3.11 keeps the AST constructor's recursion depth in per-interpreter state, so two
threads parsing at once (the engine's generators, sweeps and checks run in threads) can fail
with ``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905, seen in
CI as an engine "internal error"). Every ``ast.parse`` of this package goes through here.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """``ast.parse`` under the process's one parse lock."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)
