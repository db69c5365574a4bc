"""Private formats: NpuFormatCast (ND <-> FRACTAL_NZ), MatmulWeightNz, TransMatmulWeight.

An NZ tensor's *view* dims are the logical ND shape and its *storage* dims the NZ shape of
:func:`acl_core.nz.nz_shape`; only the parameters below accept FRACTAL_NZ. The host helpers
``aclnnNpuFormatCastCalculateSizeAndFormat`` and ``aclnnCalculateMatmulWeightSize(V2)`` live in
:mod:`acl_core.nz` (re-exported by ``acl_core.aclnn``).

The NZ layout reproduced is the documented one (index formula, C0 per dtype, zero padding):
structural fidelity. Bit-exact agreement with Ascend's TransData kernels (what they leave in padding
on every SoC, other private formats) needs Ascend hardware.

Conformance samples name an NZ input with :class:`acl_core.nz.NzArray` (ND values that ``eager`` places
as FRACTAL_NZ). An NZ *output* cannot come from an output rule (the caller allocates it from
``aclnnNpuFormatCastCalculateSizeAndFormat``), so NpuFormatCast's samples run NZ -> ND and its ND -> NZ
direction is proven in ``tests/ops/test_layout.py``.
"""

from __future__ import annotations

from collections.abc import Iterable

import ml_dtypes
import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.nz import NZ_FORMATS, NzArray, c0_for, check_nz_tensor, is_nz, nz_shape
from acl_core.spec import samples as S
from acl_core.spec.accuracy import last_dim, reduction
from acl_core.spec.ops.matmul import CUBE_MATH_TYPES, GEMM_REASON, matmul_dtype, operand_precision
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Sample,
    int_attr,
    invalid,
    out,
    ref,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import castable, same, tensor_arg
from acl_core.tensor import AclTensor

# the plan keys this family's rules write (acl_core.spec.plan; docs/KERNELS.md)
declare_plan("c0", "int", "the NZ format's inner block width for the weight's dtype (16 for 16-bit types)", int)
declare_plan("nz_shape", "tuple[int, ...]", "the weight's storage shape in FRACTAL_NZ", tuple)
declare_plan("direction", "'to_nd' | 'to_nz'", "which way NpuFormatCast converts", str, ("to_nd", "to_nz"))

FAMILY = "layout"

FORMAT_CAST_DTYPES = frozenset(
    {
        D.ACL_INT8,
        D.ACL_UINT8,
        D.ACL_FLOAT,
        D.ACL_FLOAT16,
        D.ACL_BF16,
        D.ACL_INT32,
        D.ACL_UINT32,
        D.ACL_FLOAT8_E4M3FN,
        D.ACL_FLOAT4_E2M1,
        D.ACL_HIFLOAT8,
    }
)
"""NpuFormatCast's documented weight types (FLOAT4_E1M2 left out: no host type for it yet)."""
PLAIN_SOURCES = frozenset({Format.ACL_FORMAT_ND, Format.ACL_FORMAT_NCL})


