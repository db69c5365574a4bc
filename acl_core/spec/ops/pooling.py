"""The pooling family (issue 16): average and max pooling over 2 or 3 spatial dims with their backward ops,
their adaptive forms, and the global pools.

Declared from one table (:data:`POOLS`): each row is a forward op and its backward twin, the
official parameter names of both from tests/data/cann/aclnn-signatures.tsv; :data:`GLOBAL` adds
GlobalAveragePool and GlobalMaxPool. Layouts are channel-first: a 2-D pool takes ``[N, C, H, W]`` or
an unbatched ``[C, H, W]``, a 3-D pool ``[N, C, D, H, W]`` or ``[C, D, H, W]``, in the formats each
page lists (every format read the same way, channel-first): AvgPool2d and AdaptiveAvgPool2d NCHW /
NCL, MaxPool2dWithIndices NCHW / ND, AdaptiveMaxPool2d NCHW / NCL, AvgPool3d ND, the other 3-D pools
NCDHW / ND, the global pools ND / NCHW / NCDHW (ND is accepted everywhere: a tensor without a label).

Geometry, as the CANN pages and torch.nn.functional state it: ``kernelSize`` has one value (every
dim) or one per spatial dim; a stride list may be empty (the kernel), one value or one per dim;
padding one value or one per dim, ``0 <= pad <= kernel / 2``; dilation (max pools) one value or one
per dim, > 0. An output size is ``floor((L + 2·pad - dilation·(k - 1) - 1) / stride) + 1``
(``ceil`` under ``ceilMode``), less one where ``ceilMode`` would start the last window at or past
``L + pad`` (the right padding). A size below 1 is refused.

* Average pools: a window is ``[o·stride - pad, o·stride - pad + k)`` clipped to ``L + pad`` (the
  windows ``ceilMode`` adds do not count the area past the right padding); the sum of the input
  elements in it is divided by ``divisorOverride`` when it is not 0, else by the window's size
  (``countIncludePad``) or by the number of input elements it covers. The backward op gives every
  input element the sum, over the windows covering it, of ``gradOutput / divisor``.
* Max pools: padding never wins; ``indices`` holds the position of the maximum in its plane,
  flattened (``h·W + w``, ``d·H·W + h·W + w`` in 3-D), as torch's ``return_indices``: the first
  maximum in window order, and where the window holds a NaN the position of its last NaN (the output
  is NaN). The backward op adds each ``gradOutput`` element to the input position its index names.
  CANN's pages require indices in ``[0, H·W)``: the reference refuses one outside the plane with
  161002 (rocm's kernels do not check it). An index inside the plane but outside its own window (no
  forward gives one) is outside the contract: the reference adds there, rocm's gather, which reads
  only the windows covering an element, drops it.
* Adaptive pools: ``outputSize`` gives one size > 0 per spatial dim (larger than the input too: the
  windows then repeat); output ``o`` covers ``[floor(o·L / O), ceil((o + 1)·L / O))``, averaged or
  searched as above; a backward op takes its output sizes from ``gradOutput``.
* Global pools: the mean, or the maximum (NaN wins), over every dim after N and C; ``out`` keeps
  them as 1 (ranks 4 to 8).

Choices where the pages are silent or platform-dependent: NHWC / NDHWC (listed for the max pools,
refused on Atlas A2/A3) are not declared; DOUBLE (AdaptiveMaxPool2d's page) is not declared for the
window pools, whose kernels compute in float32 (the global pools take it); the adaptive max pools'
indices are INT64 only (the 2-D page; the 3-D one assumed alike); an empty input is refused (161002;
the average pages say so, the others are silent); ``cubeMathType`` (AvgPool2d and its backward) acts
as it does for Convolution: on float32 operands 1 and 3 round them to HF32, 2 to float16 (AvgPool2d
refuses 3 and both refuse 2 for bfloat16, as the pages say); sums are otherwise kept in float32 or
wider. A nonzero ``divisorOverride`` of either sign is taken as torch takes it.

MaxPool (ONNX's attributes, :func:`_max_pool_spec`): values only, ND rank 3-4, float and integer
dtypes (integers compared exactly); ``pads`` none, one, ``[H, W]`` or ``[top, left, bottom, right]``,
each pad below the kernel and a dim's two at most the kernel (a pad as large as the kernel would make
a window of padding only; the page bounds only the sum); strides default 1; autoPad 0 and dilations of
1 only (the page's limits); ``ceilMode`` any nonzero value is true.

Not declared: MaxPool2dWithMask and its backward (the page gives the mask's shape,
``[N, C, kH·kW, (ceil(Hout·Wout / 16) + 1)·32]``, but not which bit of which element marks which
output, so no reference could be checked against it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, exact, reduction
from acl_core.spec.ops.matmul import USE_FP16, USE_HF32, operand_precision
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Param,
    Sample,
    bool_attr,
    int_array,
    int_attr,
    invalid,
    out,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import FLOATS, same, tensor_arg
from acl_core.tensor import AclIntArray, AclTensor

FAMILY = "pooling"
_F32, _F16, _BF16 = D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16
INDEX_DTYPES = (D.ACL_INT32, D.ACL_INT64)
CUBE_MATH_TYPES = (0, 1, 2, 3)


@dataclass(frozen=True)
class Geometry:
    """One validated pooling call's window geometry, per spatial dim."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pad: tuple[int, ...]
    dilation: tuple[int, ...]
    lengths: tuple[int, ...]
    """The input's spatial sizes."""
    sizes: tuple[int, ...]
    """The output's spatial sizes."""
    lead: tuple[int, ...]
    """The dims before the spatial ones (``[N, C]`` or ``[C]``)."""
    count_include_pad: bool = True
    divisor: int = 0
    rounding: str | None = None
    """What ``cubeMathType`` does to float32 operands of an average pool: "hf32", "fp16" or None."""
    adaptive: bool = False
    """Adaptive windows: output ``o`` of a dim covers ``[floor(o·L / O), ceil((o + 1)·L / O))``."""

    @property
    def spatial(self) -> int:
        """Spatial rank (2 or 3)."""
        return len(self.kernel)


