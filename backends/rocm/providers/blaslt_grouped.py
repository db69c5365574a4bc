"""cuBLASLt's device-sized grouped GEMM for the nvidia provider (``cublasLtGroupedMatrixLayoutCreate``).

Every group's rows, columns and leading dimension live in device arrays (int32 here), and A / B / D are device
arrays of per-group pointers (:class:`~acl_rocm.providers.base.GroupedGemmCall`). The recipe is the one PyTorch's
``_grouped_mm`` runs on Hopper (CUDA 13.3+): column-major layouts (the row-major ones had a heuristic defect up to
13.3u1), device pointer mode with one device alpha and beta (batch strides 0: sm_90; Blackwell takes per-group
alpha / beta arrays, not bound here), the D average rows / cols and the average reduction dimension as the
heuristic's hints, fp32 accumulation with split-K partial sums reduced in fp32 only (as the plain GEMM plan).
The layouts reference the call's device arrays, so they are made per call (three cheap host calls, destroyed once
the matmul is enqueued, as cuBLASLt allows); the descriptor, preference and the heuristic's algorithm (or its
refusal) are kept per signature, least recently used evicted.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acl_rocm.providers.base import GroupedGemmCall
    from acl_rocm.providers.nvidia import NvidiaProvider

MIN_VERSION = 130200
"""cublasLtGetVersion() from which the grouped layouts exist (13.2; Hopper runs bf16 / fp16 from 13.3)."""
ARCHS = ("sm_90",)
"""Architectures whose alpha / beta convention (one device scalar each) this module binds."""
PLAN_LIMIT = 64
"""Grouped GEMM signatures whose plans are kept."""
_CUDA_TYPES = {1: 2, 27: 14}
"""aclDataType fp16 / bf16 -> cudaDataType."""
_COMPUTE_32F, _R_32F, _OP_T = 68, 0, 1


@dataclass
class GroupedPlan:
    """One signature's descriptor, preference and algorithm, or why the heuristic found none."""

    desc: int | None = None
    pref: int | None = None
    algo: Any = None
    refusal: str | None = None


def unavailable(provider: NvidiaProvider) -> str | None:
    """None where the bindings, the library version and the device take the grouped GEMM, else why not."""
    reason = provider.gemm_unavailable()
    if reason is not None:
        return reason
    lt = provider.lt
    if not hasattr(lt, "grouped_matrix_layout_create"):
        return "nvmath-python's cuBLASLt bindings have no grouped_matrix_layout_create (nvmath-python 1.0+)"
    version = int(lt.get_version())
    if version < MIN_VERSION:
        return f"cuBLASLt {version} has no grouped GEMM (13.2+; Hopper from 13.3)"
    arch = provider.device_tag(provider.get_device())["arch"]
    if arch not in ARCHS:
        return f"the grouped GEMM is bound for {', '.join(ARCHS)} (one device alpha / beta), not {arch}"
    return None


def _layouts(provider: NvidiaProvider, call: GroupedGemmCall) -> list[int]:
    """A, B and D grouped layouts over the call's size arrays (rows M_g, N, K, lda, ldb, ldd blocks of int32)."""
    lt = provider.lt
    block = [call.sizes + i * call.groups * 4 for i in range(6)]
    m, n, k, lda, ldb, ldd = block
    a_type, d_type = _CUDA_TYPES[call.dtype], _CUDA_TYPES[call.out_dtype]
    shapes = ((a_type, (k, n) if call.transpose_a else (n, k), lda), (a_type, (k, m), ldb), (d_type, (n, m), ldd))
    attr = lt.matrix_layout_set_attribute, lt.get_matrix_layout_attribute_dtype
    width = int(lt.IntegerWidth.WIDTH_32)
    made: list[int] = []
    try:
        for cuda_type, (rows, cols), ld in shapes:
            layout = provider._lt_call(
                "cublasLtGroupedMatrixLayoutCreate",
                lt.grouped_matrix_layout_create,
                cuda_type,
                call.groups,
                rows,
                cols,
                ld,
            )
            made.append(layout)
            for key in ("GROUPED_ROWS_COLS_ARRAY_INTEGER_WIDTH", "GROUPED_LD_ARRAY_INTEGER_WIDTH"):
                provider._lt_set(*attr, layout, getattr(lt.MatrixLayoutAttribute, key), width)
    except BaseException:
        _destroy_layouts(provider, made)
        raise
    return made


def _destroy_layouts(provider: NvidiaProvider, layouts: list[int]) -> None:
    for layout in reversed(layouts):
        try:
            provider.lt.matrix_layout_destroy(layout)
        except Exception:
            pass


