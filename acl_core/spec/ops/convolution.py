"""The convolution family: aclnnConvolution (1-D, 2-D and 3-D by input rank; plain or transposed).

Layouts are channel-first (NCL / NCHW / NCDHW, or ND read the same way). Weights are
``[C_out, C_in / groups, *kernel]`` for a convolution and ``[C_in, C_out / groups, *kernel]`` for a
transposed one, as in PyTorch. ``padding`` may also be asymmetric where CANN allows it: two values
``[left, right]`` for a plain 1-D convolution and four ``[top, bottom, left, right]`` for 2-D.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.spec import samples as S
from acl_core.spec.accuracy import conv_length, reduction
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Sample,
    bool_attr,
    int_array,
    int_attr,
    invalid,
    nullptr,
    out,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.promotion import promote_types
from acl_core.spec.rules import FLOATS, listed, same, tensor_arg
from acl_core.tensor import AclIntArray, AclTensor

# the plan keys this family's rules write (acl_core.spec.plan; docs/KERNELS.md)
declare_plan("stride", "tuple[int, ...]", "the stride per spatial dim", tuple)
declare_plan("dilation", "tuple[int, ...]", "the dilation per spatial dim", tuple)
declare_plan("pads", "tuple[tuple[int, int], ...]", "the (before, after) padding per spatial dim", tuple)
declare_plan("groups", "int", "the channel groups", int)
declare_plan("transposed", "bool", "whether the convolution is transposed", bool)
declare_plan("output_padding", "tuple[int, ...]", "a transposed convolution's extra output size per spatial dim", tuple)

FAMILY = "convolution"
_F32, _F16, _BF16 = D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16
_LAYOUTS = frozenset({Format.ACL_FORMAT_ND, Format.ACL_FORMAT_NCL, Format.ACL_FORMAT_NCHW, Format.ACL_FORMAT_NCDHW})
_RANK_FORMAT = {3: Format.ACL_FORMAT_NCL, 4: Format.ACL_FORMAT_NCHW, 5: Format.ACL_FORMAT_NCDHW}
CUBE_MATH_TYPES = (0, 1, 2, 3)
"""KEEP_DTYPE, ALLOW_FP32_DOWN_PRECISION, USE_FP16, USE_HF32 (the values aclnnConvolution documents)."""
USE_FP16 = 2
MAX_GROUPS = 65535


def _ints(call: Call, name: str) -> tuple[int, ...] | None:
    arr = call.args.get(name)
    return tuple(int(v) for v in arr.values) if isinstance(arr, AclIntArray) else None


def _check_layout(t: AclTensor, name: str, rank: int) -> None:
    if t.format not in (Format.ACL_FORMAT_ND, _RANK_FORMAT[rank]):
        raise invalid(f"{name} has format {t.format.name}; a rank-{rank} convolution takes {_RANK_FORMAT[rank].name}")


def _pad_pairs(padding: Sequence[int], spatial: int, transposed: bool) -> tuple[tuple[int, int], ...]:
    """(begin, end) padding per spatial dim from CANN's padding array; 161002 on a length it refuses."""
    n = len(padding)
    if n == spatial:
        pairs = tuple((p, p) for p in padding)
    elif spatial == 1 and not transposed and n == 2:
        pairs = ((padding[0], padding[1]),)
    elif spatial == 2 and n == 4:
        pairs = ((padding[0], padding[1]), (padding[2], padding[3]))
    else:
        allowed = {spatial, 2 * spatial} if spatial == 2 or (spatial == 1 and not transposed) else {spatial}
        raise invalid(f"padding has {n} values; a {spatial}-D convolution takes {sorted(allowed)}")
    if any(p < 0 for p in padding):
        raise invalid(f"padding {list(padding)} must be >= 0")
    return pairs


def _positive(values: Sequence[int], name: str, spatial: int) -> tuple[int, ...]:
    if len(values) != spatial:
        raise invalid(f"{name} has {len(values)} values; expected {spatial} (input rank - 2)")
    if any(v <= 0 for v in values):
        raise invalid(f"{name} {list(values)} must be > 0")
    return tuple(values)


