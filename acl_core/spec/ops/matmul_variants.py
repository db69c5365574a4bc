"""GEMM variants vllm-ascend reaches (issue 16): permuted batch matmuls, FRACTAL_NZ weights, GroupedMatmul V1.

Each is declared on the rules of the GEMM it varies (Mm / BatchMatMul, QuantMatmulV5,
WeightQuantBatchMatmulV2, GroupedMatmulV5) and computed by composing that GEMM's kernels; what is
implemented and what is refused (161002) is listed per operator. Choices where CANN's documents are
silent are marked *choice*.

* **TransposeBatchMatMul**: ``out = permY(permX1(x1) @ permX2(x2))`` over 3-D tensors. permX1 is
  [0, 1, 2] (x1 is (B, M, K)) or [1, 0, 2] (x1 is (M, B, K)); permX2 is [0, 1, 2] ((B, K, N)) or
  [0, 2, 1] ((B, N, K)); permY is [1, 0, 2] (out is (M, B, N)), as documented. The dtype rules are
  Mm's (bfloat16 mixes with nothing; float16 with float32 computes in float32), ``cubeMathType`` 0-3
  as BatchMatMul applies them (2 with bfloat16 is refused, as documented). ``bias`` is a reserved
  parameter and must be null. ``batchSplitFactor`` s (1 <= s <= B, B % s == 0) > 1 gives out of
  shape (s, M, B*N/s): *choice* (the documents give only the shape) out[i, m, j*N + n] = y[m, i*B/s +
  j, n], the (M, B*N) result cut into s column blocks. ``scale`` (INT64/UINT64 [B*N], a float32 in
  the low 32 bits as aclnnTransQuantParamV2 writes it) with float16 inputs and batchSplitFactor 1
  gives INT8 out (M, 1, B*N) = saturate(round(y * scale)); *choice*: y is the float32-accumulated
  product, the scaling and rounding (half to even) are exact, as QuantMatmul's int8 output does.
  The Ascend 950 rules are taken where they are looser than A2/A3's (permX2 [0, 2, 1] with scale).
* **TransposeQuantBatchMatMul** (Ascend 950): the K-C mode only: FLOAT8_E4M3FN / E5M2 x1 (M, B, K)
  with permX1 [1, 0, 2], x2 (B, K, N) with permX2 [0, 1, 2], float32 x1Scale (M,) and x2Scale (N,),
  ``out[m, b, n] = (x1[m, b] @ x2[b])[n] * x1Scale[m] * x2Scale[n]`` in float16 or bfloat16 (dtype 1
  / 27), K = 512 and N = 128 as documented, groupSize 0, batchSplitFactor 1, bias null. The MX and
  T-C (HiFloat8) modes are refused with 161002 (HiFloat8 has no host type for samples; the MX
  scales' (M, B, K/64, 2) layout is not implemented).
* **QuantMatmulWeightNz**: QuantMatmulV5's rules and modes with x2 in FRACTAL_NZ (its view the
  logical (k, n), or (n, k) with transposeX2, as QuantMatmulV5 reads x2; a transposed NZ view is read
  back transposed). INT8 and FLOAT8_E4M3FN operands only: INT4 / INT32-packed / FLOAT4 x2 are refused
  with 161002 by the declared dtypes.
* **WeightQuantBatchMatmulNz**: WeightQuantBatchMatmulV2's rules with an INT8 weight in FRACTAL_NZ,
  per-channel antiquantisation (antiquantGroupSize 0), float16 / bfloat16 y; quantScaleOptional and
  quantOffsetOptional are reserved (must be null). INT4 / INT32 / FLOAT / FLOAT4 weights (packed by
  aclnnConvertWeightToINT4Pack) and the per-group / MX modes are refused with 161002.
* **GroupedMatmulWeightNz**: GroupedMatmulV5's float path (groupType -1 and 0, groupListType 0 and
  1, actType 0) over float16 / bfloat16 x with every weight in FRACTAL_NZ; ``quantGroupSize`` must be
  0. Its quantised and fake-quantised modes, and groupType 2 (not documented for it), are refused.
* **GroupedMatmul** (V1): the float path of its four scenarios (x, weight, y as S single / M multi
  tensors): MMM (splitItem 0/1, independent products, x of rank 2-6), SMS (splitItem 2/3, one x and
  y split by rows), SMM (splitItem 0/1, one x split by rows into one y per group) and MMS (splitItem
  2/3, x tensors concatenated into one y). ``groupListOptional`` is a host aclIntArray of cumulative
  row ends (non-decreasing, non-negative, not of length 1), so phase 1 checks it and sizes SMM's
  outputs. Float16 x takes a float16 bias, bfloat16 a float32 one, float32 a float32 one. The
  quantisation (scaleOptional, offsetOptional) and fake-quantisation (antiquant*) modes are refused
  with 161002, as GroupedMatmulV5's are.

Not declared yet (issue 16 reaches them too): MatmulCompressDequant, whose x2 and compressIndex are
the output of msModelSlim's weight-compression tool; its document gives no decompression algorithm or
index layout, so no implementation can be derived from public documents. QuantGroupedMatmulDequant
(and its WeightNZ form) and GroupedMatmulSwigluQuantV2 / WeightNZ / WeightNzV2 are the ``gmm_quant``
family (:mod:`.gmm_quant`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import ml_dtypes
import numpy as np

from acl_core import lowp
from acl_core.dtypes import DataType as D
from acl_core.nz import NZ_FORMATS, NzArray, check_nz_tensor
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, last_dim, reduction
from acl_core.spec.ops import matmul as M
from acl_core.spec.ops import quant as Q
from acl_core.spec.opspec import (
    INVALID,
    NULLPTR,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    OutInfo,
    Role,
    Sample,
    int_array,
    int_attr,
    invalid,
    nullptr,
    out,
    tensor,
    tensor_list,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import FLOATS, same, tensor_arg
from acl_core.spec.version import Added, version_of
from acl_core.tensor import AclIntArray, AclTensor, AclTensorList

# the plan keys this family's rules write (acl_core.spec.plan; docs/KERNELS.md)
declare_plan(
    "row_groups",
    "tuple[tuple[int, int], ...]",
    "GroupedMatmul V1's (start, end) row range of each group in the single x (SMS / SMM), from its host group list",
    tuple,
)

FAMILY = "matmul_variants"
Shape = tuple[int, ...]

# ----------------------------------------------------------------------------- TransposeBatchMatMul
PERM_X1 = ((0, 1, 2), (1, 0, 2))
PERM_X2 = ((0, 1, 2), (0, 2, 1))
PERM_Y = ((1, 0, 2),)
PACKED_SCALE = frozenset({D.ACL_INT64, D.ACL_UINT64})


def _perm(call: Call, name: str, allowed: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    value = call.args.get(name)
    values = tuple(int(v) for v in value.values) if isinstance(value, AclIntArray) else ()
    if values not in allowed:
        raise invalid(f"{name}={list(values)} is not supported; expected one of {[list(a) for a in allowed]}")
    return values


def permuted(shape: Sequence[int], perm: Sequence[int]) -> Shape:
    """``shape`` permuted as ``perm`` says (dim i of the result is dim perm[i] of the input)."""
    return tuple(int(shape[p]) for p in perm)


def tbmm_dims(x1: Sequence[int], x2: Sequence[int], p1: Sequence[int], p2: Sequence[int]) -> tuple[int, int, int, int]:
    """(B, M, K, N) of a permuted batch matmul; 161002 where batches or K disagree."""
    b, m, k = permuted(x1, p1)
    b2, k2, n = permuted(x2, p2)
    if b != b2:
        raise invalid(f"the batch of x1 ({b}) and of x2 ({b2}) disagree")
    if k != k2:
        raise invalid(f"the reduce dims of x1 ({k}) and x2 ({k2}) disagree")
    return b, m, k, n


def _split_factor(call: Call, batch: int) -> int:
    split = int(call.args["batchSplitFactor"])
    if split < 1 or split > max(batch, 1) or (batch and batch % split):
        raise invalid(f"batchSplitFactor={split} must lie in [1, B={batch}] and divide B")
    return split


def _transpose_batch_matmul() -> OpSpec:
    params = (
        tensor("x1", FLOATS, min_rank=3, max_rank=3),
        tensor("x2", FLOATS, min_rank=3, max_rank=3),
        tensor("bias", FLOATS, optional=True),
        tensor("scale", PACKED_SCALE, optional=True, min_rank=1, max_rank=1),
        int_array("permX1"),
        int_array("permX2"),
        int_array("permY"),
        int_attr("cubeMathType", c_type="int8_t", choices=(0, 1, 2, 3)),
        int_attr("batchSplitFactor", c_type="int32_t"),
        out("out", FLOATS | {D.ACL_INT8}, max_rank=3),
    )

    def infer(call: Call) -> Infos:
        x1, x2 = tensor_arg(call, "x1"), tensor_arg(call, "x2")
        p1, p2 = _perm(call, "permX1", PERM_X1), _perm(call, "permX2", PERM_X2)
        _perm(call, "permY", PERM_Y)
        if call.args.get("bias") is not None:
            raise invalid("bias is a reserved parameter of TransposeBatchMatMul and must be null")
        compute = M.matmul_dtype(x1.dtype, x2.dtype, ("x1", "x2"))
        cube = int(call.args["cubeMathType"])
        if cube == M.USE_FP16 and compute == D.ACL_BF16:
            raise invalid("cubeMathType=2 (USE_FP16) does not support bfloat16 inputs")
        b, m, _, n = tbmm_dims(x1.shape, x2.shape, p1, p2)
        split = _split_factor(call, b)
        call.plan["compute"] = compute
        call.plan["precision"] = M.operand_precision(compute, cube, "TransposeBatchMatMul", strict=False)
        scale = call.args.get("scale")
        if isinstance(scale, AclTensor):
            if x1.dtype != D.ACL_FLOAT16 or x2.dtype != D.ACL_FLOAT16:
                raise invalid("scale (an INT8 output) needs float16 x1 and x2")
            if split != 1:
                raise invalid("scale needs batchSplitFactor 1")
            if tuple(scale.shape) != (b * n,):
                raise invalid(f"scale must be 1-D of B*N = {b * n} elements, got {list(scale.shape)}")
            return {"out": same((m, 1, b * n), D.ACL_INT8)}
        shape = (m, b, n) if split == 1 else (split, m, b * n // split)
        return {"out": same(shape, compute)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        def arr(shape: Shape, dt: D) -> np.ndarray:
            return S.array(rng, shape, dt, low=-1, high=1)

        base = {"bias": None, "scale": None, "permY": [1, 0, 2], "cubeMathType": 0, "batchSplitFactor": 1}
        for dt in M._DTYPES:
            for p1 in PERM_X1:
                for p2 in PERM_X2:
                    b, m, k, n = 3, 5, 7, 4
                    x1 = arr(permuted((b, m, k), p1), dt)
                    x2 = arr(permuted((b, k, n), p2), dt)
                    args = {**base, "x1": x1, "x2": x2, "permX1": list(p1), "permX2": list(p2)}
                    yield Sample(args, f"{dt.short} permX1={list(p1)} permX2={list(p2)}")
        x1, x2 = arr((33, 3, 70), D.ACL_BF16), arr((3, 70, 65), D.ACL_BF16)
        yield Sample(
            {**base, "x1": x1, "x2": x2, "permX1": [1, 0, 2], "permX2": [0, 1, 2]}, "bf16 (M, B, K) MLA-like, 33x70x65"
        )
        x1, x2 = arr((6, 4, 16), D.ACL_FLOAT16), arr((4, 8, 16), D.ACL_FLOAT16)
        for split in (2, 4):
            yield Sample(
                {**base, "x1": x1, "x2": x2, "permX1": [1, 0, 2], "permX2": [0, 2, 1], "batchSplitFactor": split},
                f"batchSplitFactor {split}",
            )
        for cube in (1, 2, 3):
            x1, x2 = arr((4, 2, 9), D.ACL_FLOAT), arr((2, 9, 5), D.ACL_FLOAT)
            yield Sample(
                {**base, "x1": x1, "x2": x2, "permX1": [1, 0, 2], "permX2": [0, 1, 2], "cubeMathType": cube},
                f"float32 cubeMathType={cube}",
                M._tolerance(D.ACL_FLOAT, cube),
            )
        x1, x2 = arr((3, 2, 6), D.ACL_FLOAT16), arr((2, 6, 4), D.ACL_FLOAT)
        yield Sample({**base, "x1": x1, "x2": x2, "permX1": [1, 0, 2], "permX2": [0, 1, 2]}, "float16 @ float32")
        x1, x2 = arr((0, 2, 6), D.ACL_FLOAT16), arr((2, 6, 4), D.ACL_FLOAT16)
        yield Sample({**base, "x1": x1, "x2": x2, "permX1": [1, 0, 2], "permX2": [0, 1, 2]}, "empty M")
        # integer-valued float16 operands: the float32 product is exact, so the INT8 result is too
        b, m, k, n = 3, 5, 24, 8
        x1 = rng.integers(-4, 5, (m, b, k)).astype(np.float16)
        x2 = rng.integers(-4, 5, (b, n, k)).astype(np.float16)
        scale = lowp.encode_packed_scale(rng.uniform(0.05, 0.4, b * n)).view(np.int64)
        yield Sample(
            {**base, "x1": x1, "x2": x2, "permX1": [1, 0, 2], "permX2": [0, 2, 1], "scale": scale},
            "float16 to INT8 with a per-column scale",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x1, x2 = S.array(rng, (4, 2, 6), D.ACL_FLOAT16), S.array(rng, (2, 6, 3), D.ACL_FLOAT16)
        base: dict[str, Any] = {"x1": x1, "x2": x2, "bias": None, "scale": None, "permX1": [1, 0, 2]}
        base["permX2"] = [0, 1, 2]
        base |= {"permY": [1, 0, 2], "cubeMathType": 0, "batchSplitFactor": 1}
        yield ErrorSample({**base, "permX1": [2, 1, 0]}, INVALID, "permX1 [2, 1, 0]")
        yield ErrorSample({**base, "permX2": [1, 0, 2]}, INVALID, "permX2 [1, 0, 2]")
        yield ErrorSample({**base, "permY": [0, 1, 2]}, INVALID, "permY [0, 1, 2]")
        yield ErrorSample({**base, "permX1": [0, 1, 2]}, INVALID, "batch dims disagree")
        yield ErrorSample({**base, "x2": S.array(rng, (2, 5, 3), D.ACL_FLOAT16)}, INVALID, "k disagrees")
        yield ErrorSample({**base, "bias": S.array(rng, (3,), D.ACL_FLOAT16)}, INVALID, "bias given")
        yield ErrorSample({**base, "batchSplitFactor": 3}, INVALID, "batchSplitFactor not dividing B")
        yield ErrorSample({**base, "batchSplitFactor": 0}, INVALID, "batchSplitFactor 0")
        yield ErrorSample({**base, "cubeMathType": 4}, INVALID, "cubeMathType 4")
        bf = {**base, "x1": x1.astype(ml_dtypes.bfloat16), "x2": x2.astype(ml_dtypes.bfloat16)}
        yield ErrorSample({**bf, "cubeMathType": 2}, INVALID, "USE_FP16 with bfloat16")
        yield ErrorSample({**bf, "x2": x2}, INVALID, "bfloat16 with float16")
        scale = lowp.encode_packed_scale(np.ones(6)).view(np.int64)
        yield ErrorSample({**base, "scale": scale, "batchSplitFactor": 2}, INVALID, "scale with batchSplitFactor 2")
        yield ErrorSample({**base, "scale": scale[:5]}, INVALID, "scale of the wrong length")
        yield ErrorSample({**bf, "scale": scale}, INVALID, "scale with bfloat16 inputs")
        yield ErrorSample({**base, "permX1": None}, NULLPTR, "null permX1")

    return OpSpec(
        "TransposeBatchMatMul",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="out = permY(permX1(x1) @ permX2(x2)): batch matmul of permuted 3-D views (INT8 out with scale)",
        accuracy=reduction(length_of=last_dim("x1"), reason=M.GEMM_REASON),
    )


# ----------------------------------------------------------------------------- TransposeQuantBatchMatMul
TQBMM_K, TQBMM_N = 512, 128
"""K-C mode shapes Ascend 950 supports (the only ones documented)."""
_TQBMM_OUT = {1: D.ACL_FLOAT16, 27: D.ACL_BF16}


def _transpose_quant_batch_matmul() -> OpSpec:
    fp8 = (D.ACL_FLOAT8_E4M3FN, D.ACL_FLOAT8_E5M2)
    params = (
        tensor("x1", fp8, min_rank=3, max_rank=3),
        tensor("x2", fp8, min_rank=3, max_rank=3),
        tensor("bias", None, optional=True),
        tensor("x1Scale", {D.ACL_FLOAT}),
        tensor("x2Scale", {D.ACL_FLOAT}),
        int_attr("dtype", c_type="int32_t", choices=(1, 27, 34)),
        int_attr("groupSize"),
        int_array("permX1"),
        int_array("permX2"),
        int_array("permY"),
        int_attr("batchSplitFactor", c_type="int32_t"),
        out("out", {D.ACL_FLOAT16, D.ACL_BF16}, max_rank=3),
    )

    def infer(call: Call) -> Infos:
        x1, x2 = tensor_arg(call, "x1"), tensor_arg(call, "x2")
        s1, s2 = tensor_arg(call, "x1Scale"), tensor_arg(call, "x2Scale")
        p1 = _perm(call, "permX1", ((1, 0, 2),))
        p2 = _perm(call, "permX2", ((0, 1, 2),))  # [0, 2, 1] belongs to the MX / T-C modes
        _perm(call, "permY", PERM_Y)
        if call.args.get("bias") is not None:
            raise invalid("bias is a reserved parameter of TransposeQuantBatchMatMul and must be null")
        if int(call.args["batchSplitFactor"]) != 1:
            raise invalid("batchSplitFactor must be 1")
        if int(call.args["groupSize"]) != 0:
            raise invalid("groupSize selects the MX mode, which is not implemented; the K-C mode takes 0")
        code = int(call.args["dtype"])
        if code not in _TQBMM_OUT:
            raise invalid(f"dtype={code} (HIFLOAT8 output, the T-C mode) is not implemented")
        b, m, k, n = tbmm_dims(x1.shape, x2.shape, p1, p2)
        if (k, n) != (TQBMM_K, TQBMM_N):
            raise invalid(f"the K-C mode supports K={TQBMM_K} and N={TQBMM_N} only, got K={k} and N={n}")
        if min(b, m) == 0:
            raise invalid("empty tensors are not supported")
        if tuple(s1.shape) != (m,) or tuple(s2.shape) != (n,):
            raise invalid(f"x1Scale must be ({m},) and x2Scale ({n},), got {list(s1.shape)} and {list(s2.shape)}")
        return {"out": same((m, b, n), _TQBMM_OUT[code])}

    def case(rng: np.random.Generator, dt: Any, m: int, b: int, code: int) -> dict[str, Any]:
        return {
            "x1": rng.uniform(-6, 6, (m, b, TQBMM_K)).astype(dt),
            "x2": rng.uniform(-6, 6, (b, TQBMM_K, TQBMM_N)).astype(dt),
            "bias": None,
            "x1Scale": rng.uniform(0.01, 0.1, m).astype(np.float32),
            "x2Scale": rng.uniform(0.01, 0.1, TQBMM_N).astype(np.float32),
            "dtype": code,
            "groupSize": 0,
            "permX1": [1, 0, 2],
            "permX2": [0, 1, 2],
            "permY": [1, 0, 2],
            "batchSplitFactor": 1,
        }

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        yield Sample(case(rng, ml_dtypes.float8_e4m3fn, 3, 2, 27), "float8_e4m3fn K-C, bf16 out")
        yield Sample(case(rng, ml_dtypes.float8_e5m2, 2, 3, 1), "float8_e5m2 K-C, fp16 out")
        mixed = case(rng, ml_dtypes.float8_e4m3fn, 17, 2, 1)
        mixed["x2"] = mixed["x2"].astype(np.float32).astype(ml_dtypes.float8_e5m2)
        yield Sample(mixed, "float8_e4m3fn @ float8_e5m2, 17 rows")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        good = case(rng, ml_dtypes.float8_e4m3fn, 2, 2, 27)
        yield ErrorSample({**good, "dtype": 34}, INVALID, "HIFLOAT8 output (T-C mode)")
        yield ErrorSample({**good, "groupSize": Q.MX_GROUP}, INVALID, "MX groupSize")
        yield ErrorSample({**good, "permX2": [0, 2, 1]}, INVALID, "permX2 [0, 2, 1] in the K-C mode")
        yield ErrorSample({**good, "batchSplitFactor": 2}, INVALID, "batchSplitFactor 2")
        yield ErrorSample({**good, "x1Scale": np.ones(3, np.float32)}, INVALID, "x1Scale of the wrong length")
        small = {**good, "x1": good["x1"][..., :64], "x2": good["x2"][:, :64]}
        yield ErrorSample(small, INVALID, "K other than 512")
        yield ErrorSample({**good, "bias": np.ones(TQBMM_N, np.float32)}, INVALID, "bias given")
        yield ErrorSample({**good, "x1Scale": None}, NULLPTR, "null x1Scale")

    return OpSpec(
        "TransposeQuantBatchMatMul",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="out[m, b] = (x1[m, b] @ x2[b]) * x1Scale[m] * x2Scale: the K-C fp8 mode over permuted 3-D views",
        accuracy=reduction(
            length_of=lambda args, outputs: TQBMM_K + 2,
            reason=(
                "FLOAT8 products are exact in float32, accumulated in float32 over K, then two float32 scale"
                " products: γ_(K+2)·M with M = |x1|·|x2|·|x1Scale|·|x2Scale|"
            ),
        ),
    )


# ----------------------------------------------------------------------------- NZ-weight versions
_BY_NAME_Q = {s.name: s for s in Q.SPECS}
_V5 = _BY_NAME_Q["QuantMatmulV5"]
_WQBMM = _BY_NAME_Q["WeightQuantBatchMatmulV2"]
_GMM5 = next(s for s in M.SPECS if s.name == "GroupedMatmulV5")
NZ_QMM_DTYPES = frozenset({D.ACL_INT8, D.ACL_FLOAT8_E4M3FN})
"""QuantMatmulWeightNz's implemented operand types (x1 and x2; FLOAT8_E4M3FN as in QuantMatmulV5)."""


