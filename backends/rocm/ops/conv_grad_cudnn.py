"""The cuDNN path of ConvolutionBackward on NVIDIA: ``conv_dgrad`` / ``conv_wgrad`` / ``conv_fprop`` graphs.

Opt-in (``ACL_CONV_GRAD_PATH=cudnn``; ``gemm``, the default, is the im2col path AMD runs). A plain
convolution's gradInput is cuDNN's data gradient of gradOutput with the weight, a transposed one's the
forward convolution of gradOutput (weight ``[C_in, C_out/g, *k]`` is that convolution's filter); gradWeight
is cuDNN's weight gradient of the convolution reading ``a`` and writing ``b`` (plain: input, gradOutput;
transposed: gradOutput, input). Groups are implied by the channel counts, 1-D calls run as 2-D ones with a
unit height. gradBias stays the reduction family's row sum. One graph per gradient and :class:`ConvKey`
(no addresses), built and cached by :mod:`acl_rocm.ops.cudnn_graphs` (plan cache kind ``cudnn_conv``).

Numerics follow the spec's accuracy class (sums of products in at least float32, one rounding): engines
whose notes say reduced-precision reduction, FFT or Winograd transforms are deselected, and for float32 the
tensor-core (TF32) and down-converting engines too unless ``CANN_FAST_TF32`` allows TF32, the rule the
forward's GEMMs follow with ``cubeMathType`` 0. Float32 with cubeMathType 1 or 3 reaches cuDNN as the GEMM
path computes it: operands HF32-rounded into dense float32 temporaries, float32 sums without TF32. cubeMathType 2
(fp16 operands) keeps the GEMM path, as do mixed dtypes, empty or overlapping views, unaligned addresses and a
transposed call whose outputPadding reaches its stride (:func:`cudnn_refusal`). ``cudnn`` keeps to deterministic
engines (the GEMM path is deterministic, and captured replays repeat eager bits); ``cudnn-nondet`` lets cuDNN pick
engines that sum with atomics too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Final

from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, RtErrorCode
from acl_core.formats import Format
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.ops.cudnn_graphs import CudnnGraphs, _Built, address

PATH_ENV: Final = "ACL_CONV_GRAD_PATH"
PATHS: Final = ("gemm", "cudnn", "cudnn-nondet")
"""``gemm``: im2col / col2im + GEMM; ``cudnn`` (the default): cuDNN's deterministic engines where
:func:`cudnn_refusal` allows (395 TFLOP/s at N32 C256 56x56 3x3 bf16 on an H100, 2026-12-07, torch 401, the GEMM path
62); ``cudnn-nondet``: its non-deterministic ones (atomic split sums) too."""
PLAN_KIND: Final = "cudnn_conv"
CONV_RECIPE: Final = 1
"""Version of how :meth:`CudnnConv._build` makes a graph (options, heuristics, deselected notes)."""
ROLES: Final = ("a", "b", "out")
PYTHON_ENGINES: Final = ("frost_conv",)
"""The frontend's python (CuTe DSL) convolution engines, deselected: they import torch."""
EXACT_NOTES: Final = (
    "REDUCED_PRECISION_REDUCTION",
    "FFT",
    "WINOGRAD",
    "WINOGRAD_TILE_4x4",
    "WINOGRAD_TILE_6x6",
    "WINOGRAD_TILE_13x13",
)
"""Numeric notes of engines whose sums are not the plain float32 sums of products the spec bounds."""
TF32_NOTES: Final = ("TENSOR_CORE", "DOWN_CONVERT_INPUTS")
"""Numeric notes of float32 engines that round the operands (TF32 tensor cores)."""
CUDNN_DTYPES: Final = frozenset({D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16})
ALIGN: Final = 16
INPUTS: Final = ("gradOutput", "input", "weight")

Dims = tuple[int, ...]


