"""Elementwise kernels in CuPy's ufunc spirit: an op is one line of type signature and one line of body.

A signature names the op's parameters (official names) with a type token, outputs after ``->``::

    "self:T, other:T, alpha:T -> out:T"      T: the promoted compute dtype (plan["compute"])
                                              F: float_result(T) (ints and bool compute in float32)
                                              B: bool
                                              O: the output tensor's own dtype
                                              W: float64 (a host value the body needs unrounded:
                                                 a C float attribute, an element count)

A body is one C++ expression over those names (each variable already converted to its token's type),
or statements that assign ``r`` when the result needs more than one expression. Attributes of the op
(``mode``, ``approximate``) are compile-time constants with their official names, and every scalar
``x`` comes with ``has_x`` (false when an optional scalar is absent).

:func:`generate` turns one instantiation (dtypes, coalesced rank, index type) into a complete kernel:
a grid-stride loop, the generic strided index computation (row-major unravel of the output index,
one stride vector per operand, broadcast dimensions having stride 0), loads converted from each
tensor's storage dtype, the body in the compute type (fp16/bf16 in fp32), and a converted store.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.activation import LOWP as ACTIVATION_LOWP
from acl_rocm.kernels.activation import ROWS as ACTIVATION_ROWS
from acl_rocm.kernels.bitwise import ROWS as BITWISE_ROWS
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.lowp import LOWP_PRELUDE
from acl_rocm.kernels.pointwise_math import ROWS as POINTWISE_MATH_ROWS
from acl_rocm.kernels.pointwise_ternary import ROWS as TERNARY_ROWS
from acl_rocm.kernels.pointwise_ternary import VARIANTS as TERNARY_VARIANTS
from acl_rocm.kernels.prelude import PRELUDE

TOKENS: Final = frozenset({"T", "F", "B", "O", "W"})
MAX_RANK: Final = 8
BLOCK_THREADS: Final = 256
UNROLL: Final = 4
"""Elements each thread takes per trip of the grid-stride loop (at least; see :func:`unroll_for`)."""
VECTOR_BYTES: Final = 16
"""The widest access of the vector path: one 16-byte load or store per operand and vector."""
VECTOR_UNROLL: Final = 2
"""Vectors each thread takes per trip of the vector path's grid-stride loop."""
LOWP: Final = frozenset({D.ACL_FLOAT16, D.ACL_BF16})


def unroll_for(itemsizes: list[int] | tuple[int, ...]) -> int:
    """Elements per thread per trip for operands of these byte sizes (a tuning point; 4 for every size today).

    Measured on an H200 (one run each, 2^26-element Add): 4 elements gave fp16 2544 GB/s, 8 gave 2143 GB/s,
    so narrow types do not get a wider unroll until a better scheme (vector loads) proves itself.
    """
    if any(size <= 0 for size in itemsizes):
        raise ValueError(f"element sizes must be positive, got {list(itemsizes)}")
    return UNROLL