def _own_kernel(spec: OpSpec, accuracy: Accuracy | None) -> OpSpec:
    """A version whose rules are its base's but whose kernel is its own (it reads a FRACTAL_NZ weight)."""
    return replace(spec, family=FAMILY, base=None, base_args=None, accuracy=accuracy)


def _nz_members(call: Call, name: str) -> None:
    value = call.args.get(name)
    members = value.tensors if isinstance(value, AclTensorList) else (value,) if isinstance(value, AclTensor) else ()
    for i, t in enumerate(members):
        check_nz_tensor(t, f"{name}[{i}]" if isinstance(value, AclTensorList) else name)


def _as_nz(value: Any) -> Any:
    """A sample's weight (or weight list) placed as FRACTAL_NZ."""
    if isinstance(value, list):
        return [NzArray(v) for v in value]
    return NzArray(value)


def _np_dtype(value: Any) -> Any:
    return getattr(value, "dtype", None)


def _qmm_nz_case(args: dict[str, Any]) -> dict[str, Any] | None:
    """A QuantMatmulV5 case QuantMatmulWeightNz takes: INT8 / FLOAT8_E4M3FN operands, x2 placed as NZ."""
    allowed = {d.numpy for d in NZ_QMM_DTYPES}
    if _np_dtype(args["x1"]) not in allowed or _np_dtype(args["x2"]) not in allowed:
        return None
    return {**args, "x2": _as_nz(args["x2"])}