# ----------------------------------------------------------------------------- NpuFormatCast
def _npu_format_cast() -> OpSpec:
    formats = PLAIN_SOURCES | NZ_FORMATS
    params = (
        tensor("srcTensor", FORMAT_CAST_DTYPES, formats=formats, c_type="const aclTensor*"),
        out("dstTensor", FORMAT_CAST_DTYPES, formats=formats | {Format.ACL_FORMAT_ND}),
    )

    def infer(call: Call) -> Infos:
        src = tensor_arg(call, "srcTensor")
        dst = call.args.get("dstTensor")
        if is_nz(src.format):
            check_nz_tensor(src, "srcTensor")
            if isinstance(dst, AclTensor) and dst.format not in PLAIN_SOURCES:
                raise invalid(f"FRACTAL_NZ srcTensor converts to ND only, not {dst.format.name}")
            call.plan["direction"] = "to_nd"
            return {"dstTensor": same(src.shape, src.dtype)}
        if not isinstance(dst, AclTensor):
            return {"dstTensor": None}  # an NZ destination cannot be made from a shape: the caller allocates it
        if not is_nz(dst.format):
            raise invalid(f"srcTensor and dstTensor are both {dst.format.name}; one side must be FRACTAL_NZ")
        if not 2 <= src.rank <= 6:
            raise invalid(f"srcTensor must have rank 2 to 6 to convert to FRACTAL_NZ, got {src.rank}")
        if not src.is_contiguous:
            raise invalid("srcTensor must be contiguous")
        if dst.dtype != src.dtype:
            raise invalid(f"dstTensor has dtype {dst.dtype.short}; expected srcTensor's {src.dtype.short}")
        if tuple(dst.view_dims) != tuple(src.shape):
            raise invalid(f"dstTensor's view dims {list(dst.view_dims)} must be srcTensor's {list(src.shape)}")
        check_nz_tensor(dst, "dstTensor")
        call.plan["direction"] = "to_nz"
        return {"dstTensor": same(src.shape, src.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        # NZ -> ND only: an NZ destination must be allocated by the caller from CalculateSizeAndFormat
        yield Sample({"srcTensor": NzArray(S.array(rng, (20, 37), D.ACL_FLOAT16))}, "float16 NZ to ND")
        yield Sample({"srcTensor": NzArray(S.array(rng, (2, 5, 40), D.ACL_FLOAT))}, "float32 batched NZ to ND")
        yield Sample({"srcTensor": NzArray(rng.integers(-9, 9, (17, 33)).astype(np.int8))}, "int8 NZ to ND")
        e4 = rng.uniform(-9, 9, (16, 70)).astype(ml_dtypes.float8_e4m3fn)
        yield Sample({"srcTensor": NzArray(e4)}, "float8_e4m3fn NZ to ND")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (4, 20), D.ACL_FLOAT16)
        yield ErrorSample({"srcTensor": x, "dstTensor": np.zeros((4, 20), np.float16)}, INVALID, "ND to ND")
        yield ErrorSample({"srcTensor": S.array(rng, (4, 20), D.ACL_INT64)}, INVALID, "int64 source")
        yield ErrorSample({"srcTensor": x}, 161001, "no dstTensor")

    return OpSpec(
        "NpuFormatCast",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="copy between ND and FRACTAL_NZ storage",
    )


# ----------------------------------------------------------------------------- MatmulWeightNz
def _matmul_weight_nz() -> OpSpec:
    floats = {D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT}
    params = (
        tensor("self", floats, min_rank=2, max_rank=2),
        tensor("mat2", floats, formats=NZ_FORMATS, min_rank=2, max_rank=2),
        out("out", floats),
        int_attr("cubeMathType", c_type="int8_t", choices=CUBE_MATH_TYPES),
    )

    def infer(call: Call) -> Infos:
        a, b = tensor_arg(call, "self"), tensor_arg(call, "mat2")
        check_nz_tensor(b, "mat2")
        if a.shape[1] != b.shape[0]:
            raise invalid(f"k of self ({a.shape[1]}) and mat2 ({b.shape[0]}) disagree")
        compute = matmul_dtype(a.dtype, b.dtype, ("self", "mat2"))
        call.plan["precision"] = operand_precision(
            compute, int(call.args["cubeMathType"]), "MatmulWeightNz", strict=True
        )
        return {"out": castable((a.shape[0], b.shape[1]), compute)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT):
            a, b = S.array(rng, (5, 40), dt, low=-2, high=2), S.array(rng, (40, 23), dt, low=-2, high=2)
            yield Sample({"self": a, "mat2": NzArray(b), "cubeMathType": 0}, f"{dt.short} (5, 40) @ NZ (40, 23)")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        a, b = S.array(rng, (3, 32), D.ACL_FLOAT16), S.array(rng, (32, 16), D.ACL_FLOAT16)
        yield ErrorSample({"self": a, "mat2": b, "cubeMathType": 0}, INVALID, "mat2 in ND")
        yield ErrorSample({"self": a, "mat2": b, "cubeMathType": 7}, INVALID, "undocumented cubeMathType")

    return OpSpec(
        "MatmulWeightNz",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="self @ mat2 (NZ)",
        accuracy=reduction(length_of=last_dim("self"), reason=GEMM_REASON),  # a GEMM, not the family's copy class
    )


# ----------------------------------------------------------------------------- TransMatmulWeight
TRANS_WEIGHT_DTYPES = frozenset(
    {D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT8, D.ACL_FLOAT8_E4M3FN, D.ACL_HIFLOAT8, D.ACL_UINT8}
)


def _trans_matmul_weight() -> OpSpec:
    params = (ref("mmWeightRef", TRANS_WEIGHT_DTYPES, formats={Format.ACL_FORMAT_ND}),)

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "mmWeightRef")
        if not 2 <= t.rank <= 6:
            raise invalid(f"mmWeightRef must have rank 2 to 6, got {t.rank}")
        c0 = c0_for(t.dtype)
        call.plan["c0"] = c0
        call.plan["nz_shape"] = nz_shape(t.shape, c0)
        return {"mmWeightRef": same(t.shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        yield Sample({"mmWeightRef": S.array(rng, (32, 48), D.ACL_FLOAT16)}, "float16 (32, 48)")
        yield Sample({"mmWeightRef": S.array(rng, (2, 16, 32), D.ACL_BF16)}, "bfloat16 batch of 2")
        yield Sample({"mmWeightRef": rng.integers(-128, 128, (16, 64)).astype(np.int8)}, "int8 (16, 64)")
        e4 = rng.uniform(-50, 50, (16, 32)).astype(ml_dtypes.float8_e4m3fn)
        yield Sample({"mmWeightRef": e4}, "float8_e4m3fn (16, 32)")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        yield ErrorSample({"mmWeightRef": S.array(rng, (32,), D.ACL_FLOAT16)}, INVALID, "1-D weight")
        yield ErrorSample({"mmWeightRef": S.array(rng, (16, 16), D.ACL_FLOAT)}, INVALID, "float32 weight")

    return OpSpec(
        "TransMatmulWeight",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="rewrite an ND matmul weight in place as FRACTAL_NZ (the tensor's format and storage dims change)",
    )


SPECS: list[OpSpec] = [_npu_format_cast(), _matmul_weight_nz(), _trans_matmul_weight()]
