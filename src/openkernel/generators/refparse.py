"""Read what a kernel family needs from the reference's source: signatures and scalar arguments.

The probe tells us *which* aten ops run, not their scalar arguments (a leaky_relu slope, a
softmax dim, gelu's approximate mode). Those come from the reference's syntax tree. A value is
either a constant or the name of a constructor parameter, which the candidate then receives the
same way the reference does (``ModelNew`` copies ``Model.__init__``'s signature).
Nothing here executes the reference.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from openkernel import syntax

# Namespaces whose calls are the functional form (tensor first): torch.softmax, F.softmax.
_FUNCTIONAL_OWNERS = {"torch", "F", "nn.functional", "torch.nn.functional", "functional", "fn"}


@dataclass(frozen=True)
class Value:
    """A resolved scalar: ``const`` holds the literal, ``init_param`` a constructor parameter."""

    const: object = None
    init_param: str | None = None

    def source(self) -> str:
        """Python source that evaluates to this value inside ``ModelNew.__init__``."""
        return self.init_param if self.init_param else repr(self.const)


@dataclass
class Reference:
    """The parts of a KernelBench reference a kernel family reuses."""

    tree: ast.Module
    init_signature: str = ""  # parameters after self, verbatim: "negative_slope: float = 0.01"
    init_params: list[str] = field(default_factory=list)
    forward_args: list[str] = field(default_factory=list)  # after self
    constants: str = ""  # module-level literal assignments (defaults may name them)
    self_attrs: dict[str, ast.expr] = field(default_factory=dict)  # self.X = expr in __init__
    module_names: dict[str, ast.expr] = field(default_factory=dict)

    def calls(self, names: set[str]) -> list[tuple[ast.Call, str]]:
        """Calls whose callee ends in one of ``names``, with their form (function|method|module)."""
        found = []
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name not in names:
                continue
            if name[:1].isupper():
                form = "module"
            elif isinstance(func, ast.Name) or _dotted(func.value) in _FUNCTIONAL_OWNERS:
                form = "function"
            else:
                form = "method"
            found.append((node, form))
        return found

    def arg(self, call: ast.Call, form: str, kw: str, fn_pos: int) -> ast.expr | None:
        """The node passed for parameter ``kw``; ``fn_pos`` counts the tensor as position 0."""
        for keyword in call.keywords:
            if keyword.arg == kw:
                return keyword.value
        pos = fn_pos if form == "function" else fn_pos - 1
        return call.args[pos] if 0 <= pos < len(call.args) else None

    def resolve(self, node: ast.expr | None, depth: int = 0) -> Value | None:
        """A constant or constructor parameter for ``node``; None when it cannot be known."""
        if node is None or depth > 5:
            return None
        try:
            return Value(const=ast.literal_eval(node))
        except (ValueError, TypeError, SyntaxError):
            pass
        if isinstance(node, ast.Name):
            if node.id in self.init_params:
                return Value(init_param=node.id)
            return self.resolve(self.module_names.get(node.id), depth + 1)
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "self"):
            return self.resolve(self.self_attrs.get(node.attr), depth + 1)
        return None

    def scalar(self, names: set[str], kw: str, fn_pos: int, default: object) -> Value | None:
        """The one value of ``kw`` across all calls to ``names``; None when they disagree."""
        values = set()
        for call, form in self.calls(names):
            node = self.arg(call, form, kw, fn_pos)
            value = Value(const=default) if node is None else self.resolve(node)
            if value is None:
                return None
            values.add(value)
        if len(values) > 1:
            return None
        return values.pop() if values else Value(const=default)


def _dotted(node: ast.expr) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _signature(fn: ast.FunctionDef) -> tuple[str, list[str]]:
    args = fn.args
    positional = args.posonlyargs + args.args
    params = [a.arg for a in positional[1:]] + [a.arg for a in args.kwonlyargs]
    if args.vararg:
        params.append(args.vararg.arg)
    if args.kwarg:
        params.append(args.kwarg.arg)
    # Defaults align to the end of the positional list, so dropping "self" keeps them right.
    copy = ast.arguments(posonlyargs=[], args=positional[1:], vararg=args.vararg,
                         kwonlyargs=args.kwonlyargs, kw_defaults=args.kw_defaults,
                         kwarg=args.kwarg, defaults=args.defaults)
    return ast.unparse(copy), params


def parse_reference(code: str) -> Reference | None:
    """Parse a KernelBench reference; None when it has no ``class Model``."""
    try:
        tree = syntax.parse(code)
    except SyntaxError:
        return None
    ref = Reference(tree=tree)
    constants = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            for target in node.targets:
                ref.module_names[target.id] = node.value
            try:
                ast.literal_eval(node.value)
                constants.append(ast.unparse(node))
            except (ValueError, TypeError, SyntaxError):
                pass
    ref.constants = "\n".join(constants)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return None
    for item in model.body:
        if not isinstance(item, ast.FunctionDef):
            continue
        if item.name == "__init__":
            ref.init_signature, ref.init_params = _signature(item)
            for stmt in ast.walk(item):
                if isinstance(stmt, ast.Assign):
                    for target in stmt.targets:
                        if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                                and target.value.id == "self"):
                            ref.self_attrs[target.attr] = stmt.value
        elif item.name == "forward":
            ref.forward_args = _signature(item)[1]
    return ref