_V4 = _BY_NAME_Q["QuantMatmulV4"]
_V4_TO_V5 = {"scale": "x2Scale", "offset": "x2Offset", "pertokenScaleOptional": "x1Scale"}


def _qmm_nz_samples(rng: np.random.Generator) -> Iterable[Sample]:
    """QuantMatmulV5's INT8 / FLOAT8_E4M3FN cases and QuantMatmulV4's INT8 ones (renamed), x2 placed as NZ."""
    none = {"yScale": None, "x1Offset": None, "yOffset": None, "groupSize": 0}
    for sample in _V5.samples(rng) if _V5.samples else ():
        args = _qmm_nz_case(dict(sample.args))
        if args is not None:
            yield replace(sample, args=args)
    for sample in _V4.samples(rng) if _V4.samples else ():
        args = {_V4_TO_V5.get(k, k): v for k, v in sample.args.items()}
        args = _qmm_nz_case({"x1Scale": None, "x2Offset": None, **none, **args})
        if args is not None:
            yield replace(sample, args=args, note=f"QuantMatmulV4's {sample.note}")


def _qmm_nz_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    x1, x2 = rng.integers(-9, 9, (4, 32)).astype(np.int8), rng.integers(-9, 9, (32, 8)).astype(np.int8)
    base: dict[str, Any] = {"x1": x1, "x2": NzArray(x2), "x1Scale": None, "x2Scale": np.ones(8, np.float32)}
    base["yScale"] = None
    base |= {"x1Offset": None, "x2Offset": None, "yOffset": None, "bias": None, "transposeX1": False}
    base |= {"transposeX2": False, "groupSize": 0}
    yield ErrorSample({**base, "x2": x2}, INVALID, "x2 in ND")
    yield ErrorSample({**base, "yOffset": np.zeros(8, np.float32)}, INVALID, "yOffset (INT32-packed x2 mode)")
    yield ErrorSample({**base, "x2": NzArray(rng.integers(-9, 9, (16, 8)).astype(np.int8))}, INVALID, "k disagrees")
    four = rng.integers(-8, 8, (32, 8)).astype(ml_dtypes.int4)
    yield ErrorSample({**base, "x1": x1.astype(ml_dtypes.int4), "x2": four}, INVALID, "INT4 operands")


