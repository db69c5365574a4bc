"""The convolution's training backward (issue 16): aclnnConvolutionBackward.

The gradients of ``Convolution`` (acl_core/spec/ops/convolution.py), taking the forward op's
arguments and the gradient of its output:

* plain: ``gradInput`` is the transposed convolution of gradOutput with the same weight, stride,
  padding, dilation and groups, cropped to the input's size; ``gradWeight[oc, c, k] = Σ_n,o
  gradOutput[n, oc, o]·input[n, g·C/g + c, o·stride - pad + k·dilation]``; ``gradBias[oc] = Σ_n,o
  gradOutput[n, oc, o]``;
* transposed: ``gradInput`` is the plain convolution of gradOutput with the weight; ``gradWeight`` is
  the plain convolution's weight gradient with the roles of input and gradOutput swapped.

The forward op's shape rules apply (1-D, 2-D, 3-D; groups, dilation, asymmetric padding where the
forward takes it); gradOutput must have the forward output's shape. Choices where the CANN page is
silent: gradInput takes the input's dtype and gradBias gradOutput's (as documented), gradWeight the
weight's; the products are formed in the three inputs' promoted dtype, ``cubeMathType`` acting on it
as for the forward op; a false ``outputMask`` entry leaves its output unwritten. The page names
gradInput and gradWeight among the pointers that must never be null (161001), gradBias only when the
mask asks for it; outputPadding must be all zeros for a plain convolution (161002). The HIFLOAT8 /
FLOAT8_E4M3FN transposed gradInput of the Ascend 950 is not declared (no forward op takes them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.spec import samples as S
from acl_core.spec.accuracy import reduction
from acl_core.spec.ops import convolution as conv
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Sample,
    bool_array,
    bool_attr,
    int_array,
    int_attr,
    invalid,
    nullptr,
    out,
    tensor,
)
from acl_core.spec.plan import declare
from acl_core.spec.rules import FLOATS, same, tensor_arg
from acl_core.tensor import AclBoolArray, AclIntArray

declare("output_mask", "tuple[bool, ...]", "outputMask: which of the op's gradients to compute", tuple)

FAMILY = "conv_grad"
OUTPUTS = ("gradInput", "gradWeight", "gradBias")
_F32, _F16, _BF16 = D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16
_LAYOUTS = frozenset({Format.ACL_FORMAT_ND, Format.ACL_FORMAT_NCL, Format.ACL_FORMAT_NCHW, Format.ACL_FORMAT_NCDHW})
_FORWARD = conv.SPECS[0]
_FORWARD_ARGS = ("input", "weight", "stride", "padding", "dilation", "transposed", "outputPadding", "groups")


def _mask(call: Call) -> tuple[bool, bool, bool]:
    arr = call.args["outputMask"]
    assert isinstance(arr, AclBoolArray)
    if len(arr.values) != 3:
        raise invalid(f"outputMask has {len(arr.values)} entries; expected 3 (gradInput, gradWeight, gradBias)")
    mask = (bool(arr.values[0]), bool(arr.values[1]), bool(arr.values[2]))
    for name, wanted in zip(OUTPUTS, mask):
        if wanted and call.outputs_required and call.args.get(name) is None:
            raise nullptr(f"{name} is null, but outputMask asks for it")
    return mask


def _infer(call: Call) -> Infos:
    dy, x, w = tensor_arg(call, "gradOutput"), tensor_arg(call, "input"), tensor_arg(call, "weight")
    forward = Call(_FORWARD, {name: call.args.get(name) for name in _FORWARD_ARGS})
    forward.args.update(bias=None, output=None, cubeMathType=call.args["cubeMathType"])
    result = _FORWARD.infer(forward)["output"]
    assert result is not None and not isinstance(result, list)
    if tuple(dy.shape) != result.shape:
        raise invalid(f"gradOutput has shape {list(dy.shape)}; the convolution's output is {list(result.shape)}")
    if dy.format not in (Format.ACL_FORMAT_ND, x.format):
        raise invalid(f"gradOutput has format {dy.format.name}; it must match input's {x.format.name}")
    if int(call.args["cubeMathType"]) == conv.USE_FP16 and dy.dtype == _BF16:
        raise invalid("cubeMathType=2 (USE_FP16) is not supported for bf16 inputs")
    padding_out = call.args.get("outputPadding")
    if not forward.plan["transposed"] and isinstance(padding_out, AclIntArray):
        if len(padding_out.values) != x.rank - 2 or any(int(v) for v in padding_out.values):
            raise invalid(f"outputPadding {list(padding_out.values)} must be {x.rank - 2} zeros when not transposed")
    sizes = call.args["biasSizes"]
    assert isinstance(sizes, AclIntArray)
    channels = dy.shape[1]
    if [int(v) for v in sizes.values] != [channels]:
        raise invalid(f"biasSizes {list(sizes.values)} must be [{channels}] (the output channels)")
    mask = _mask(call)
    call.plan.update(forward.plan)
    call.plan["output_mask"] = mask
    infos = (same(x.shape, x.dtype), same(w.shape, w.dtype), same((channels,), dy.dtype))
    return {name: info if wanted else None for name, info, wanted in zip(OUTPUTS, infos, mask)}


def grad_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """The longest of the three sums: gradInput's C/groups·taps and gradWeight's / gradBias's N·positions, + 1."""
    w, x, dy = (tuple(np.shape(args[n])) for n in ("weight", "input", "gradOutput"))
    groups = max(int(args.get("groups", 1) or 1), 1)
    taps = math.prod(w[2:])
    per_input = (w[1] if args.get("transposed") else w[0] // groups) * taps
    positions = x[0] * math.prod((x if args.get("transposed") else dy)[2:])
    return max(per_input, positions, 1) + 1


# ----------------------------------------------------------------------------- conformance cases
def case(
    rng: np.random.Generator,
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    dt: D,
    mask: tuple[bool, bool, bool] = (True, True, True),
    *,
    cube: int = 0,
    w_dt: D | None = None,
    **geometry: Any,
) -> dict[str, object]:
    """A ConvolutionBackward call: the forward op's sample arguments plus gradOutput of the output's shape."""
    geometry.pop("bias", None)  # the backward call has no bias tensor: biasSizes below
    fwd = conv._case(rng, x_shape, w_shape, dt, bias=False, w_dt=w_dt, **geometry)
    shape = _output_shape(fwd)
    channels = shape[1]
    args = {name: fwd[name] for name in _FORWARD_ARGS}
    args.update(
        gradOutput=S.array(rng, shape, dt, low=-1, high=1),
        biasSizes=[channels],
        outputMask=list(mask),
        cubeMathType=cube,
    )
    return args


def _output_shape(fwd: Mapping[str, Any]) -> tuple[int, ...]:
    """The forward op's output shape for these NumPy arguments (the formulas its rule applies)."""
    x, w = np.shape(fwd["input"]), np.shape(fwd["weight"])
    transposed, groups = bool(fwd["transposed"]), int(fwd["groups"])
    pads = conv._pad_pairs(fwd["padding"], len(x) - 2, transposed)
    sizes = []
    for i, (length, k) in enumerate(zip(x[2:], w[2:])):
        s, d, span = fwd["stride"][i], fwd["dilation"][i], sum(pads[i])
        if transposed:
            sizes.append((length - 1) * s - span + d * (k - 1) + fwd["outputPadding"][i] + 1)
        else:
            sizes.append((length + span - d * (k - 1) - 1) // s + 1)
    return (x[0], w[1] * groups if transposed else w[0], *sizes)


def _samples(rng: np.random.Generator) -> Iterable[Sample]:
    for args, label in conv.geometry_cases(rng, case):
        yield Sample(args, label)
    geometry: dict[str, Any] = {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1]}
    yield Sample(case(rng, (2, 3, 4, 4), (2, 3, 3, 3), _F32, (True, False, False), **geometry), "gradInput only")
    yield Sample(case(rng, (2, 3, 4, 4), (2, 3, 3, 3), _F16, (False, True, True), **geometry), "no gradInput")
    yield Sample(case(rng, (0, 2, 4, 4), (3, 2, 3, 3), _F32, **geometry), "empty batch: zero weight and bias gradients")
    yield Sample(
        case(rng, (1, 2, 4, 4), (2, 2, 3, 3), _F16, w_dt=_F32, stride=[1, 1], padding=[0, 0], dilation=[1, 1]),
        "float16 input, float32 weight",
    )
    yield Sample(case(rng, (2, 3, 5, 4), (4, 3, 2, 2), _F32, cube=1, **geometry), "float32, cubeMathType 1 (HF32)")


def _errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    def good(**over: object) -> dict[str, object]:
        geometry: dict[str, Any] = {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 2}
        args = case(np.random.default_rng(0), (1, 4, 6, 6), (4, 2, 3, 3), _F32, **geometry)
        args.update(over)
        return args

    yield ErrorSample(good(gradOutput=np.zeros((1, 4, 5, 6), np.float32)), INVALID, "gradOutput of the wrong shape")
    yield ErrorSample(good(groups=3), INVALID, "channels not divisible into groups")
    yield ErrorSample(good(stride=[1, 0]), INVALID, "stride 0")
    yield ErrorSample(good(padding=[1, 1, 1]), INVALID, "three padding values for 2-D")
    yield ErrorSample(good(biasSizes=[3]), INVALID, "biasSizes not the output channels")
    yield ErrorSample(good(biasSizes=[4, 1]), INVALID, "biasSizes of two values")
    yield ErrorSample(good(outputPadding=[1, 0]), INVALID, "non-zero outputPadding, not transposed")
    yield ErrorSample(good(outputMask=[True, True]), INVALID, "outputMask of two entries")
    yield ErrorSample(good(cubeMathType=7), INVALID, "unknown cubeMathType")
    yield ErrorSample(good(gradWeight=np.zeros((4, 2, 3, 3), np.float16)), INVALID, "gradWeight of another dtype")
    base = good()
    bf16 = {n: S.array(rng, np.shape(np.asarray(base[n])), _BF16) for n in ("gradOutput", "input", "weight")}
    yield ErrorSample(good(cubeMathType=conv.USE_FP16, **bf16), INVALID, "USE_FP16 with bf16")


SPECS: list[OpSpec] = [
    OpSpec(
        "ConvolutionBackward",
        FAMILY,
        (
            tensor("gradOutput", FLOATS, min_rank=3, max_rank=5, formats=_LAYOUTS),
            tensor("input", FLOATS, min_rank=3, max_rank=5, formats=_LAYOUTS),
            tensor("weight", FLOATS, min_rank=3, max_rank=5, formats=_LAYOUTS),
            int_array("biasSizes"),
            int_array("stride"),
            int_array("padding"),
            int_array("dilation"),
            bool_attr("transposed"),
            int_array("outputPadding"),
            int_attr("groups", c_type="int", bounds=(1, conv.MAX_GROUPS)),
            bool_array("outputMask"),
            int_attr("cubeMathType", c_type="int8_t", choices=conv.CUBE_MATH_TYPES),
            out("gradInput", FLOATS, optional=True, formats=_LAYOUTS),
            out("gradWeight", FLOATS, optional=True, formats=_LAYOUTS),
            out("gradBias", FLOATS, optional=True),
        ),
        _infer,
        samples=_samples,
        error_samples=_errors,
        summary="gradients of Convolution (plain or transposed) for input, weight and bias, as outputMask asks",
        accuracy=reduction(
            length_of=grad_length,
            reason="each gradient is a sum of products (gradInput C/groups·taps of gradOutput·weight, gradWeight "
            "N·positions of gradOutput·input, gradBias N·positions of gradOutput) in at least float32: "
            "γ_n·M with n the longest",
        ),
    )
]