def _plan(
    provider: NvidiaProvider, handle: int, call: GroupedGemmCall, layouts: list[int], workspace_size: int
) -> GroupedPlan:
    """Descriptor, preference and the heuristic's first algorithm for ``call``'s signature."""
    import numpy as np

    lt = provider.lt
    plan = GroupedPlan()
    try:
        plan.desc = provider._lt_call("cublasLtMatmulDescCreate", lt.matmul_desc_create, _COMPUTE_32F, _R_32F)
        desc_attr = lt.matmul_desc_set_attribute, lt.get_matmul_desc_attribute_dtype
        key = lt.MatmulDescAttribute
        provider._lt_set(*desc_attr, plan.desc, key.TRANSA, _OP_T if call.transpose_a else 0)
        provider._lt_set(*desc_attr, plan.desc, key.TRANSB, 0)
        provider._lt_set(*desc_attr, plan.desc, key.POINTER_MODE, int(lt.PointerMode.DEVICE))
        provider._lt_set(*desc_attr, plan.desc, key.ALPHA_BATCH_STRIDE, 0)
        provider._lt_set(*desc_attr, plan.desc, key.BETA_BATCH_STRIDE, 0)
        plan.pref = provider._lt_call("cublasLtMatmulPreferenceCreate", lt.matmul_preference_create)
        pref_attr = lt.matmul_preference_set_attribute, lt.get_matmul_preference_attribute_dtype
        pref = lt.MatmulPreferenceAttribute
        provider._lt_set(*pref_attr, plan.pref, pref.MAX_WORKSPACE_BYTES, workspace_size)
        provider._lt_set(*pref_attr, plan.pref, pref.REDUCTION_SCHEME_MASK, int(lt.ReductionScheme.COMPUTE_TYPE))
        provider._lt_set(*pref_attr, plan.pref, pref.GROUPED_DESC_D_AVERAGE_ROWS, call.n)
        provider._lt_set(*pref_attr, plan.pref, pref.GROUPED_DESC_D_AVERAGE_COLS, max(call.rows_hint // call.groups, 1))
        provider._lt_set(*pref_attr, plan.pref, pref.GROUPED_AVERAGE_REDUCTION_DIM, call.k)
        a_align, b_align, d_align = call.alignments  # the heuristic cannot see the per-group pointers
        for name, value in (("A", a_align), ("B", b_align), ("C", d_align), ("D", d_align)):
            provider._lt_set(*pref_attr, plan.pref, getattr(pref, f"MIN_ALIGNMENT_{name}_BYTES"), value)
        results = lt.MatmulHeuristicResult(1)
        found = np.zeros(1, dtype=np.int32)
        a, b, d = layouts
        provider._lt_call(
            "cublasLtMatmulAlgoGetHeuristic",
            lt.matmul_algo_get_heuristic,
            handle,
            plan.desc,
            a,
            b,
            d,
            d,
            plan.pref,
            1,
            results.ptr,
            found.ctypes.data,
        )
    except BaseException:
        destroy(provider, plan)
        raise
    if found[0] == 0:
        plan.refusal = (
            f"cublasLtMatmulAlgoGetHeuristic found no grouped algorithm (cuBLASLt {lt.get_version()}; preferences:"
            f" {workspace_size} workspace bytes, fp32 split-K reduction only, A / B / D alignments {call.alignments})"
        )
    else:
        plan.algo = results
    return plan


def destroy(provider: NvidiaProvider, plan: GroupedPlan) -> None:
    """Destroy what ``plan`` created (errors ignored: eviction and close)."""
    lt = provider.lt
    for fn, value in ((lt.matmul_preference_destroy, plan.pref), (lt.matmul_desc_destroy, plan.desc)):
        if value is not None:
            try:
                fn(value)
            except Exception:
                pass
    plan.pref = plan.desc = None


def grouped_gemm(
    provider: NvidiaProvider, call: GroupedGemmCall, workspace: int, workspace_size: int, stream: int
) -> str | None:
    """Enqueue ``call`` with its signature's plan (None), or the heuristic's refusal (nothing enqueued)."""
    handle = provider._lt_handle()
    key: tuple[object, ...] = (provider.get_device(), call.dtype, call.out_dtype, call.groups, call.n, call.k)
    key += (call.rows_hint, call.transpose_a, call.alignments, workspace_size)
    plans: OrderedDict[tuple[object, ...], GroupedPlan] = provider.__dict__.setdefault("_grouped_plans", OrderedDict())
    with provider._gemm_lock:  # held across the matmul: an eviction never destroys a plan in use
        layouts = _layouts(provider, call)
        try:
            plan = plans.get(key)
            if plan is None:
                plan = plans[key] = _plan(provider, handle, call, layouts, workspace_size)
                while len(plans) > PLAN_LIMIT:
                    destroy(provider, plans.popitem(last=False)[1])
            else:
                plans.move_to_end(key)
            if plan.refusal is not None:
                return plan.refusal
            a, b, d = layouts
            groups = call.groups
            alpha, beta = call.scalars, call.scalars + 4
            provider._lt_call(
                "cublasLtMatmul",
                provider.lt.matmul,
                handle,
                plan.desc,
                alpha,
                call.pointers,
                a,
                call.pointers + groups * 8,
                b,
                beta,
                call.pointers + 2 * groups * 8,
                d,
                call.pointers + 2 * groups * 8,
                d,
                plan.algo.ptr,
                workspace,
                workspace_size,
                stream,
            )
        finally:
            _destroy_layouts(provider, layouts)
    return None


def close(provider: NvidiaProvider) -> None:
    """Destroy every kept grouped plan."""
    plans: OrderedDict[tuple[object, ...], GroupedPlan] = provider.__dict__.get("_grouped_plans", OrderedDict())
    while plans:
        destroy(provider, plans.popitem(last=False)[1])