_QMM_NZ = _own_kernel(
    version_of(
        _V5,
        "QuantMatmulWeightNz",
        (
            tensor("x1", NZ_QMM_DTYPES, min_rank=2, max_rank=6),
            tensor("x2", NZ_QMM_DTYPES, formats=NZ_FORMATS, min_rank=2, max_rank=6),
            *_V5.param_names[2:],
        ),
        check=lambda call: _nz_members(call, "x2"),
        adapt=_qmm_nz_case,
        samples=_qmm_nz_samples,
        more_errors=_qmm_nz_errors,
        summary="QuantMatmulV5 with x2 in FRACTAL_NZ (INT8 / FLOAT8_E4M3FN operands)",
    ),
    _V5.accuracy,
)


def _wqbmm_nz_rules(call: Call) -> None:
    _nz_members(call, "weight")
    if int(call.args["antiquantGroupSize"]) != 0:
        raise invalid("an INT8 weight takes per-channel antiquantisation only (antiquantGroupSize 0)")
    for name in ("quantScaleOptional", "quantOffsetOptional"):
        if call.args.get(name) is not None:
            raise invalid(f"{name} is a reserved parameter of WeightQuantBatchMatmulNz and must be null")


def _wqbmm_nz_case(args: dict[str, Any]) -> dict[str, Any] | None:
    """A WeightQuantBatchMatmulV2 case of the Nz version: INT8 weight per channel, no output quantisation."""
    if _np_dtype(args["weight"]) != np.int8 or args["antiquantGroupSize"] != 0:
        return None
    if args.get("quantScaleOptional") is not None or args.get("quantOffsetOptional") is not None:
        return None
    return {**args, "weight": _as_nz(args["weight"])}