@dataclass(frozen=True)
class ConvKey:
    """Everything one cuDNN convolution graph depends on (no addresses: alignment is checked before routing).

    ``op`` names the node and the roles: dgrad reads loss ``a`` and filter ``b`` into DX, wgrad image ``a`` and
    loss ``b`` into DW, fprop image ``a`` and weight ``b`` into Y (``out``).
    """

    device: int
    op: str
    dtype: D
    a: tuple[Dims, Dims]
    b: tuple[Dims, Dims]
    out: tuple[Dims, Dims]
    pre: Dims
    post: Dims
    stride: Dims
    dilation: Dims
    tf32: bool
    deterministic: bool


def as_2d(t: AclTensor) -> tuple[Dims, Dims]:
    """(dims, strides) of a view, a 1-D convolution's ``[N, C, L]`` as ``[N, C, 1, L]``."""
    dims, strides = tuple(t.view_dims), tuple(t.strides)
    if len(dims) == 3:
        return (dims[0], dims[1], 1, dims[2]), (strides[0], strides[1], dims[2] * strides[2], strides[2])
    return dims, strides


def spatial_2d(values: tuple[int, ...], fill: int) -> Dims:
    """A 1-D convolution's per-dim values with the unit height's in front."""
    return (fill, *values) if len(values) == 1 else tuple(values)


def dense_like(t: AclTensor, at: int = 0) -> AclTensor:
    """A contiguous float32 tensor of ``t``'s shape at ``at`` (0: a descriptor for the graph key, no storage)."""
    shape = tuple(t.view_dims)
    return AclTensor(shape, D.ACL_FLOAT, contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, at)


def overlap_refusal(name: str, t: AclTensor) -> str | None:
    """Why cuDNN should not read or write ``t`` (None when its elements are distinct and its address aligned)."""
    dims = [(d, s) for d, s in zip(t.view_dims, t.strides) if d > 1]
    if any(s <= 0 for _, s in dims):
        return f"{name} has a zero or negative stride {tuple(t.strides)}"
    span = 1
    for d, s in sorted(dims, key=lambda ds: ds[1]):
        if s < span:
            return f"{name} strides {tuple(t.strides)} overlap"
        span = s * d
    if address(t) % ALIGN:
        return f"{name} is not {ALIGN}-byte aligned"
    return None


def order_refusal(name: str, t: AclTensor) -> str | None:
    """Why cuDNN would misread ``t``'s layout (None when its strides fall in NC[D]HW or N[D]HWC order).

    cuDNN's convolution engines take channel-first or channel-last strides, padded or not; an H100 run of
    2026-12-07 gave wrong gradients for views with other orders (the conformance's transposed layout, every
    dim's stride reversed).
    """
    rank = len(t.view_dims)
    orders = (tuple(range(rank)), (0, *range(2, rank), 1))
    live = [d for d in range(rank) if t.view_dims[d] > 1]
    for order in orders:
        kept = [d for d in order if d in live]
        if all(t.strides[a] >= t.strides[b] for a, b in itertools.pairwise(kept)):
            return None
    return f"{name} strides {tuple(t.strides)} are in neither channel-first nor channel-last order"


def cudnn_refusal(
    tensors: dict[str, AclTensor],
    precision: str | None,
    transposed: bool,
    stride: tuple[int, ...],
    output_padding: tuple[int, ...],
) -> str | None:
    """Why cuDNN cannot compute this call under the spec's contract (None when it can).

    ``tensors``: gradOutput, input, weight and each output the mask asks for. With HF32 operands (cubeMathType 1
    or 3) cuDNN reads rounded dense copies of the inputs, so only the outputs' views matter.
    """
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) != 1:
        return f"mixed dtypes {sorted(d.short for d in dtypes)}"
    (dtype,) = dtypes
    if dtype not in CUDNN_DTYPES:
        return f"{dtype.short} tensors"
    if precision == "fp16":
        return "float32 with fp16 operands (cubeMathType 2): the GEMM path converts them"
    if transposed and any(p >= s for p, s in zip(output_padding, stride)):
        return f"transposed with outputPadding {list(output_padding)} not below the stride {list(stride)}"
    for name, t in tensors.items():
        if t.numel == 0:
            return f"{name} is empty"
        if precision == "hf32" and name in INPUTS:  # read through the rounding copies, whatever their layout
            continue
        why = overlap_refusal(name, t) or order_refusal(name, t)
        if why is not None:
            return why
    return None