declare_plan("pool", "Geometry", "a pooling call's window geometry (acl_core.spec.ops.pooling.Geometry)", Geometry)


@dataclass(frozen=True)
class Pool:
    """One row of the table: a forward pooling op, its backward op, and their official names."""

    name: str
    backward: str
    kind: str
    """"avg" or "max"."""
    spatial: int
    stride: str
    padding: str
    forward_out: str
    backward_out: str
    formats: frozenset[Format]
    cube: bool = False
    refuse_hf32: bool = False
    kernel_within_input: bool = False
    """AvgPool3d's page refuses a kernel larger than the input along a dim (padding aside)."""
    adaptive: bool = False
    """Windows from ``outputSize`` (torch's adaptive pools): no kernel, stride or padding attributes."""
    indices_out: str = "indices"
    """The forward max pool's indices output."""
    index_dtypes: tuple[D, ...] = INDEX_DTYPES


_ND, _NCL, _NCHW, _NCDHW = Format.ACL_FORMAT_ND, Format.ACL_FORMAT_NCL, Format.ACL_FORMAT_NCHW, Format.ACL_FORMAT_NCDHW
POOLS: tuple[Pool, ...] = (
    Pool(
        "AvgPool2d",
        "AvgPool2dBackward",
        "avg",
        2,
        "strides",
        "paddings",
        "out",
        "gradInput",
        frozenset({_ND, _NCHW, _NCL}),
        cube=True,
        refuse_hf32=True,
    ),
    Pool(
        "MaxPool2dWithIndices",
        "MaxPool2dWithIndicesBackward",
        "max",
        2,
        "stride",
        "padding",
        "out",
        "gradInput",
        frozenset({_ND, _NCHW}),
    ),
    Pool(
        "AvgPool3d",
        "AvgPool3dBackward",
        "avg",
        3,
        "stride",
        "padding",
        "out",
        "output",
        frozenset({_ND}),
        kernel_within_input=True,
    ),
    Pool(
        "AdaptiveAvgPool2d",
        "AdaptiveAvgPool2dBackward",
        "avg",
        2,
        "",
        "",
        "out",
        "out",
        frozenset({_ND, _NCHW, _NCL}),
        adaptive=True,
    ),
    Pool(
        "AdaptiveMaxPool2d",
        "AdaptiveMaxPool2dBackward",
        "max",
        2,
        "",
        "",
        "outputOut",
        "gradInput",
        frozenset({_ND, _NCHW, _NCL}),
        adaptive=True,
        indices_out="indicesOut",
        index_dtypes=(D.ACL_INT64,),
    ),
    Pool(
        "AdaptiveAvgPool3d",
        "AdaptiveAvgPool3dBackward",
        "avg",
        3,
        "",
        "",
        "out",
        "out",
        frozenset({_ND, _NCDHW}),
        adaptive=True,
    ),
    Pool(
        "AdaptiveMaxPool3d",
        "AdaptiveMaxPool3dBackward",
        "max",
        3,
        "",
        "",
        "outputOut",
        "gradInput",
        frozenset({_ND, _NCDHW}),
        adaptive=True,
        indices_out="indicesOut",
        index_dtypes=(D.ACL_INT64,),
    ),
    Pool(
        "MaxPool3dWithArgmax",
        "MaxPool3dWithArgmaxBackward",
        "max",
        3,
        "stride",
        "padding",
        "out",
        "gradInput",
        frozenset({_ND, _NCDHW}),
    ),
)
"""Every declared pooling op pair (the forward's stride/padding names; backward ops say stride/padding)."""

BY_NAME: dict[str, tuple[Pool, bool]] = {p.name: (p, False) for p in POOLS} | {p.backward: (p, True) for p in POOLS}
"""Operator name to (its row, whether it is the backward op)."""


# ----------------------------------------------------------------------------- geometry
def _values(call: Call, name: str) -> tuple[int, ...]:
    arr = call.args.get(name)
    return tuple(int(v) for v in arr.values) if isinstance(arr, AclIntArray) else ()


def _per_dim(
    values: Sequence[int], name: str, spatial: int, *, default: Sequence[int] | None = None
) -> tuple[int, ...]:
    """One value per spatial dim from a list of 1 or ``spatial`` values (or none, where ``default`` exists)."""
    if not values and default is not None:
        return tuple(default)
    if len(values) == 1:
        return tuple(values) * spatial
    if len(values) != spatial:
        allowed = [1, spatial] if default is None else [0, 1, spatial]
        raise invalid(f"{name} has {len(values)} values; a {spatial}-D pool takes {allowed}")
    return tuple(values)