def _wqbmm_nz_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    x = S.array(rng, (3, 64), D.ACL_FLOAT16)
    w = rng.integers(-9, 9, (64, 32)).astype(np.int8)
    scale = S.array(rng, (32,), D.ACL_FLOAT16, low=0.01, high=0.1)
    base: dict[str, Any] = {"x": x, "weight": NzArray(w), "antiquantScale": scale, "antiquantOffsetOptional": None}
    base |= {"quantScaleOptional": None, "quantOffsetOptional": None, "biasOptional": None, "antiquantGroupSize": 0}
    yield ErrorSample({**base, "weight": w}, INVALID, "weight in ND")
    grouped = S.array(rng, (2, 32), D.ACL_FLOAT16, low=0.01, high=0.1)
    yield ErrorSample({**base, "antiquantScale": grouped, "antiquantGroupSize": 32}, INVALID, "per-group INT8 weight")
    packed = lowp.encode_packed_scale(np.full(32, 2.0))
    yield ErrorSample({**base, "quantScaleOptional": packed}, INVALID, "quantScaleOptional given (reserved)")
    yield ErrorSample({**base, "y": np.zeros((3, 32), np.int8)}, INVALID, "INT8 y")


_WQBMM_NZ = _own_kernel(
    version_of(
        _WQBMM,
        "WeightQuantBatchMatmulNz",
        (
            "x",
            tensor("weight", {D.ACL_INT8}, formats=NZ_FORMATS, min_rank=2, max_rank=2),
            *_WQBMM.param_names[2:4],
            tensor("quantScaleOptional", None, optional=True, max_rank=2),
            *_WQBMM.param_names[5:-1],
            out("y", {D.ACL_FLOAT16, D.ACL_BF16}, c_type="const aclTensor*"),
        ),
        check=_wqbmm_nz_rules,
        adapt=_wqbmm_nz_case,
        more_errors=_wqbmm_nz_errors,
        summary="WeightQuantBatchMatmulV2 with an INT8 FRACTAL_NZ weight, per-channel antiquantisation",
    ),
    _WQBMM.accuracy,
)


