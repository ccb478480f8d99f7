"""Elementwise activations: aten op -> Triton and CUDA expressions, with scalar parameters.

Expressions read ``x`` (float32) and the parameter names; the kernel computes in float32 and
stores the output dtype. Parameters travel as runtime scalars so that a constructor argument
(``nn.LeakyReLU(negative_slope)``) needs no recompile.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from openkernel.generators.refparse import Reference, Value


def _tanh_tl(z: str) -> str:
    # tl has no tanh on every backend (the interpreter included); 2*sigmoid(2z)-1 is exact math
    # and saturates cleanly to +-1 where exp overflows.
    return f"(2.0 * tl.sigmoid(2.0 * ({z})) - 1.0)"


_SOFTPLUS_TL = "tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))"
_SOFTPLUS_CU = "(x > 20.f ? x : log1pf(expf(x)))"


@dataclass(frozen=True)
class Param:
    """A scalar argument: keyword name, default, position in the functional call (tensor = 0)."""

    name: str
    default: float | str
    fn_pos: int


@dataclass(frozen=True)
class Activation:
    """One activation the elementwise and matmul families can apply."""

    name: str
    aten: str  # aten base name, e.g. "leaky_relu"
    callables: frozenset[str]  # names in the reference's source (functional, method, module)
    triton: str
    cuda: str
    params: tuple[Param, ...] = ()


@dataclass
class BoundActivation:
    """An activation with its parameters resolved from one reference."""

    act: Activation
    values: dict[str, Value] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.act.name

    def act_param_names(self) -> list[str]:
        return [p.name for p in self.act.params]

    def triton_params(self) -> str:
        """Kernel parameters, each followed by ", " (empty without scalars)."""
        return "".join(f"{name}, " for name in self.act_param_names())

    def describe(self) -> str:
        args = ", ".join(f"{k}={v.source()}" for k, v in self.values.items())
        return f"{self.act.name}({args})" if args else self.act.name


def _a(name, aten, callables, triton, cuda, params=()):
    return Activation(name, aten, frozenset(callables), triton, cuda, tuple(params))


ACTIVATIONS: tuple[Activation, ...] = (
    _a("relu", "relu", {"relu", "ReLU", "relu_"}, "tl.maximum(x, 0.0)", "fmaxf(x, 0.f)"),
    _a("gelu", "gelu", {"gelu", "GELU"}, "0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))",
       "0.5f * x * (1.f + erff(x * 0.70710678118654752f))"),
    _a("gelu_tanh", "gelu", set(),
       "0.5 * x * (1.0 + " + _tanh_tl("0.7978845608028654 * (x + 0.044715 * x * x * x)") + ")",
       "0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)))"),
    _a("silu", "silu", {"silu", "SiLU"}, "x * tl.sigmoid(x)", "x / (1.f + expf(-x))"),
    _a("sigmoid", "sigmoid", {"sigmoid", "Sigmoid"}, "tl.sigmoid(x)", "1.f / (1.f + expf(-x))"),
    _a("tanh", "tanh", {"tanh", "Tanh"}, _tanh_tl("x"), "tanhf(x)"),
    _a("leaky_relu", "leaky_relu", {"leaky_relu", "LeakyReLU"},
       "tl.where(x >= 0.0, x, x * negative_slope)", "(x >= 0.f ? x : x * negative_slope)",
       [Param("negative_slope", 0.01, 1)]),
    _a("selu", "elu", {"selu", "SELU"},
       "1.0507009873554805 * tl.where(x > 0.0, x, 1.6732632423543772 * (tl.exp(x) - 1.0))",
       "1.0507009873554805f * (x > 0.f ? x : 1.6732632423543772f * expm1f(x))"),
    _a("elu", "elu", {"elu", "ELU"}, "tl.where(x > 0.0, x, alpha * (tl.exp(x) - 1.0))",
       "(x > 0.f ? x : alpha * expm1f(x))", [Param("alpha", 1.0, 1)]),
    _a("relu6", "hardtanh", {"relu6", "ReLU6"}, "tl.minimum(tl.maximum(x, 0.0), 6.0)",
       "fminf(fmaxf(x, 0.f), 6.f)"),
    _a("hardtanh", "hardtanh", {"hardtanh", "Hardtanh"},
       "tl.minimum(tl.maximum(x, min_val), max_val)", "fminf(fmaxf(x, min_val), max_val)",
       [Param("min_val", -1.0, 1), Param("max_val", 1.0, 2)]),
    _a("softplus", "softplus", {"softplus", "Softplus"},
       "tl.where(x * beta > threshold, x, tl.log(1.0 + tl.exp(x * beta)) / beta)",
       "(x * beta > threshold ? x : log1pf(expf(x * beta)) / beta)",
       [Param("beta", 1.0, 1), Param("threshold", 20.0, 2)]),
    _a("mish", "mish", {"mish", "Mish"}, "x * " + _tanh_tl(_SOFTPLUS_TL),
       f"x * tanhf({_SOFTPLUS_CU})"),
    _a("hardsigmoid", "hardsigmoid", {"hardsigmoid", "Hardsigmoid"},
       "tl.minimum(tl.maximum(x / 6.0 + 0.5, 0.0), 1.0)", "fminf(fmaxf(x / 6.f + 0.5f, 0.f), 1.f)"),
    _a("hardswish", "hardswish", {"hardswish", "Hardswish"},
       "x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0",
       "x * fminf(fmaxf(x + 3.f, 0.f), 6.f) / 6.f"),
)
BY_NAME = {a.name: a for a in ACTIVATIONS}
ATEN_NAMES = {a.aten for a in ACTIVATIONS}


def aten_base(op: str) -> str:
    """``aten.gelu.default`` -> ``gelu``; ``aten._softmax.default`` -> ``_softmax``."""
    parts = op.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else op


def bind(aten: str, ref: Reference | None) -> BoundActivation | str:
    """Pick the activation for one aten op and resolve its parameters from the reference.

    Returns a plain reason (str) when the reference's arguments cannot be determined.
    """
    candidates = [a for a in ACTIVATIONS if a.aten == aten]
    if not candidates:
        return f"no activation for aten.{aten}"
    act = next((a for a in candidates if a.name == aten), candidates[0])
    if ref is not None:
        # Several activations share one aten op (elu/selu, hardtanh/relu6, gelu/gelu_tanh):
        # the name the reference calls decides.
        called = [a for a in candidates if a.callables and ref.calls(set(a.callables))]
        if len(called) == 1:
            act = called[0]
        elif len(called) > 1:
            return f"the reference calls several of {', '.join(a.name for a in called)}"
    if act.name == "gelu" and ref is not None:
        mode = ref.scalar(set(act.callables), "approximate", 1, "none")
        if mode is None or mode.init_param:
            return "cannot tell gelu's approximate= mode from the reference"
        if mode.const == "tanh":
            return BoundActivation(BY_NAME["gelu_tanh"])
    bound = BoundActivation(act)
    for param in act.params:
        value = (ref.scalar(set(act.callables), param.name, param.fn_pos, param.default)
                 if ref is not None else Value(const=param.default))
        if value is None:
            return f"cannot determine {act.name}'s {param.name} from the reference"
        bound.values[param.name] = value
    return bound