def output_size(length: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """Pooled size of one dim (torch's rule, the CANN pages' formula)."""
    span = length + 2 * p - d * (k - 1) - 1
    size = (-(-span // s) if ceil else span // s) + 1
    if ceil and (size - 1) * s >= length + p:
        size -= 1
    return size


def adaptive_bounds(length: int, size: int) -> list[tuple[int, int]]:
    """Each output's window ``[floor(o·L / O), ceil((o + 1)·L / O))`` along one dim (torch's adaptive pools)."""
    return [(o * length // size, -(-(o + 1) * length // size)) for o in range(size)]


def adaptive_geometry(pool: Pool, x: AclTensor, sizes: Sequence[int], what: str) -> Geometry:
    """An adaptive pool's geometry: ``sizes`` (from ``what``) must give one size > 0 per spatial dim."""
    s = pool.spatial
    if len(sizes) != s or any(n <= 0 for n in sizes):
        raise invalid(f"{what} {list(sizes)} must hold {s} sizes > 0")
    lead, lengths = tuple(x.shape[:-s]), tuple(x.shape[-s:])
    return Geometry((0,) * s, (0,) * s, (0,) * s, (1,) * s, lengths, tuple(sizes), lead, False, adaptive=True)


def _check_self(pool: Pool, x: AclTensor) -> None:
    s = pool.spatial
    if x.rank not in (s + 1, s + 2):
        raise invalid(f"self has rank {x.rank}; a {s}-D pool takes rank {s + 1} or {s + 2}")
    if x.numel == 0:
        raise invalid(f"self {list(x.shape)} is empty; pooling takes no empty tensor")


def geometry(call: Call, pool: Pool, x: AclTensor, stride_name: str, padding_name: str) -> Geometry:
    """The window geometry of a call, 161002 where CANN refuses it."""
    s = pool.spatial
    kernel = _per_dim(_values(call, "kernelSize"), "kernelSize", s)
    if any(k <= 0 for k in kernel):
        raise invalid(f"kernelSize {list(kernel)} must be > 0")
    stride = _per_dim(_values(call, stride_name), stride_name, s, default=kernel)
    if any(v <= 0 for v in stride):
        raise invalid(f"{stride_name} {list(stride)} must be > 0")
    pad = _per_dim(_values(call, padding_name), padding_name, s)
    if any(p < 0 or 2 * p > k for p, k in zip(pad, kernel)):
        raise invalid(f"{padding_name} {list(pad)} must be >= 0 and at most half of kernelSize {list(kernel)}")
    dilation = (1,) * s
    if pool.kind == "max":
        dilation = _per_dim(_values(call, "dilation"), "dilation", s)
        if any(v <= 0 for v in dilation):
            raise invalid(f"dilation {list(dilation)} must be > 0")
    lengths = tuple(x.shape[-s:])
    if pool.kernel_within_input and any(k > n for k, n in zip(kernel, lengths)):
        raise invalid(f"kernelSize {list(kernel)} exceeds self's spatial sizes {list(lengths)}")
    ceil = bool(call.args["ceilMode"])
    sizes = tuple(output_size(*a, ceil) for a in zip(lengths, kernel, stride, pad, dilation))
    if any(n <= 0 for n in sizes):
        raise invalid(f"self's spatial sizes {list(lengths)} give an empty output {list(sizes)}")
    rounding = None
    divisor = 0
    include = True
    if pool.kind == "avg":
        include = bool(call.args["countIncludePad"])
        divisor = int(call.args["divisorOverride"])
    if pool.cube:
        cube = int(call.args["cubeMathType"])
        if cube == USE_HF32 and pool.refuse_hf32:
            raise invalid(f"aclnn{call.spec.name}: cubeMathType=3 (USE_HF32) is not supported")
        if cube == USE_FP16 and x.dtype == _BF16:
            raise invalid(f"aclnn{call.spec.name}: cubeMathType=2 (USE_FP16) does not support bfloat16")
        rounding = operand_precision(x.dtype, cube, call.spec.name, strict=False)
    return Geometry(kernel, stride, pad, dilation, lengths, sizes, tuple(x.shape[:-s]), include, divisor, rounding)


def _infer(pool: Pool, backward: bool) -> Callable[[Call], Infos]:
    def infer(call: Call) -> Infos:
        x = tensor_arg(call, "self")
        _check_self(pool, x)
        grad = tensor_arg(call, "gradOutput") if backward else None
        if not pool.adaptive:
            stride_name, padding_name = ("stride", "padding") if backward else (pool.stride, pool.padding)
            geo = geometry(call, pool, x, stride_name, padding_name)
        elif grad is None:
            geo = adaptive_geometry(pool, x, _values(call, "outputSize"), "outputSize")
        else:
            if grad.rank != x.rank:
                raise invalid(f"gradOutput has rank {grad.rank}; it must equal self's {x.rank}")
            geo = adaptive_geometry(pool, x, grad.shape[-pool.spatial :], "gradOutput's spatial sizes")
        call.plan["pool"] = geo
        pooled = (*geo.lead, *geo.sizes)
        if grad is None:
            infos: dict[str, Any] = {pool.forward_out: same(pooled, x.dtype)}
            if pool.kind == "max":
                indices = call.args.get(pool.indices_out)
                idt = indices.dtype if isinstance(indices, AclTensor) else D.ACL_INT64
                infos[pool.indices_out] = same(pooled, idt)
            return infos
        if tuple(grad.shape) != pooled:
            raise invalid(f"gradOutput has shape {list(grad.shape)}; the forward's output is {list(pooled)}")
        if grad.dtype != x.dtype:
            raise invalid(f"gradOutput is {grad.dtype.short} but self is {x.dtype.short}; they must agree")
        if pool.kind == "max":
            idx = tensor_arg(call, "indices")
            if tuple(idx.shape) != pooled:
                raise invalid(f"indices has shape {list(idx.shape)}; it must equal gradOutput's {list(pooled)}")
        return {pool.backward_out: same(tuple(x.shape), x.dtype)}

    return infer


# ----------------------------------------------------------------------------- conformance cases
@dataclass(frozen=True)
class Case:
    """One sample's geometry: input shape and the attribute lists as the call passes them."""

    shape: tuple[int, ...]
    kernel: tuple[int, ...]
    """The kernel size (adaptive pools: outputSize)."""
    stride: tuple[int, ...] = ()
    pad: tuple[int, ...] = (0,)
    dilation: tuple[int, ...] = (1,)
    ceil: bool = False
    include: bool = True
    divisor: int = 0
    note: str = ""


_CASES: dict[int, tuple[Case, ...]] = {
    2: (
        Case((2, 3, 7, 6), (3,), (2,), (1,)),
        Case((1, 2, 6, 7), (3, 2), (2, 1), (1, 0), ceil=True, include=False),
        Case((2, 2, 5, 5), (2,), (), (1,), ceil=True, note="default stride"),
        Case((3, 5, 6), (3, 3), (1, 2), (1, 1), (2, 1), divisor=5, note="unbatched"),
        Case((1, 1, 9, 11), (4, 3), (3, 2), (2, 1), ceil=True, include=False, note="partial last windows"),
        Case((2, 4, 4, 4), (1,), (1,), (0,), note="1x1 window"),
    ),
    3: (
        Case((1, 2, 4, 5, 4), (2,), (2,), (1,), ceil=True),
        Case((2, 4, 5, 6), (3, 2, 2), (1, 2, 1), (1, 0, 1), (1, 2, 1), include=False, note="unbatched"),
        Case((1, 1, 5, 6, 7), (3,), (2,), (1,), ceil=True, include=False, note="partial last windows"),
        Case((2, 2, 3, 4, 4), (2, 3, 3), (), (0, 1, 1), divisor=7, note="default stride"),
    ),
}
_ADAPTIVE: dict[int, tuple[Case, ...]] = {
    # adaptive rows: ``kernel`` holds outputSize
    2: (
        Case((2, 3, 7, 6), (3, 4)),
        Case((1, 2, 5, 9), (2, 2), note="overlapping windows"),
        Case((3, 6, 5), (6, 7), note="unbatched, outputs beyond the input (repeated windows)"),
        Case((2, 4, 8, 8), (1, 1), note="global"),
    ),
    3: (
        Case((1, 2, 5, 6, 7), (2, 3, 4)),
        Case((2, 3, 4, 5), (3, 2, 5), note="unbatched, overlapping windows"),
        Case((2, 2, 3, 4, 4), (1, 1, 1), note="global"),
    ),
}
_TIES: dict[int, Case] = {
    2: Case((1, 2, 6, 6), (3,), (1,), (1,), note="ties, NaN and infinities"),
    3: Case((1, 1, 3, 5, 5), (3,), (1,), (1,), note="ties, NaN and infinities"),
}


def _note(pool: Pool, c: Case, dt: D) -> str:
    """A sample's name: dtype, shape and the attributes that matter for ``pool``."""
    if pool.adaptive:
        return " ".join([dt.short, str(list(c.shape)), f"outputSize {list(c.kernel)}", *([c.note] if c.note else [])])
    parts = [dt.short, str(list(c.shape)), f"k{list(c.kernel)} s{list(c.stride)} p{list(c.pad)}"]
    if pool.kind == "max" and c.dilation != (1,):
        parts.append(f"dilation {list(c.dilation)}")
    if c.ceil:
        parts.append("ceilMode")
    if pool.kind == "avg" and not c.include:
        parts.append("countIncludePad false")
    if pool.kind == "avg" and c.divisor:
        parts.append(f"divisorOverride {c.divisor}")
    return " ".join(parts + ([c.note] if c.note else []))


def _attrs(pool: Pool, backward: bool, c: Case) -> dict[str, Any]:
    if pool.adaptive:
        return {} if backward else {"outputSize": list(c.kernel)}
    stride_name, padding_name = ("stride", "padding") if backward else (pool.stride, pool.padding)
    args: dict[str, Any] = {
        "kernelSize": list(c.kernel),
        stride_name: list(c.stride),
        padding_name: list(c.pad),
        "ceilMode": c.ceil,
    }
    if pool.kind == "avg":
        args.update(countIncludePad=c.include, divisorOverride=c.divisor)
    else:
        args["dilation"] = list(c.dilation)
    if pool.cube:
        args["cubeMathType"] = 0
    return args


def _pooled_shape(pool: Pool, c: Case) -> tuple[int, ...]:
    s = pool.spatial
    if pool.adaptive:
        return (*c.shape[:-s], *c.kernel)
    full = lambda v: tuple(v) * s if len(v) == 1 else tuple(v)
    kernel, pad = full(c.kernel), full(c.pad)
    stride = full(c.stride) if c.stride else kernel
    dil = full(c.dilation) if pool.kind == "max" else (1,) * s
    sizes = [output_size(n, *a, c.ceil) for n, a in zip(c.shape[-s:], zip(kernel, stride, pad, dil))]
    return (*c.shape[:-s], *sizes)


def window_indices(rng: np.random.Generator, pool: Pool, c: Case, dtype: D) -> np.ndarray:
    """A valid ``indices`` array: for every output, a random input position inside its window."""
    s = pool.spatial
    pooled = _pooled_shape(pool, c)
    full = lambda v: tuple(v) * s if len(v) == 1 else tuple(v)
    kernel, pad, dil = full(c.kernel), full(c.pad), full(c.dilation)
    stride = full(c.stride) if c.stride and not pool.adaptive else kernel
    lengths = c.shape[-s:]
    choices = []  # per dim, per output position: the valid input positions
    for d in range(s):
        per = []
        for o in range(pooled[-s + d]):
            if pool.adaptive:
                per.append(list(range(*adaptive_bounds(lengths[d], pooled[-s + d])[o])))
                continue
            start = o * stride[d] - pad[d]
            per.append([start + k * dil[d] for k in range(kernel[d]) if 0 <= start + k * dil[d] < lengths[d]])
        choices.append(per)
    result = np.empty(pooled, dtype=dtype.numpy)
    for index in np.ndindex(*pooled):
        flat = 0
        for d in range(s):
            flat = flat * lengths[d] + int(rng.choice(choices[d][index[-s + d]]))
        result[index] = flat
    return result


def _ties(rng: np.random.Generator, shape: tuple[int, ...], dt: D) -> np.ndarray:
    """Small integers (many ties), a -inf and two NaNs in one plane."""
    x = rng.integers(-2, 3, shape).astype(np.float64)
    x[(0,) * (len(shape) - 2) + (1, 1)] = np.nan
    x[(0,) * (len(shape) - 2) + (1, 2)] = np.nan
    x[(0,) * (len(shape) - 2) + (4, 4)] = -np.inf
    x.reshape(-1)[-1] = np.inf
    return x.astype(dt.numpy)


def _case_args(rng: np.random.Generator, pool: Pool, backward: bool, c: Case, dt: D, idt: D) -> dict[str, Any]:
    args = {"self": S.array(rng, c.shape, dt, low=-3, high=3), **_attrs(pool, backward, c)}
    if c.note.startswith("ties"):
        args["self"] = _ties(rng, c.shape, dt)
    if backward:
        args["gradOutput"] = S.array(rng, _pooled_shape(pool, c), dt, low=-2, high=2)
        if pool.kind == "max":
            args["indices"] = window_indices(rng, pool, c, idt)
    elif pool.kind == "max":
        args[pool.indices_out] = np.zeros(_pooled_shape(pool, c), idt.numpy)
    return args


def _sample_cases(pool: Pool, backward: bool) -> list[Case]:
    """The table's cases; a forward op also gets ties, NaN and infinities."""
    if pool.adaptive:
        ties = Case(_TIES[pool.spatial].shape, (3,) * pool.spatial, (), (0,), note="ties, NaN and infinities")
        return [*_ADAPTIVE[pool.spatial], *(() if backward else (ties,))]
    return [*_CASES[pool.spatial], *(() if backward else (_TIES[pool.spatial],))]


def _samples(pool: Pool, backward: bool) -> Callable[[np.random.Generator], Iterable[Sample]]:
    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        dts = (_F32, _F16, _BF16)
        for i, c in enumerate(_sample_cases(pool, backward)):
            dt = dts[i % len(dts)]
            idt = pool.index_dtypes[i % len(pool.index_dtypes)]
            yield Sample(_case_args(rng, pool, backward, c, dt, idt), _note(pool, c, dt))
        if pool.cube:
            c = _CASES[pool.spatial][0]
            for cube, label in ((1, "HF32"), (2, "float16")):
                args = _case_args(rng, pool, backward, c, _F32, D.ACL_INT64)
                args["cubeMathType"] = cube
                yield Sample(args, f"float32, cubeMathType {cube} ({label} operands)")

    return gen


def _errors(pool: Pool, backward: bool) -> Callable[[np.random.Generator], Iterable[ErrorSample]]:
    stride_name, padding_name = ("stride", "padding") if backward else (pool.stride, pool.padding)
    base = (_ADAPTIVE if pool.adaptive else _CASES)[pool.spatial][0]

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        def good(**over: Any) -> dict[str, Any]:
            args = _case_args(np.random.default_rng(0), pool, backward, base, _F32, D.ACL_INT64)
            args.update(over)
            return args

        s = pool.spatial
        lead = base.shape[:-s]
        yield ErrorSample(good(self=S.array(rng, (*lead, 0, *base.shape[-s + 1 :]), _F32)), INVALID, "empty self")
        yield ErrorSample(good(self=S.array(rng, base.shape[-s:], _F32)), INVALID, "self of too low a rank")
        pooled = _pooled_shape(pool, base)
        wrong = (*pooled[:-1], pooled[-1] + 1) if not (pool.adaptive and backward) else (pooled[0] + 1, *pooled[1:])
        yield from _shape_errors(pool, backward, good, rng, pooled, wrong)
        if pool.adaptive:
            if not backward:
                yield ErrorSample(good(outputSize=[2] * (s + 1)), INVALID, "outputSize with too many values")
                yield ErrorSample(good(outputSize=[0] * s), INVALID, "outputSize 0")
            return
        yield ErrorSample(good(kernelSize=[3] * (s + 1)), INVALID, "kernelSize with too many values")
        yield ErrorSample(good(kernelSize=[0]), INVALID, "kernelSize 0")
        yield ErrorSample(good(**{stride_name: [0]}), INVALID, "stride 0")
        yield ErrorSample(good(**{stride_name: [2] * (s + 1)}), INVALID, "stride with too many values")
        yield ErrorSample(good(**{padding_name: [2]}), INVALID, "padding above half the kernel")
        yield ErrorSample(good(**{padding_name: [-1]}), INVALID, "negative padding")
        yield ErrorSample(
            good(self=S.array(rng, (*lead, *(2,) * s), _F32), kernelSize=[5], **{padding_name: [0]}),
            INVALID,
            "window larger than the padded input",
        )
        if pool.kind == "max":
            yield ErrorSample(good(dilation=[0]), INVALID, "dilation 0")
        if pool.kernel_within_input:
            yield ErrorSample(good(kernelSize=[5], **{padding_name: [2]}), INVALID, "kernel larger than the input")
        if pool.cube:
            if pool.refuse_hf32:
                yield ErrorSample(good(cubeMathType=3), INVALID, "cubeMathType 3 (USE_HF32)")
            yield ErrorSample(good(cubeMathType=5), INVALID, "unknown cubeMathType")
            yield ErrorSample(
                good(self=S.array(rng, base.shape, _BF16), cubeMathType=2)
                if not backward
                else good(
                    self=S.array(rng, base.shape, _BF16),
                    gradOutput=S.array(rng, _pooled_shape(pool, base), _BF16),
                    cubeMathType=2,
                ),
                INVALID,
                "USE_FP16 with bfloat16",
            )

    return errors


def _shape_errors(
    pool: Pool,
    backward: bool,
    good: Callable[..., dict[str, Any]],
    rng: np.random.Generator,
    pooled: tuple[int, ...],
    wrong: tuple[int, ...],
) -> Iterable[ErrorSample]:
    """A gradient, indices or output of the wrong shape or dtype."""
    if backward:
        yield ErrorSample(good(gradOutput=S.array(rng, wrong, _F32)), INVALID, "gradOutput of the wrong shape")
        yield ErrorSample(
            good(gradOutput=S.array(rng, pooled, _F16)), INVALID, "gradOutput's dtype differs from self's"
        )
        if pool.kind == "max":
            yield ErrorSample(
                good(indices=np.zeros((*pooled[:-1], pooled[-1] + 1), np.int64)), INVALID, "indices of the wrong shape"
            )
        return
    yield ErrorSample(good(**{pool.forward_out: np.zeros(wrong, np.float32)}), INVALID, "out of the wrong shape")
    yield ErrorSample(good(**{pool.forward_out: np.zeros(pooled, np.float16)}), INVALID, "out's dtype differs")


# ----------------------------------------------------------------------------- accuracy
def _window_taps(spatial: int) -> Callable[[Mapping[str, Any], Mapping[str, Any]], int]:
    """A window's element count (the terms one average sums, or one backward element gathers), plus the division."""

    def length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
        kernel = [int(v) for v in args.get("kernelSize") or [1]]
        return math.prod(kernel * spatial if len(kernel) == 1 else kernel) + 1

    return length


def _adaptive_taps(spatial: int) -> Callable[[Mapping[str, Any], Mapping[str, Any]], int]:
    """An adaptive window's (or an input's covering windows') largest count, plus the division."""

    def length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
        lengths = tuple(getattr(args.get("self"), "shape", ()))[-spatial:]
        grad = args.get("gradOutput")
        sizes = tuple(grad.shape)[-spatial:] if grad is not None else tuple(args.get("outputSize") or ())
        if len(lengths) != spatial or len(sizes) != spatial or 0 in sizes or 0 in lengths:
            return 1
        return math.prod(max(-(-n // o), -(-o // n)) + 1 for n, o in zip(lengths, sizes)) + 1

    return length


def _accuracy(pool: Pool, backward: bool) -> Accuracy:
    if pool.kind == "max" and not backward:
        return exact("a selection: every output is an input element, every index a position")
    taps = (_adaptive_taps if pool.adaptive else _window_taps)(pool.spatial)
    if pool.kind == "max":
        return reduction(
            length_of=taps,
            reason="each input's gradient sums the gradients of the windows that chose it (at most one per window)",
        )
    what = "the window's gradients over their divisors" if backward else "the window's elements, then one division"
    return reduction(length_of=taps, reason=f"a sum of {what} in at least float32")


# ----------------------------------------------------------------------------- the specs
def _params(pool: Pool, backward: bool) -> tuple[Param, ...]:
    rank = {"min_rank": pool.spatial + 1, "max_rank": pool.spatial + 2, "formats": pool.formats}
    head: list[Param] = []
    if backward:
        head.append(tensor("gradOutput", FLOATS, **rank))  # type: ignore[arg-type]
    head.append(tensor("self", FLOATS, **rank))  # type: ignore[arg-type]
    if backward and pool.kind == "max":
        head.append(tensor("indices", pool.index_dtypes, **rank))  # type: ignore[arg-type]
    attrs: list[Param] = []
    if pool.adaptive:
        attrs += [] if backward else [int_array("outputSize")]
    else:
        stride_name, padding_name = ("stride", "padding") if backward else (pool.stride, pool.padding)
        attrs += [int_array("kernelSize"), int_array(stride_name), int_array(padding_name)]
        attrs += [int_array("dilation")] if pool.kind == "max" else []
        attrs.append(bool_attr("ceilMode"))
        attrs += [bool_attr("countIncludePad"), int_attr("divisorOverride")] if pool.kind == "avg" else []
        attrs += [int_attr("cubeMathType", c_type="int8_t", choices=CUBE_MATH_TYPES)] if pool.cube else []
    outs = rank | {"max_rank": pool.spatial + 2}
    outs.pop("min_rank")
    if backward:
        tail = [out(pool.backward_out, FLOATS, **outs)]  # type: ignore[arg-type]
    else:
        tail = [out(pool.forward_out, FLOATS, **outs)]  # type: ignore[arg-type]
        if pool.kind == "max":
            tail.append(out(pool.indices_out, pool.index_dtypes, **outs))  # type: ignore[arg-type]
    return (*head, *attrs, *tail)


def _spec(pool: Pool, backward: bool) -> OpSpec:
    kind = ("adaptive " if pool.adaptive else "") + ("average" if pool.kind == "avg" else "max")
    summary = f"{pool.spatial}-D {kind} pooling" + (" backward (the input's gradient)" if backward else "")
    if pool.kind == "max" and not backward:
        summary += " with the flat position of each maximum"
    return OpSpec(
        pool.backward if backward else pool.name,
        FAMILY,
        _params(pool, backward),
        _infer(pool, backward),
        samples=_samples(pool, backward),
        error_samples=_errors(pool, backward),
        summary=summary,
        accuracy=_accuracy(pool, backward),
    )


# ----------------------------------------------------------------------------- global pools
GLOBAL: dict[str, tuple[str, frozenset[D]]] = {
    "GlobalAveragePool": ("mean", frozenset({_F32, _F16, _BF16, D.ACL_DOUBLE})),
    "GlobalMaxPool": ("max", frozenset({_F32, _F16, D.ACL_DOUBLE})),
}
"""ONNX's global pools: every dim after the first two reduced to 1 (the mean, or the maximum with NaN winning)."""
_GLOBAL_FORMATS = frozenset({_ND, _NCHW, _NCDHW})


def _infer_global(call: Call) -> Infos:
    x = tensor_arg(call, "self")
    if x.numel == 0:
        raise invalid(f"self {list(x.shape)} is empty; pooling takes no empty tensor")
    return {"out": same((*x.shape[:2], *(1,) * (x.rank - 2)), x.dtype)}


def _global_samples(op: str) -> Callable[[np.random.Generator], Iterable[Sample]]:
    dtypes = sorted(GLOBAL[op][1], key=int)

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        shapes = [(2, 3, 5, 6), (1, 4, 3, 5, 7), (2, 2, 3, 2, 2, 3), (1, 2, 2, 1, 2, 1, 3, 2), (3, 5, 1, 1)]
        for i, shape in enumerate(shapes):
            dt = dtypes[i % len(dtypes)]
            yield Sample({"self": S.array(rng, shape, dt)}, f"{dt.short} {list(shape)}")
        x = S.array(rng, (2, 3, 4, 4), _F32)
        x[0, 0, 1, 2], x[0, 1, 3, 3], x[1, 2, 0, 0], x[1, 2, 2, 1] = np.nan, np.inf, -np.inf, np.inf
        yield Sample({"self": x}, "float32 NaN and infinities")

    return gen


def _global_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    x = S.array(rng, (2, 3, 4, 5), _F32)
    yield ErrorSample({"self": S.array(rng, (2, 3, 4), _F32)}, INVALID, "self of rank 3")
    yield ErrorSample({"self": S.array(rng, (1,) * 9, _F32)}, INVALID, "self of rank 9")
    yield ErrorSample({"self": S.array(rng, (2, 3, 0, 5), _F32)}, INVALID, "empty self")
    yield ErrorSample({"self": x, "out": np.zeros((2, 3, 4, 1), np.float32)}, INVALID, "out keeps a spatial dim")
    yield ErrorSample({"self": x, "out": np.zeros((2, 3, 1), np.float32)}, INVALID, "out of another rank")
    yield ErrorSample({"self": x, "out": np.zeros((2, 3, 1, 1), np.float16)}, INVALID, "out's dtype differs")


def _global_spec(op: str) -> OpSpec:
    mode, dtypes = GLOBAL[op]
    accuracy = (
        exact("a selection: the maximum of the plane (NaN where the plane holds one)")
        if mode == "max"
        else reduction(reason="the mean of a plane: a sum in at least float32, then one division")
    )
    return OpSpec(
        op,
        FAMILY,
        (
            tensor("self", dtypes, min_rank=4, max_rank=8, formats=_GLOBAL_FORMATS),
            out("out", dtypes, max_rank=8, formats=_GLOBAL_FORMATS),
        ),
        _infer_global,
        samples=_global_samples(op),
        error_samples=_global_errors,
        summary=f"global {'average' if mode == 'mean' else 'max'} pooling over every dim after N and C",
        accuracy=accuracy,
    )


# ----------------------------------------------------------------------------- MaxPool (ONNX's)
MAX_POOL = "MaxPool"
MAX_POOL_DTYPES = frozenset(
    {_F16, _F32, _BF16, D.ACL_INT32, D.ACL_INT64, D.ACL_UINT8, D.ACL_INT16, D.ACL_INT8, D.ACL_UINT16}
)


def _onnx_pads(values: Sequence[int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """(begin, end) pads of H and W from ``pads``: none, one for all, [H, W] or [top, left, bottom, right]."""
    if len(values) == 0:
        return (0, 0), (0, 0)
    if len(values) == 1:
        return (values[0], values[0]), (values[0], values[0])
    if len(values) == 2:
        return (values[0], values[0]), (values[1], values[1])
    if len(values) == 4:
        return (values[0], values[2]), (values[1], values[3])
    raise invalid(f"pads has {len(values)} values; MaxPool takes 0, 1, 2 or 4")


def _infer_max_pool(call: Call) -> Infos:
    x = tensor_arg(call, "self")
    if x.rank not in (3, 4):
        raise invalid(f"self has rank {x.rank}; MaxPool takes rank 3 or 4")
    if x.numel == 0:
        raise invalid(f"self {list(x.shape)} is empty; pooling takes no empty tensor")
    kernel = _per_dim(_values(call, "kernelShape"), "kernelShape", 2)
    if any(k <= 0 for k in kernel):
        raise invalid(f"kernelShape {list(kernel)} must be > 0")
    stride = _per_dim(_values(call, "strides"), "strides", 2, default=(1, 1))
    if any(v <= 0 for v in stride):
        raise invalid(f"strides {list(stride)} must be > 0")
    if int(call.args["autoPad"]) != 0:
        raise invalid(f"autoPad {call.args['autoPad']} is not supported; only 0 (NOTSET)")
    dilations = _values(call, "dilations")
    if len(dilations) not in (0, 1, 2, 4) or any(d != 1 for d in dilations):
        raise invalid(f"dilations {list(dilations)} must be 0, 1, 2 or 4 values of 1")
    pads = _onnx_pads(_values(call, "pads"))
    for (begin, end), k in zip(pads, kernel):
        if begin < 0 or end < 0 or begin + end > k or max(begin, end) >= k:
            raise invalid(
                f"pads {list(pads)}: each must be >= 0 and below kernelShape {list(kernel)}, their sum at most it"
            )
    lengths = tuple(x.shape[-2:])
    ceil = int(call.args["ceilMode"]) != 0
    sizes = []
    for n, k, st, (begin, end) in zip(lengths, kernel, stride, pads):
        span = n + begin + end - k
        size = (-(-span // st) if ceil else span // st) + 1
        if ceil and (size - 1) * st >= n + begin:
            size -= 1
        sizes.append(size)
    if any(n <= 0 for n in sizes):
        raise invalid(f"self's spatial sizes {list(lengths)} give an empty output {sizes}")
    begins = tuple(b for b, _ in pads)
    lead = tuple(x.shape[:-2])
    call.plan["pool"] = Geometry(kernel, stride, begins, (1, 1), lengths, tuple(sizes), lead)
    return {"out": same((*lead, *sizes), x.dtype)}


def _max_pool_args(rng: np.random.Generator, shape: tuple[int, ...], dt: D, **over: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "self": S.array(rng, shape, dt, special=dt.is_float),
        "kernelShape": [3],
        "strides": [2],
        "autoPad": 0,
        "pads": [1],
        "dilations": [1],
        "ceilMode": 0,
    }
    return args | over


def _max_pool_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for i, dt in enumerate(sorted(MAX_POOL_DTYPES, key=int)):
        shape = ((2, 3, 7, 6), (3, 5, 9))[i % 2]
        yield Sample(_max_pool_args(rng, shape, dt), f"{dt.short} {list(shape)} k3 s2 pads [1]")
    yield Sample(
        _max_pool_args(rng, (1, 2, 6, 7), _F32, kernelShape=[3, 2], strides=[], pads=[2, 0, 0, 1], ceilMode=1),
        "float32 pads [top, left, bottom, right], default strides, ceilMode",
    )
    yield Sample(
        _max_pool_args(rng, (2, 2, 9, 11), _F16, kernelShape=[4, 3], strides=[3, 2], pads=[1, 1], ceilMode=5),
        "float16 pads [H, W], ceilMode 5 (any nonzero)",
    )
    x = np.iinfo(np.int64)
    big = np.array([[[[x.max, x.max - 1, 3], [x.min, x.max - 1, -1], [0, x.min, x.max]]]], np.int64)
    yield Sample(
        _max_pool_args(rng, (1,), D.ACL_INT64, self=big, kernelShape=[2], strides=[1], pads=[]),
        "int64 extremes (no float rounding)",
    )


def _max_pool_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    shape = (2, 3, 7, 6)

    def good(**over: Any) -> dict[str, Any]:
        return _max_pool_args(np.random.default_rng(0), shape, _F32, **over)

    yield ErrorSample(good(autoPad=1), INVALID, "autoPad other than NOTSET")
    yield ErrorSample(good(dilations=[2]), INVALID, "dilation 2")
    yield ErrorSample(good(dilations=[1, 1, 1]), INVALID, "three dilations")
    yield ErrorSample(good(pads=[1, 1, 1]), INVALID, "three pads")
    yield ErrorSample(good(pads=[3, 0, 0, 0]), INVALID, "a pad as large as the kernel")
    yield ErrorSample(good(pads=[2, 0, 2, 0]), INVALID, "pads summing past the kernel")
    yield ErrorSample(good(kernelShape=[0]), INVALID, "kernelShape 0")
    yield ErrorSample(good(kernelShape=[2, 2, 2]), INVALID, "kernelShape of three values")
    yield ErrorSample(good(strides=[0]), INVALID, "strides 0")
    yield ErrorSample(good(self=S.array(rng, (6, 7), _F32)), INVALID, "self of rank 2")
    yield ErrorSample(good(self=S.array(rng, (2, 3, 0, 6), _F32)), INVALID, "empty self")
    yield ErrorSample(good(out=np.zeros((2, 3, 4, 4), np.float32)), INVALID, "out of the wrong shape")
    yield ErrorSample(good(out=np.zeros((2, 3, 4, 3), np.float16)), INVALID, "out's dtype differs")


def _max_pool_spec() -> OpSpec:
    return OpSpec(
        MAX_POOL,
        FAMILY,
        (
            tensor("self", MAX_POOL_DTYPES, min_rank=3, max_rank=4, formats=frozenset({_ND})),
            int_array("kernelShape"),
            int_array("strides"),
            int_attr("autoPad"),
            int_array("pads"),
            int_array("dilations"),
            int_attr("ceilMode"),
            out("out", MAX_POOL_DTYPES, max_rank=4, formats=frozenset({_ND})),
        ),
        _infer_max_pool,
        samples=_max_pool_samples,
        error_samples=_max_pool_errors,
        summary="2-D max pooling with ONNX's attributes (asymmetric pads, integer dtypes; values only)",
        accuracy=exact("a selection: every output is an input element"),
    )


SPECS: list[OpSpec] = [
    *(_spec(p, b) for p in POOLS for b in (False, True)),
    *(_global_spec(op) for op in GLOBAL),
    _max_pool_spec(),
]