def gmm_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """A grouped GEMM's reduction length: the largest K among the x tensors (their last dim)."""
    xs = args.get("x") or []
    return max((int(np.shape(x)[-1]) for x in xs if np.ndim(x) >= 1), default=1)


GMM_FLOAT = reduction(
    length_of=gmm_length,
    reason="each group is a float GEMM: K products summed in float32, the bias added once: γ_K·Σ|x·w| per group",
)


def _gmm_nz_rules(call: Call) -> None:
    _nz_members(call, "weight")
    if int(call.args["groupType"]) == 2:
        raise invalid("groupType=2 (K-axis grouping) is not supported by GroupedMatmulWeightNz")


def _gmm_nz_case(args: dict[str, Any]) -> dict[str, Any] | None:
    """A GroupedMatmulV5 float case with float16 / bfloat16 operands and groupType -1 or 0, weights as NZ."""
    allowed = {D.ACL_FLOAT16.numpy, D.ACL_BF16.numpy}
    if args["groupType"] not in (-1, 0) or any(_np_dtype(v) not in allowed for v in [*args["x"], *args["weight"]]):
        return None
    return {**args, "weight": _as_nz(args["weight"])}


def _gmm_nz_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    def arr(shape: Shape, dt: D = D.ACL_FLOAT16) -> np.ndarray:
        return S.array(rng, shape, dt, low=-1, high=1)

    base: dict[str, Any] = {"splitItem": 2, "groupType": 0, "groupListType": 0, "actType": 0, "quantGroupSize": 0}
    base |= {"x": [arr((6, 32))], "weight": [NzArray(arr((2, 32, 16)))]}
    base |= {"groupListOptional": np.array([3, 6], np.int64)}
    yield ErrorSample({**base, "weight": [arr((2, 32, 16))]}, INVALID, "weight in ND")
    yield ErrorSample({**base, "groupType": 2}, INVALID, "groupType 2")
    yield ErrorSample({**base, "scaleOptional": [np.ones((2, 16), np.float32)]}, INVALID, "quantisation scale")
    yield ErrorSample({**base, "actType": 5}, INVALID, "silu activation")
    yield ErrorSample({**base, "groupListOptional": np.array([1, 3, 6], np.int64)}, INVALID, "group list too long")
    yield ErrorSample({**base, "groupListOptional": None}, NULLPTR, "missing group list")
    f32 = {**base, "x": [arr((6, 32), D.ACL_FLOAT)], "weight": [NzArray(arr((2, 32, 16), D.ACL_FLOAT))]}
    yield ErrorSample(f32, INVALID, "float32 operands")


_GMM_NZ = _own_kernel(
    version_of(
        _GMM5,
        "GroupedMatmulWeightNz",
        (
            tensor_list("x", {D.ACL_FLOAT16, D.ACL_BF16}),
            replace(tensor_list("weight", {D.ACL_FLOAT16, D.ACL_BF16}), formats=frozenset(NZ_FORMATS)),
            tensor_list("biasOptional", {D.ACL_FLOAT16, D.ACL_FLOAT}, optional=True),
            *_GMM5.param_names[3:17],
            "quantGroupSize",
            tensor_list("out", {D.ACL_FLOAT16, D.ACL_BF16}, role=Role.OUT),
            *_GMM5.param_names[18:],
        ),
        added={
            "quantGroupSize": Added(
                int_attr("quantGroupSize", default=0),
                "other than 0: per-group quantisation is not implemented",
                neutral=(0,),
            )
        },
        check=_gmm_nz_rules,
        adapt=_gmm_nz_case,
        more_errors=_gmm_nz_errors,
        summary="GroupedMatmulV5's float path (groupType -1 / 0) with every weight in FRACTAL_NZ",
    ),
    GMM_FLOAT,
)


# ----------------------------------------------------------------------------- GroupedMatmul (V1)
_V1_BIAS = {D.ACL_FLOAT16: D.ACL_FLOAT16, D.ACL_BF16: D.ACL_FLOAT, D.ACL_FLOAT: D.ACL_FLOAT}


def _list(call: Call, name: str) -> tuple[AclTensor, ...]:
    value = call.args.get(name)
    return value.tensors if isinstance(value, AclTensorList) else ()


def _v1_group_ranges(values: Sequence[int], total: int | None) -> tuple[tuple[int, int], ...]:
    """(start, end) of each group from cumulative row ends; 161002 unless non-negative and non-decreasing."""
    if len(values) == 1:
        raise invalid("groupListOptional must not hold exactly one value")
    prev = 0
    ranges = []
    for v in values:
        if v < prev:
            raise invalid(f"groupListOptional must be non-negative and non-decreasing, got {list(values)}")
        ranges.append((prev, v))
        prev = v
    if total is not None and prev > total:
        raise invalid(f"groupListOptional ends at {prev}, beyond the {total} rows of x")
    return tuple(ranges)