def _infer(call: Call) -> Infos:
    x, w = tensor_arg(call, "input"), tensor_arg(call, "weight")
    rank = x.rank
    if w.rank != rank:
        raise invalid(f"weight has rank {w.rank}; it must equal input's rank {rank}")
    _check_layout(x, "input", rank)
    _check_layout(w, "weight", rank)
    spatial = rank - 2
    transposed = bool(call.args["transposed"])
    groups = int(call.args["groups"])
    stride = _positive(_ints(call, "stride") or (), "stride", spatial)
    dilation = _positive(_ints(call, "dilation") or (), "dilation", spatial)
    pads = _pad_pairs(_ints(call, "padding") or (), spatial, transposed)
    kernel = tuple(w.shape[2:])
    if any(k <= 0 for k in kernel):
        raise invalid(f"weight's kernel dims {list(kernel)} must be > 0")
    if w.shape[0] % groups:
        raise invalid(f"weight.shape[0]={w.shape[0]} is not divisible by groups={groups}")
    if transposed:
        output_padding = _ints(call, "outputPadding")
        if output_padding is None:
            raise nullptr("outputPadding is null, but a transposed convolution needs it")
        if len(output_padding) != spatial:
            raise invalid(f"outputPadding has {len(output_padding)} values; expected {spatial}")
        for i, op in enumerate(output_padding):
            if op < 0 or (op >= stride[i] and op >= dilation[i]):
                raise invalid(f"outputPadding[{i}]={op} must be >= 0 and smaller than stride[{i}] or dilation[{i}]")
        if w.shape[0] != x.shape[1]:
            raise invalid(f"weight.shape[0]={w.shape[0]} must equal input's channels {x.shape[1]} when transposed")
        if any(d <= 0 for d in x.shape[1:]):
            raise invalid(f"input {list(x.shape)}: a transposed convolution needs every dim but the batch > 0")
        out_channels = w.shape[1] * groups
        sizes = tuple(
            (x.shape[2 + i] - 1) * stride[i] - sum(pads[i]) + dilation[i] * (kernel[i] - 1) + output_padding[i] + 1
            for i in range(spatial)
        )
        if any(s <= 0 for s in sizes):
            raise invalid(f"padding {list(pads)} leaves an empty output {list(sizes)}")
        call.plan["output_padding"] = tuple(output_padding)
    else:
        if w.shape[1] * groups != x.shape[1]:
            raise invalid(
                f"input has {x.shape[1]} channels; weight.shape[1]={w.shape[1]} times groups={groups} must equal it"
            )
        out_channels = w.shape[0]
        reach = [x.shape[2 + i] + sum(pads[i]) - dilation[i] * (kernel[i] - 1) - 1 for i in range(spatial)]
        if any(r < 0 for r in reach):
            raise invalid(
                f"the padded input {[x.shape[2 + i] + sum(pads[i]) for i in range(spatial)]} is smaller than "
                f"the dilated kernel {[dilation[i] * (kernel[i] - 1) + 1 for i in range(spatial)]}"
            )
        sizes = tuple(r // s + 1 for r, s in zip(reach, stride))
    bias = call.args.get("bias")
    if isinstance(bias, AclTensor) and (bias.rank != 1 or bias.shape[0] != out_channels):
        raise invalid(f"bias must be 1-D with {out_channels} elements (the output channels), not {list(bias.shape)}")
    result = promote_types(x.dtype, w.dtype)
    if int(call.args["cubeMathType"]) == USE_FP16 and D.ACL_BF16 in (x.dtype, w.dtype):
        raise invalid("cubeMathType=2 (USE_FP16) is not supported for bf16 inputs")
    out_t = call.args.get("output")
    if isinstance(out_t, AclTensor):
        _check_layout(out_t, "output", rank)
    call.plan.update(stride=stride, dilation=dilation, pads=pads, groups=groups, transposed=transposed, sizes=sizes)
    shape = (x.shape[0], out_channels, *sizes)
    # CANN lets a plain convolution write any float output; a transposed one keeps the inputs' dtype.
    return {"output": same(shape, result) if transposed else listed(shape, result)}


# ----------------------------------------------------------------------------- conformance cases
def _case(
    rng: np.random.Generator,
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    dt: D,
    *,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int = 1,
    transposed: bool = False,
    output_padding: Sequence[int] | None = None,
    bias: bool = True,
    w_dt: D | None = None,
) -> dict[str, object]:
    out_channels = w_shape[1] * groups if transposed else w_shape[0]
    args: dict[str, object] = {
        "input": S.array(rng, x_shape, dt, low=-2, high=2),
        "weight": S.array(rng, w_shape, dt if w_dt is None else w_dt, low=-1, high=1),
        "bias": S.array(rng, (out_channels,), dt) if bias else None,
        "stride": list(stride),
        "padding": list(padding),
        "dilation": list(dilation),
        "transposed": transposed,
        "outputPadding": list(output_padding) if output_padding is not None else [0] * len(stride),
        "groups": groups,
        "cubeMathType": 0,
    }
    return args


def geometry_cases(
    rng: np.random.Generator, make: Callable[..., dict[str, object]]
) -> Iterator[tuple[dict[str, object], str]]:
    """The geometries every convolution op samples (1-3-D, groups, dilation, asymmetric padding, transposed), one
    call each built by ``make(rng, input shape, weight shape, dtype, **geometry)``; ``bias=False`` marks a call
    without a bias."""
    for dt in (_F32, _F16, _BF16):
        yield (
            make(rng, (2, 4, 6, 5), (4, 2, 3, 3), dt, stride=[1, 2], padding=[1, 1], dilation=[2, 1], groups=2),
            f"{dt.short} 2-D, groups 2, stride [1, 2], dilation [2, 1]",
        )
    yield (make(rng, (2, 4, 9), (6, 4, 3), _F32, stride=[2], padding=[1], dilation=[1]), "1-D, stride 2")
    yield (
        make(rng, (1, 3, 8), (2, 3, 2), _F16, stride=[1], padding=[2, 1], dilation=[3], bias=False),
        "1-D, asymmetric padding [2, 1], dilation 3",
    )
    yield (
        make(rng, (1, 2, 5, 6), (3, 2, 2, 3), _F32, stride=[2, 1], padding=[1, 0, 2, 1], dilation=[1, 1]),
        "2-D, padding [top, bottom, left, right]",
    )
    yield (
        make(rng, (2, 3, 5, 5), (3, 1, 3, 3), _BF16, stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=3),
        "2-D depthwise",
    )
    yield (
        make(rng, (1, 2, 4, 5, 4), (3, 2, 2, 2, 3), _F32, stride=[1, 2, 1], padding=[0, 1, 1], dilation=[1, 1, 2]),
        "3-D",
    )
    yield (
        make(
            rng, (2, 4, 5), (4, 3, 3), _F32, stride=[2], padding=[1], dilation=[1], transposed=True, output_padding=[1]
        ),
        "transposed 1-D, stride 2, outputPadding 1",
    )
    yield (
        make(
            rng,
            (1, 4, 3, 4),
            (4, 2, 3, 3),
            _F16,
            stride=[2, 2],
            padding=[1, 0],
            dilation=[1, 2],
            groups=2,
            transposed=True,
            output_padding=[1, 1],
        ),
        "transposed 2-D, groups 2, dilation [1, 2]",
    )
    yield (
        make(
            rng,
            (1, 2, 2, 3, 2),
            (2, 1, 2, 2, 2),
            _F32,
            stride=[2, 1, 2],
            padding=[0, 0, 1],
            dilation=[1, 1, 1],
            transposed=True,
            output_padding=[1, 0, 0],
            bias=False,
        ),
        "transposed 3-D",
    )


def _samples(rng: np.random.Generator) -> Iterable[Sample]:
    for args, label in geometry_cases(rng, _case):
        yield Sample(args, label if args["bias"] is not None else f"{label}, no bias")
    yield Sample(
        _case(rng, (0, 2, 4, 4), (3, 2, 3, 3), _F32, stride=[1, 1], padding=[1, 1], dilation=[1, 1]), "empty batch"
    )
    yield Sample(
        _case(rng, (1, 2, 4, 4), (2, 2, 3, 3), _F16, stride=[1, 1], padding=[0, 0], dilation=[1, 1], w_dt=_F32),
        "float16 input, float32 weight",
    )


def _errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    def good(**over: object) -> dict[str, object]:
        args = _case(
            np.random.default_rng(0),
            (1, 4, 6, 6),
            (4, 2, 3, 3),
            _F32,
            stride=[1, 1],
            padding=[1, 1],
            dilation=[1, 1],
            groups=2,
        )
        args.update(over)
        return args

    yield ErrorSample(good(groups=3), INVALID, "channels not divisible into groups")
    yield ErrorSample(good(groups=1), INVALID, "weight channels times groups differ from the input's")
    yield ErrorSample(good(groups=0), INVALID, "groups 0")
    yield ErrorSample(good(bias=np.zeros(3, np.float32)), INVALID, "bias of the wrong length")
    yield ErrorSample(good(stride=[1]), INVALID, "stride of the wrong length")
    yield ErrorSample(good(stride=[1, 0]), INVALID, "stride 0")
    yield ErrorSample(good(dilation=[0, 1]), INVALID, "dilation 0")
    yield ErrorSample(good(padding=[1, -1]), INVALID, "negative padding")
    yield ErrorSample(good(padding=[1, 1, 1]), INVALID, "three padding values for 2-D")
    yield ErrorSample(good(padding=[0, 0], dilation=[4, 1]), INVALID, "dilated kernel larger than the input")
    yield ErrorSample(good(weight=S.array(rng, (4, 2, 3), _F32)), INVALID, "weight rank differs from input's")
    yield ErrorSample(good(output=np.zeros((1, 4, 5, 5), np.float32)), INVALID, "output of the wrong shape")
    yield ErrorSample(good(cubeMathType=7), INVALID, "unknown cubeMathType")
    yield ErrorSample(
        good(
            input=S.array(rng, (1, 4, 6, 6), _BF16),
            weight=S.array(rng, (4, 2, 3, 3), _BF16),
            bias=None,
            cubeMathType=USE_FP16,
        ),
        INVALID,
        "USE_FP16 with bf16",
    )
    yield ErrorSample(
        good(transposed=True, weight=S.array(rng, (4, 2, 3, 3), _F32), stride=[2, 2], outputPadding=[2, 0]),
        INVALID,
        "outputPadding not below stride or dilation",
    )
    yield ErrorSample(
        good(transposed=True, weight=S.array(rng, (4, 2, 3, 3), _F32), outputPadding=[0]),
        INVALID,
        "outputPadding of the wrong length",
    )
    yield ErrorSample(good(input=S.array(rng, (6, 4), _F32)), INVALID, "2-D input")


SPECS: list[OpSpec] = [
    OpSpec(
        "Convolution",
        FAMILY,
        (
            tensor("input", FLOATS, min_rank=3, max_rank=5, formats=_LAYOUTS),
            tensor("weight", FLOATS, min_rank=3, max_rank=5, formats=_LAYOUTS),
            tensor("bias", FLOATS, optional=True, formats=_LAYOUTS),
            int_array("stride"),
            int_array("padding"),
            int_array("dilation"),
            bool_attr("transposed"),
            int_array("outputPadding", optional=True),
            int_attr("groups", bounds=(1, MAX_GROUPS)),
            out("output", FLOATS, formats=_LAYOUTS),
            int_attr("cubeMathType", c_type="int8_t", choices=CUBE_MATH_TYPES),
        ),
        _infer,
        samples=_samples,
        error_samples=_errors,
        summary="N-D convolution or transposed convolution with stride, padding, dilation and groups",
        accuracy=reduction(
            length_of=conv_length,
            reason="a sum of Cin/groups·taps products (and the bias) in at least float32: γ_n·(|x|∗|w| + |b|)",
        ),
    )
]