def unknown_path(value: str) -> AclError:
    """The error an unknown ``ACL_CONV_GRAD_PATH`` value raises."""
    return AclError(
        RtErrorCode.ACL_ERROR_RT_PARAM_INVALID, f"ConvolutionBackward: {PATH_ENV}={value!r}; expected one of {PATHS}"
    )


class CudnnConv(CudnnGraphs[ConvKey]):
    """cuDNN convolution gradient graphs for one backend (built lazily, cached by :class:`ConvKey`)."""

    plan_kind = PLAN_KIND
    recipe = CONV_RECIPE
    roles = ROLES
    label = "convolution"

    def key(
        self,
        op: str,
        a: AclTensor,
        b: AclTensor,
        out: AclTensor,
        pads: tuple[tuple[int, int], ...],
        stride: tuple[int, ...],
        dilation: tuple[int, ...],
        tf32: bool,
        deterministic: bool,
    ) -> ConvKey:
        """The key of one gradient's graph (1-D calls as 2-D)."""
        return ConvKey(
            device=self.backend.provider.get_device(),
            op=op,
            dtype=out.dtype,
            a=as_2d(a),
            b=as_2d(b),
            out=as_2d(out),
            pre=spatial_2d(tuple(p[0] for p in pads), 0),
            post=spatial_2d(tuple(p[1] for p in pads), 0),
            stride=spatial_2d(stride, 1),
            dilation=spatial_2d(dilation, 1),
            tf32=tf32,
            deterministic=deterministic,
        )

    def _build(self, key: ConvKey) -> _Built:
        cudnn = self._module
        io = {D.ACL_BF16: cudnn.data_type.BFLOAT16, D.ACL_FLOAT16: cudnn.data_type.HALF}.get(
            key.dtype, cudnn.data_type.FLOAT
        )
        f32 = cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=io, intermediate_data_type=f32, compute_data_type=f32, handle=self._handle())
        a = g.tensor(name="a", dim=list(key.a[0]), stride=list(key.a[1]), data_type=io)
        b = g.tensor(name="b", dim=list(key.b[0]), stride=list(key.b[1]), data_type=io)
        geometry: dict[str, Any] = {
            "pre_padding": list(key.pre),
            "post_padding": list(key.post),
            "stride": list(key.stride),
            "dilation": list(key.dilation),
            "compute_data_type": f32,
            "name": key.op,
        }
        if key.op == "dgrad":
            out = g.conv_dgrad(loss=a, filter=b, **geometry)
        elif key.op == "wgrad":
            out = g.conv_wgrad(image=a, loss=b, **geometry)
        else:
            out = g.conv_fprop(image=a, weight=b, **geometry)
        out.set_output(True).set_dim(list(key.out[0])).set_stride(list(key.out[1])).set_data_type(io)
        notes: tuple[str, ...] = EXACT_NOTES if key.dtype != D.ACL_FLOAT or key.tf32 else EXACT_NOTES + TF32_NOTES
        notes += ("NONDETERMINISTIC",) if key.deterministic else ()
        self._finish(g, PYTHON_ENGINES, notes)
        return _Built(g, {"a": a, "b": b, "out": out}, int(g.get_workspace_size()))

    def run(self, built: _Built, key: ConvKey, tensors: tuple[AclTensor, AclTensor, AclTensor], stream: int) -> None:
        """Execute ``built`` on ``stream`` reading ``a``, ``b`` and writing ``out`` at the caller's addresses."""
        if not self._execute(built, _pack(built, tensors), stream):  # a deserialised plan failed: built afresh, once
            rebuilt = self._rebuild(key, built)
            self._execute(rebuilt, _pack(rebuilt, tensors), stream)


def _pack(built: _Built, tensors: tuple[AclTensor, AclTensor, AclTensor]) -> dict[Any, int]:
    return {built.tensors[role]: address(t) for role, t in zip(ROLES, tensors)}