def _v1_infer(call: Call) -> Infos:
    xs, ws = _list(call, "x"), _list(call, "weight")
    if not xs or not ws:
        raise invalid("x and weight must each hold at least one tensor")
    for name in ("x", "weight", "y"):
        if len(_list(call, name)) > M.GMM_MAX_LIST:
            raise invalid(f"{name} holds more than {M.GMM_MAX_LIST} tensors")
    dtype = xs[0].dtype
    for t in (*xs, *ws):
        if t.dtype != dtype:
            raise invalid(f"x and weight must share one dtype; found {dtype.short} and {t.dtype.short}")
    for name in ("scaleOptional", "offsetOptional", "antiquantScaleOptional", "antiquantOffsetOptional"):
        if call.args.get(name) is not None:
            raise invalid(f"{name} belongs to GroupedMatmul's (fake-)quantised modes, which are not implemented")
    for i, w in enumerate(ws):
        if w.rank != 2:
            raise invalid(f"weight[{i}] must be 2-D, not {list(w.shape)}")
    split = int(call.args["splitItem"])
    single_out = split in (2, 3)
    gl = call.args.get("groupListOptional")
    values = tuple(int(v) for v in gl.values) if isinstance(gl, AclIntArray) else None
    ranks = {x.rank for x in xs}
    if len(ranks) != 1 or not 2 <= xs[0].rank <= 6:
        raise invalid(f"the tensors of x must share one rank between 2 and 6; found {sorted(ranks)}")
    if xs[0].rank > 2 and (len(xs) != len(ws) or single_out or values is not None):
        raise invalid("x tensors of more than 2 dims need the MMM scenario (splitItem 0/1) without a group list")
    if values is not None and len(values) != len(ws):
        raise invalid(f"groupListOptional holds {len(values)} values; weight holds {len(ws)} tensors")
    outs: list[OutInfo]
    if len(xs) > 1:  # MMM or MMS: x and weight pair one to one
        if len(xs) != len(ws):
            raise invalid(f"x holds {len(xs)} tensors and weight {len(ws)}; they pair one to one")
        for i, (x, w) in enumerate(zip(xs, ws)):
            if x.shape[-1] != w.shape[0]:
                raise invalid(f"inner dimensions disagree: x[{i}] {list(x.shape)}, weight[{i}] {list(w.shape)}")
        if values is not None:
            ranges = _v1_group_ranges(values, None)
            if [e - s for s, e in ranges] != [x.shape[0] for x in xs]:
                raise invalid(f"groupListOptional {list(values)} does not match the rows of the x tensors")
        if single_out:
            widths = {w.shape[1] for w in ws}
            if len(widths) != 1:
                raise invalid(f"every weight must have the same N for a single y; found {sorted(widths)}")
            outs = [same((sum(x.shape[0] for x in xs), ws[0].shape[1]), dtype)]
        else:
            outs = [same((*x.shape[:-1], w.shape[1]), dtype) for x, w in zip(xs, ws)]
    else:  # SMS or SMM: one x split by the group list
        x = xs[0]
        if x.rank != 2:
            raise invalid("a single x must be 2-D")
        if values is None:
            raise nullptr("groupListOptional is required with a single x")
        for i, w in enumerate(ws):
            if w.shape[0] != x.shape[1]:
                raise invalid(f"inner dimensions disagree: x {list(x.shape)}, weight[{i}] {list(w.shape)}")
        ranges = _v1_group_ranges(values, x.shape[0])
        if single_out:
            if ranges and ranges[-1][1] != x.shape[0]:
                raise invalid(f"the last groupListOptional value must be the rows of x ({x.shape[0]})")
            widths = {w.shape[1] for w in ws}
            if len(widths) != 1:
                raise invalid(f"every weight must have the same N for a single y; found {sorted(widths)}")
            outs = [same((x.shape[0], ws[0].shape[1]), dtype)]
        else:
            outs = [same((e - s, w.shape[1]), dtype) for (s, e), w in zip(ranges, ws)]
        call.plan["row_groups"] = ranges
    bias = _list(call, "biasOptional")
    if call.args.get("biasOptional") is not None:
        if len(bias) != len(ws):
            raise invalid(f"biasOptional holds {len(bias)} tensors; weight holds {len(ws)}")
        for i, (b, w) in enumerate(zip(bias, ws)):
            if b.dtype != _V1_BIAS[dtype]:
                raise invalid(f"biasOptional[{i}] must be {_V1_BIAS[dtype].short} for {dtype.short} inputs")
            if tuple(b.shape) != (w.shape[1],):
                raise invalid(f"biasOptional[{i}] has shape {list(b.shape)}; expected [{w.shape[1]}]")
    given = _list(call, "y")
    if call.args.get("y") is not None and len(given) != len(outs):
        raise invalid(f"y holds {len(given)} tensors; this scenario writes {len(outs)}")
    call.plan["compute"] = dtype
    return {"y": outs}


def _v1_base(**extra: Any) -> dict[str, Any]:
    none = dict.fromkeys(("biasOptional", "scaleOptional", "offsetOptional", "antiquantScaleOptional"))
    return {**none, "antiquantOffsetOptional": None, "groupListOptional": None, "splitItem": 0, **extra}