def vector_width(itemsizes: list[int] | tuple[int, ...]) -> int:
    """Elements per vector for operands of these byte sizes: the widest operand moves 16 bytes at a time."""
    if not itemsizes or any(size <= 0 for size in itemsizes):
        raise ValueError(f"element sizes must be positive, got {list(itemsizes)}")
    return max(1, VECTOR_BYTES // max(itemsizes))


_PARAM = re.compile(r"^\s*([A-Za-z_]\w*)\s*:\s*([A-Z])\s*$")
_ASSIGNS_R = re.compile(r"(?<![\w.])r\s*=(?!=)")


@dataclass(frozen=True)
class Ufunc:
    """One elementwise op: its signature line and its body line."""

    name: str
    signature: str
    body: str
    lowp: str = ""
    """The body in float for results stored as fp16/bf16 only (empty: ``body``); see :func:`lowp_results`."""
    inputs: tuple[tuple[str, str], ...] = field(init=False)
    output: tuple[str, str] = field(init=False)

    def __post_init__(self) -> None:
        if "->" not in self.signature:
            raise ValueError(f"{self.name}: signature {self.signature!r} has no '->'")
        left, right = self.signature.split("->", 1)
        inputs = tuple(_parse(self.name, p) for p in left.split(",") if p.strip())
        outputs = [_parse(self.name, p) for p in right.split(",") if p.strip()]
        if len(outputs) != 1:
            raise ValueError(f"{self.name}: exactly one output, got {self.signature!r}")
        object.__setattr__(self, "inputs", inputs)
        object.__setattr__(self, "output", outputs[0])

    @property
    def statements(self) -> bool:
        """True when the body assigns ``r`` itself (rather than being one expression)."""
        return bool(_ASSIGNS_R.search(self.body))

    def uses(self, name: str) -> bool:
        """True when the body (or the 16-bit body) refers to ``name``."""
        return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", self.body + " " + self.lowp) is not None


def _parse(op: str, text: str) -> tuple[str, str]:
    m = _PARAM.match(text)
    if not m or m.group(2) not in TOKENS:
        raise ValueError(f"{op}: bad signature item {text!r} (expected name:T|F|B|O|W)")
    return m.group(1), m.group(2)


def ufunc(name: str, signature: str, body: str, lowp: str = "") -> Ufunc:
    """Declare an elementwise op (see the module docstring for the two lines, and ``lowp``)."""
    return Ufunc(name, signature, body, lowp)


_BINARY = "self:T, other:T -> out:T"
_ALPHA = "self:T, other:T, alpha:T -> out:T"
_COMPARE = "self:T, other:T -> out:B"
_FLOAT_UNARY = "self:F -> out:F"
_SAME_UNARY = "self:T -> out:T"
_XLOGY = "(self == F(0) && other == other) ? F(0) : self * acl_log(other)"  # torch.xlogy: 0·log(y) is 0 unless y is NaN
_GELU_ERF = "acl_gelu_erf(self)"  # 0.5·x·erfc(-x/√2): see the prelude (1 + erf cancels for x < 0)
_GELU_TANH = (
    "acl_isinf(x) ? (x > F(0) ? x : F(0)) : "
    "F(0.5) * x * (F(1) + acl_tanh(F(0.79788456080286535588) * (x + F(0.044715) * x * x * x)))"
)

UFUNCS: Final[dict[str, Ufunc]] = {
    u.name: u
    for u in (
        ufunc("Add", _ALPHA, "self + alpha * other"),
        ufunc("Sub", _ALPHA, "self - alpha * other"),
        ufunc("Adds", _ALPHA, "self + alpha * other"),
        ufunc("Subs", _ALPHA, "self - alpha * other"),
        ufunc("AddV3", _ALPHA, "self + alpha * other"),
        ufunc("Mul", _BINARY, "self * other"),
        ufunc("Muls", _BINARY, "self * other"),
        ufunc("Div", "self:F, other:F -> out:F", "self / other"),
        ufunc("Divs", "self:F, other:F -> out:F", "self / other"),
        ufunc("DivModTrue", "self:F, other:F -> out:F", "self / other"),
        ufunc("DivMod", _BINARY, "mode == 1 ? acl_truncdiv(self, other) : acl_floordiv(self, other)"),
        *(ufunc(f"FloorDivide{k}", _BINARY, "acl_floordiv(self, other)") for k in ("", "s")),
        *(ufunc(f"XLogY{k}", "self:F, other:F -> out:F", _XLOGY) for k in ("Tensor", "ScalarSelf", "ScalarOther")),
        ufunc("PowTensorTensor", "self:T, exponent:T -> out:T", "acl_pow(self, exponent)"),
        ufunc("PowTensorScalar", "self:T, exponent:T -> out:T", "acl_pow(self, exponent)"),
        ufunc("PowScalarTensor", "self:T, exponent:T -> out:T", "acl_pow(self, exponent)"),
        ufunc("Maximum", _BINARY, "acl_maximum(self, other)"),
        ufunc("Minimum", _BINARY, "acl_minimum(self, other)"),
        *(ufunc(f"Eq{k}", _COMPARE, "self == other") for k in ("Tensor", "Scalar")),
        *(ufunc(f"Ne{k}", _COMPARE, "self != other") for k in ("Tensor", "Scalar")),
        *(ufunc(f"Gt{k}", _COMPARE, "self > other") for k in ("Tensor", "Scalar")),
        *(ufunc(f"Ge{k}", _COMPARE, "self >= other") for k in ("Tensor", "Scalar")),
        *(ufunc(f"Lt{k}", _COMPARE, "self < other") for k in ("Tensor", "Scalar")),
        *(ufunc(f"Le{k}", _COMPARE, "self <= other") for k in ("Tensor", "Scalar")),
        ufunc("LogicalAnd", _COMPARE, "(self != 0) && (other != 0)"),
        ufunc("LogicalOr", _COMPARE, "(self != 0) || (other != 0)"),
        ufunc("LogicalXor", _COMPARE, "(self != 0) != (other != 0)"),
        ufunc("LogicalNot", "self:T -> out:B", "self == 0"),
        ufunc("Exp", _FLOAT_UNARY, "acl_exp(self)"),
        ufunc("Log", _FLOAT_UNARY, "acl_log(self)"),
        ufunc("Sqrt", _FLOAT_UNARY, "acl_sqrt(self)"),
        ufunc("Rsqrt", _FLOAT_UNARY, "acl_rsqrt(self)"),
        ufunc("Reciprocal", _FLOAT_UNARY, "F(1) / self"),
        ufunc("Sin", _FLOAT_UNARY, "acl_sin(self)"),
        ufunc("Cos", "input:F -> out:F", "acl_cos(input)"),
        ufunc("Tanh", _FLOAT_UNARY, "acl_tanh(self)"),
        ufunc("Sigmoid", _FLOAT_UNARY, "acl_sigmoid(self)"),
        ufunc("Erf", _FLOAT_UNARY, "acl_erf(self)"),
        ufunc("Gelu", _FLOAT_UNARY, _GELU_ERF),
        ufunc("FastGelu", _FLOAT_UNARY, "self * acl_sigmoid(F(1.702) * self)"),
        ufunc("Silu", _FLOAT_UNARY, "self * acl_sigmoid(self)"),
        ufunc("GeluV2", "x:F -> y:F", f"approximate == 1 ? ({_GELU_TANH}) : ({_GELU_ERF.replace('self', 'x')})"),
        ufunc("Abs", _SAME_UNARY, "acl_abs(self)"),
        ufunc("Neg", _SAME_UNARY, "-self"),
        ufunc("Relu", _SAME_UNARY, "(self > T(0) || self != self) ? self : T(0)"),
        ufunc("Floor", _SAME_UNARY, "acl_floor(self)"),
        ufunc("Ceil", _SAME_UNARY, "acl_ceil(self)"),
        ufunc("Round", _SAME_UNARY, "acl_round(self)"),
        ufunc("Sign", "self:T -> result:T", "acl_sign(self)"),
        ufunc(
            "Clamp",
            "self:T, clipValueMin:T, clipValueMax:T -> out:T",
            "r = self; if (has_clipValueMin) r = acl_maximum(r, clipValueMin); "
            "if (has_clipValueMax) r = acl_minimum(r, clipValueMax);",
        ),
        ufunc("SWhere", "condition:B, self:T, other:T -> out:T", "condition ? self : other"),
        ufunc("InplaceMaskedFillScalar", "selfRef:O, mask:B, value:O -> selfRef:O", "mask ? value : selfRef"),
        ufunc("InplaceMaskedFillTensor", "selfRef:O, mask:B, value:O -> selfRef:O", "mask ? value : selfRef"),
        ufunc("Cast", "self:O -> out:O", "self"),
        ufunc("InplaceCopy", "src:O -> selfRef:O", "src"),
        ufunc("InplaceFillScalar", "value:O -> selfRef:O", "value"),
        ufunc("InplaceZero", "-> selfRef:O", "O(0)"),
        *(ufunc(name, sig, body, ACTIVATION_LOWP.get(name, "")) for name, sig, body in ACTIVATION_ROWS),
        *(ufunc(*row) for row in POINTWISE_MATH_ROWS),
        *(ufunc(*row) for row in (*BITWISE_ROWS, *TERNARY_ROWS)),
    )
}
"""Every elementwise op with a HIP kernel, by aclnn name (DivModTrue: DivMod with mode 0)."""

INTERNAL: Final[dict[str, Ufunc]] = {
    u.name: u
    for u in (ufunc("RoundHf32", "self:O -> out:O", "acl_round_hf32(self)"), *(ufunc(*r) for r in TERNARY_VARIANTS))
}
"""Helpers other op families use on the device, and forms of an op the runner picks per call (not aclnn operators)."""


def dtype_constants(compute: D | None) -> dict[str, int]:
    """Constants a body may name about the computation dtype (integers all travel as 64-bit values):
    ``acl_width`` (its bits, 1 for BOOL), ``acl_signed`` (a signed integer) and ``acl_integral`` (an integer)."""
    if compute is None:
        return {}
    integral = compute.is_integer
    width = 1 if compute == D.ACL_BOOL else compute.info.storage_bits
    signed = integral and compute.info.category == "int"
    return {"acl_width": width, "acl_signed": int(signed), "acl_integral": int(integral)}


# ----------------------------------------------------------------------------- instantiation
@dataclass(frozen=True)
class Operand:
    """One tensor of a kernel: its parameter name, storage dtype, value dtype, and access."""

    name: str
    storage: D
    value: D
    read: bool
    write: bool
    stride_class: str = "any"  # "unit" (stride 1), "zero" (broadcast) or "any"; rank-1 kernels only
    nibble: int = 0  # packed 4-bit storage: the view's first element is in the high nibble of its byte


@dataclass(frozen=True)
class ScalarArg:
    """One scalar argument: its name, value dtype and presence."""

    name: str
    value: D
    present: bool = True


@dataclass(frozen=True)
class Instance:
    """Everything that makes one compiled elementwise kernel distinct."""

    ufunc: Ufunc
    operands: tuple[Operand, ...]
    scalars: tuple[ScalarArg, ...]
    constants: tuple[tuple[str, int], ...]
    result: D
    ndim: int
    index_type: str  # "int" or "long long"
    restrict: bool = False
    types: tuple[tuple[str, D], ...] = ()
    unroll: int = UNROLL
    exact: bool = False  # loads keep every source bit (NaN signs), for encoders that read them
    vec: int = 1  # > 1: the vector path (rank 1, unit or zero strides, unit operands aligned to vec elements)
    reduce: bool = False  # the output is not stored: each block writes the double sum of its results (see generate)

    @functools.cached_property
    def kernel_name(self) -> str:
        """A stable, unique ``extern "C"`` name for this instance (computed once per object)."""
        digest = hashlib.sha1(repr(self).encode()).hexdigest()[:12]
        return f"acl_ew_{self.ufunc.name}_{digest}"


def _offset_lines(inst: Instance, decl: str = "const ") -> list[str]:
    idx = inst.index_type
    names = [f"o{k}" for k in range(len(inst.operands))]
    if inst.ndim == 1:
        lines = []
        for k, op in enumerate(inst.operands):
            expr = {"unit": "i", "zero": f"({idx})0"}.get(op.stride_class, f"i * m.stride[{k}][0]")
            lines.append(f"{decl}{idx} {names[k]} = {expr};")
        return lines
    lines = [f"{idx} {n} = 0;" for n in names]
    lines.append(f"{idx} rest = i;")
    for d in range(inst.ndim - 1, -1, -1):
        if d > 0:
            lines.append(f"{{ const {idx} c = rest % m.shape[{d}]; rest /= m.shape[{d}];")
        else:
            lines.append("{ const " + idx + " c = rest;")
        lines.append("  " + " ".join(f"{n} += c * m.stride[{k}][{d}];" for k, n in enumerate(names)) + " }")
    return lines


def vectorizable(inst: Instance) -> bool:
    """True when ``inst`` may take the vector path: rank 1, every operand unit-stride or broadcast, one output."""
    return (
        inst.ndim == 1
        and all(op.stride_class in ("unit", "zero") for op in inst.operands)
        and all(op.stride_class == "unit" for op in inst.operands if op.write)
    )


def lowp_results(inst: Instance) -> bool:
    """True when every result is computed in float and stored as fp16/bf16 (fast transcendentals suffice)."""
    written = [op.storage for op in inst.operands if op.write]
    return bool(written) and all(d in LOWP for d in written) and ctype(inst.result).value == "float"


_NARROW_INTS = frozenset({D.ACL_INT8, D.ACL_UINT8, D.ACL_INT16, D.ACL_UINT16, D.ACL_INT32, D.ACL_UINT32})
"""Integer results held in a C integer narrower than the 64-bit value type (packed INT4 has its own codec)."""


def _compute(inst: Instance, values: Mapping[str, str]) -> list[str]:
    """Lines computing ``r`` (the result type) from each loaded operand's value expression."""
    u = inst.ufunc
    result_c = ctype(inst.result)
    body = u.body
    if lowp_results(inst):
        body = u.lowp or re.sub(r"\bacl_sigmoid\(", "acl_sigmoid_lowp(", u.body)
    lines = [
        f"const {ctype(op.value).value} {op.name} = {values[op.name]};" for op in inst.operands if op.name in values
    ]
    # integers travel as 64-bit values: a narrower result wraps to its own width before any wider ``out``
    wrap = inst.result in _NARROW_INTS
    if _ASSIGNS_R.search(body):
        lines.append(f"{result_c.value} r;")
        lines.append("{ " + body + " }")
        if wrap:
            lines.append(f"r = ({result_c.value})(({result_c.storage})(r));")
    elif wrap:
        lines.append(f"const {result_c.value} r = ({result_c.value})(({result_c.storage})({body}));")
    else:
        lines.append(f"const {result_c.value} r = ({result_c.value})({body});")
    return lines


def _vector_body(inst: Instance) -> list[str]:
    """The vector path: ``vec`` contiguous elements per access, ``unroll`` vectors per trip, then a scalar tail.

    Unit-stride operands move as ``AclVec`` (one aligned access per vector); broadcast operands are read once.
    Elements past the last whole vector are taken one per thread, exactly as the vector path computes them.
    """
    u, idx, vec, unroll = inst.ufunc, inst.index_type, inst.vec, inst.unroll
    loaded = [op for op in inst.operands if op.read and u.uses(op.name)]
    written = [op for op in inst.operands if op.write]
    result_c = ctype(inst.result)
    body = [
        f"const {idx} n = m.n;",
        f"const {idx} nvec = n / {vec};",
        f"const {idx} threads = ({idx})gridDim.x * ({idx})blockDim.x;",
    ]
    for op in loaded:
        if op.stride_class == "zero":
            value = load(f"p_{op.name}[0]", ctype(op.storage), ctype(op.value))
            body.append(f"const {ctype(op.value).value} b_{op.name} = {value};")
    body.append(
        f"for ({idx} base = ({idx})blockIdx.x * ({idx})blockDim.x * {unroll} + ({idx})threadIdx.x; base < nvec;"
    )
    body.append(f"     base += threads * {unroll}) {{")
    for op in loaded:
        if op.stride_class == "unit":
            body.append(f"  AclVec<{ctype(op.storage).storage}, {vec}> q_{op.name}[{unroll}];")
    body.append("  #pragma unroll")
    body.append(f"  for (int u = 0; u < {unroll}; ++u) {{")
    body.append(f"    const {idx} c = base + ({idx})u * ({idx})blockDim.x;")
    body.append("    if (c < nvec) {")
    for op in loaded:
        if op.stride_class == "unit":
            vt = f"AclVec<{ctype(op.storage).storage}, {vec}>"
            body.append(f"      q_{op.name}[u] = *reinterpret_cast<const {vt}*>(p_{op.name} + c * {vec});")
    body.append("    }")
    body.append("  }")
    body.append("  #pragma unroll")
    body.append(f"  for (int u = 0; u < {unroll}; ++u) {{")
    body.append(f"    const {idx} c = base + ({idx})u * ({idx})blockDim.x;")
    body.append("    if (c < nvec) {")
    for op in written:
        body.append(f"      AclVec<{ctype(op.storage).storage}, {vec}> s_{op.name};")
    body.append("      #pragma unroll")
    body.append(f"      for (int e = 0; e < {vec}; ++e) {{")
    values = {
        op.name: (
            f"b_{op.name}"
            if op.stride_class == "zero"
            else load(f"q_{op.name}[u].v[e]", ctype(op.storage), ctype(op.value))
        )
        for op in loaded
    }
    lines = _compute(inst, values)
    lines += [f"s_{op.name}.v[e] = {store('r', result_c, ctype(op.storage))};" for op in written]
    body.extend("        " + line for line in lines)
    body.append("      }")
    for op in written:
        vt = f"AclVec<{ctype(op.storage).storage}, {vec}>"
        body.append(f"      *reinterpret_cast<{vt}*>(p_{op.name} + c * {vec}) = s_{op.name};")
    body.append("    }")
    body.append("  }")
    body.append("}")
    body.append(
        f"for ({idx} i = nvec * {vec} + ({idx})blockIdx.x * ({idx})blockDim.x + ({idx})threadIdx.x; i < n;"
        " i += threads) {"
    )
    tail = {
        op.name: (
            f"b_{op.name}" if op.stride_class == "zero" else load(f"p_{op.name}[i]", ctype(op.storage), ctype(op.value))
        )
        for op in loaded
    }
    lines = _compute(inst, tail)
    lines += [f"p_{op.name}[i] = {store('r', result_c, ctype(op.storage))};" for op in written]
    body.extend("  " + line for line in lines)
    body.append("}")
    return body


def _element(op: Operand, offset: str) -> str:
    """C expression of one stored element of ``op`` at element offset ``offset`` (a 4-bit code when packed)."""
    if ctype(op.storage).packed:
        return f"acl_nib_get(p_{op.name}, (long long){offset} + {op.nibble})"
    return f"p_{op.name}[{offset}]"


def generate(inst: Instance) -> str:
    """The complete source (prelude included) of one elementwise kernel instance.

    Each thread takes ``inst.unroll`` elements a block apart per trip of a grid-stride loop: it first
    loads every input of all of them (so the loads are in flight together), then computes and stores.
    With ``inst.vec > 1`` (see :func:`vectorizable`) it takes ``unroll`` vectors of ``vec`` elements instead.
    """
    u = inst.ufunc
    idx = inst.index_type
    if inst.vec > 1 and not vectorizable(inst):
        raise ValueError(f"{u.name}: the vector path needs rank 1 and unit or zero strides")
    if inst.reduce and (inst.vec > 1 or len([op for op in inst.operands if op.write]) != 1):
        raise ValueError(f"{u.name}: a reducing instance takes the strided path and has one output")
    params = ["const Meta m"]
    restrict = " __restrict__" if inst.restrict else ""
    for op in inst.operands:
        c = ctype(op.storage)
        const = "" if op.write else "const "
        storage = "double" if inst.reduce and op.write else c.storage
        params.append(f"{const}{storage}*{restrict} p_{op.name}")
    for s in inst.scalars:
        params.append(f"const {ctype(s.value).value} {s.name}")
    body: list[str] = []
    for token, dtype in inst.types:
        body.append(f"typedef {ctype(dtype).value} {token};")
    for name, value in inst.constants:
        body.append(f"[[maybe_unused]] const long long {name} = {int(value)}LL;")
    for s in inst.scalars:
        body.append(f"[[maybe_unused]] const bool has_{s.name} = {'true' if s.present else 'false'};")
    loaded = [(k, op) for k, op in enumerate(inst.operands) if op.read and u.uses(op.name)]
    written = [(k, op) for k, op in enumerate(inst.operands) if op.write]
    result_c = ctype(inst.result)
    if inst.vec > 1:
        body += _vector_body(inst)
        return _assemble(inst, params, body)
    body.append(f"const {idx} n = m.n;")
    if inst.reduce:
        body.append("double acc = 0.0;")
    body.append(f"const {idx} step = ({idx})gridDim.x * ({idx})blockDim.x * {inst.unroll};")
    body.append(
        f"for ({idx} base = ({idx})blockIdx.x * ({idx})blockDim.x * {inst.unroll} + ({idx})threadIdx.x; base < n;"
    )
    body.append("     base += step) {")
    for _, op in loaded:
        body.append(f"  {ctype(op.value).value} v_{op.name}[{inst.unroll}];")
    for k, _ in written:
        body.append(f"  {idx} w{k}[{inst.unroll}];")
    body.append("  #pragma unroll")
    body.append(f"  for (int u = 0; u < {inst.unroll}; ++u) {{")
    body.append(f"    const {idx} i = base + ({idx})u * ({idx})blockDim.x;")
    body.append("    if (i < n) {")
    gather = _offset_lines(inst)
    for k, op in loaded:
        value = load(_element(op, f"o{k}"), ctype(op.storage), ctype(op.value), inst.exact)
        gather.append(f"v_{op.name}[u] = {value};")
    for k, _ in written:
        gather.append(f"w{k}[u] = o{k};")
    body.extend("      " + line for line in gather)
    body.append("    }")
    body.append("  }")
    body.append("  #pragma unroll")
    body.append(f"  for (int u = 0; u < {inst.unroll}; ++u) {{")
    body.append(f"    if (base + ({idx})u * ({idx})blockDim.x < n) {{")
    compute = _compute(inst, {op.name: f"v_{op.name}[u]" for _, op in loaded})
    for k, op in written:
        bits = store("r", result_c, ctype(op.storage))
        if inst.reduce:  # the result as the output dtype would hold it, summed in double
            compute.append(f"acc += (double)({load(bits, ctype(op.storage), ctype(D.ACL_DOUBLE))});")
        elif ctype(op.storage).packed:
            compute.append(f"acl_nib_set(p_{op.name}, (long long)w{k}[u] + {op.nibble}, {bits});")
        else:
            compute.append(f"p_{op.name}[w{k}[u]] = {bits};")
    body.extend("      " + line for line in compute)
    body.append("    }")
    body.append("  }")
    body.append("}")
    if inst.reduce:
        body += _block_sum(written[0][1].name)
    return _assemble(inst, params, body)


def _block_sum(name: str) -> list[str]:
    """Lines summing every thread's ``acc`` of the block into ``p_<name>[blockIdx.x]`` (a shared-memory tree)."""
    return [
        f"__shared__ double acl_sum[{BLOCK_THREADS}];",
        "acl_sum[threadIdx.x] = acc;",
        "__syncthreads();",
        f"for (int w = {BLOCK_THREADS // 2}; w > 0; w >>= 1) {{",
        "  if ((int)threadIdx.x < w) acl_sum[threadIdx.x] += acl_sum[threadIdx.x + w];",
        "  __syncthreads();",
        "}",
        f"if (threadIdx.x == 0) p_{name}[blockIdx.x] = acl_sum[0];",
    ]


def _assemble(inst: Instance, params: list[str], body: list[str]) -> str:
    u = inst.ufunc
    idx = inst.index_type
    nops = len(inst.operands)
    meta = f"struct Meta {{ {idx} n; {idx} shape[{inst.ndim}]; {idx} stride[{max(nops, 1)}][{inst.ndim}]; }};"
    lowp = any(ctype(op.storage).lowp for op in inst.operands)
    lines = [
        PRELUDE + (LOWP_PRELUDE if lowp else ""),
        f"// elementwise {u.name}: {u.signature}",
        f"// body: {u.body}",
        meta,
        f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {inst.kernel_name}(',
        "    " + ",\n    ".join(params) + ") {",
        *("  " + line for line in body),
        "}",
        "",
    ]
    return "\n".join(lines)


def token_dtypes(compute: D | None, output: D, float_result: D | None) -> Mapping[str, D | None]:
    """What each type token stands for in one call."""
    return {"T": compute, "F": float_result, "B": D.ACL_BOOL, "O": output, "W": D.ACL_DOUBLE}