def _v1_samples(rng: np.random.Generator) -> Iterable[Sample]:
    def arr(shape: Shape, dt: D) -> np.ndarray:
        return S.array(rng, shape, dt, low=-1, high=1)

    for dt in M._DTYPES:
        bdt = _V1_BIAS[dt]
        xs = [arr((3, 4), dt), arr((5, 6), dt), arr((0, 2), dt)]
        ws = [arr((4, 2), dt), arr((6, 7), dt), arr((2, 3), dt)]
        bias = [arr((2,), bdt), arr((7,), bdt), arr((3,), bdt)]
        yield Sample(_v1_base(x=xs, weight=ws, biasOptional=bias), f"{dt.short} MMM with bias")
        ws3 = [arr((6, 5), dt) for _ in range(3)]
        yield Sample(
            _v1_base(x=[arr((9, 6), dt)], weight=ws3, groupListOptional=[2, 2, 9], splitItem=2),
            f"{dt.short} SMS with an empty group",
        )
        yield Sample(
            _v1_base(x=[arr((9, 6), dt)], weight=ws3, groupListOptional=[4, 7, 9], biasOptional=[arr((5,), bdt)] * 3),
            f"{dt.short} SMM with bias",
        )
        xs2 = [arr((2, 6), dt), arr((3, 6), dt)]
        yield Sample(_v1_base(x=xs2, weight=ws3[:2], splitItem=3), f"{dt.short} MMS without a group list")
    yield Sample(
        _v1_base(
            x=[arr((2, 3, 4), D.ACL_FLOAT), arr((2, 1, 5), D.ACL_FLOAT)],
            weight=[arr((4, 5), D.ACL_FLOAT), arr((5, 2), D.ACL_FLOAT)],
        ),
        "MMM 3-D x",
    )
    yield Sample(
        _v1_base(
            x=[arr((2, 6), D.ACL_FLOAT16), arr((3, 6), D.ACL_FLOAT16)],
            weight=[arr((6, 5), D.ACL_FLOAT16), arr((6, 5), D.ACL_FLOAT16)],
            groupListOptional=[2, 5],
            splitItem=2,
        ),
        "MMS with a matching group list",
    )
    yield Sample(
        _v1_base(x=[arr((130, 40), D.ACL_BF16)], weight=[arr((40, 70), D.ACL_BF16)] * 2, groupListOptional=[65, 130]),
        "bf16 SMM over several tiles",
    )


def _v1_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    def arr(shape: Shape, dt: D = D.ACL_FLOAT) -> np.ndarray:
        return S.array(rng, shape, dt, low=-1, high=1)

    sms = _v1_base(x=[arr((6, 4))], weight=[arr((4, 3)), arr((4, 3))], groupListOptional=[3, 6], splitItem=2)
    yield ErrorSample({**sms, "groupListOptional": None}, NULLPTR, "single x without a group list")
    yield ErrorSample({**sms, "groupListOptional": [4, 3]}, INVALID, "decreasing group list")
    yield ErrorSample({**sms, "groupListOptional": [3, 5]}, INVALID, "group list short of x's rows (SMS)")
    yield ErrorSample({**sms, "groupListOptional": [3, 7]}, INVALID, "group list beyond x's rows")
    yield ErrorSample({**sms, "groupListOptional": [6]}, INVALID, "group list of one value")
    yield ErrorSample({**sms, "weight": [arr((4, 3)), arr((4, 2))]}, INVALID, "different N into one y")
    yield ErrorSample({**sms, "weight": [arr((5, 3)), arr((5, 3))]}, INVALID, "inner dimensions disagree")
    yield ErrorSample({**sms, "scaleOptional": [np.ones(3, np.uint64)] * 2}, INVALID, "quantisation scale")
    yield ErrorSample(
        {**sms, "antiquantScaleOptional": [np.ones(3, np.float16)] * 2}, INVALID, "fake-quantisation scale"
    )
    yield ErrorSample({**sms, "biasOptional": [arr((3,), D.ACL_FLOAT16)] * 2}, INVALID, "float16 bias, float32 x")
    yield ErrorSample({**sms, "splitItem": 4}, INVALID, "splitItem 4")
    mmm = _v1_base(x=[arr((3, 4)), arr((2, 5))], weight=[arr((4, 2))])
    yield ErrorSample(mmm, INVALID, "x and weight lists of different lengths")
    yield ErrorSample(
        {**mmm, "weight": [arr((4, 2)), arr((5, 2))], "groupListOptional": [3, 4]},
        INVALID,
        "group list not matching the x rows",
    )
    yield ErrorSample(
        {**mmm, "x": [arr((3, 4), D.ACL_INT8), arr((2, 5), D.ACL_INT8)]}, INVALID, "int8 x (quantised mode)"
    )


_GroupedMatmul = OpSpec(
    "GroupedMatmul",
    FAMILY,
    (
        tensor_list("x", FLOATS),
        tensor_list("weight", FLOATS),
        tensor_list("biasOptional", {D.ACL_FLOAT16, D.ACL_FLOAT}, optional=True),
        tensor_list("scaleOptional", optional=True),
        tensor_list("offsetOptional", {D.ACL_FLOAT}, optional=True),
        tensor_list("antiquantScaleOptional", {D.ACL_FLOAT16, D.ACL_BF16}, optional=True),
        tensor_list("antiquantOffsetOptional", {D.ACL_FLOAT16, D.ACL_BF16}, optional=True),
        int_array("groupListOptional", optional=True),
        int_attr("splitItem", choices=(0, 1, 2, 3)),
        tensor_list("y", FLOATS, role=Role.OUT, c_type="const aclTensorList*"),
    ),
    _v1_infer,
    samples=_v1_samples,
    error_samples=_v1_errors,
    summary="grouped GEMM y_i = x_i @ weight_i (+ bias_i) with a host group list (V1, float paths)",
    accuracy=GMM_FLOAT,
)

SPECS: list[OpSpec] = [
    _transpose_batch_matmul(),
    _transpose_quant_batch_matmul(),
    _QMM_NZ,
    _WQBMM_NZ,
    _GMM_NZ,
    _GroupedMatmul,
]


def tensors(value: Any) -> tuple[AclTensor, ...]:
    """The tensors of a kernel's tensor-list argument (an empty tuple for an absent list)."""
    return value if isinstance(value, tuple) else ()


__all__ = ["PERM_X1", "PERM_X2", "SPECS", "gmm_length", "permuted", "tbmm_dims", "tensors"]
