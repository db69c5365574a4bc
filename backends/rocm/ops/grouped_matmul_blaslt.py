"""GroupedMatmulV5 through the vendor library's device-sized grouped GEMM (``ACL_GMM_KERNEL=blaslt``, opt-in).

After the runner's descriptor fill and :class:`~acl_rocm.kernels.grouped_matmul.GmmPrep` (which reads and checks
the device group list), :class:`~acl_rocm.kernels.grouped_matmul_blaslt.GmmBlasltArrays` writes the library's
per-group pointer and size arrays into a stream-ordered temporary and the provider's
:meth:`~acl_rocm.providers.base.RuntimeProvider.grouped_gemm` (cuBLASLt on NVIDIA) computes every group: no host
round trip, capture-safe. It takes M-axis groups from a device list (groupType 0, :data:`MODE_M`) of fp16 / bf16
operands into the same dtype without bias, x and out rows contiguous and a weight with N or K contiguous, every
address and leading dimension on 16 bytes (the library's rule); :func:`refusal` says why anything else goes to
the runner's kernels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.grouped_matmul import MODE_M
from acl_rocm.kernels.grouped_matmul_blaslt import THREADS, GmmBlaslt, GmmBlasltArrays, layout
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.matmul import WORKSPACE_BYTES
from acl_rocm.providers.base import GroupedGemmCall

if TYPE_CHECKING:
    from acl_rocm.ops.grouped_matmul import GroupedGemm, GroupedMatmulRunner, GroupPlan

DTYPES = (D.ACL_FLOAT16, D.ACL_BF16)
INT32_MAX = 2**31 - 1
_SHARED = ("X", "OUT", "K0", "K1", "N", "XSR", "XSC", "WSK", "WSN", "OSR", "OSC")
"""Descriptor fields every group of one call must share (only W and the row ranges differ)."""


def refusal(p: GroupPlan, gemm: GroupedGemm, unavailable: str | None) -> str | None:
    """Why the library's grouped GEMM cannot take the planned call ``p`` (None: it can); ``unavailable`` is the
    provider's reason, if any."""
    out = gemm.dtype if gemm.out is None else gemm.out
    if unavailable is not None:
        return unavailable
    if gemm.dtype not in DTYPES or out != gemm.dtype:
        return f"{gemm.dtype.short} operands into {out.short} (fp16 / bf16 into the same dtype only)"
    if gemm.bias is not None:
        return "a bias (the library's grouped bias epilogue is not bound)"
    if p.mode != MODE_M or p.copies:
        return "groups that are not M-axis ranges of a device group list (groupType 0)"
    first = p.rows[0]
    if any(row.get(f, 0) != first.get(f, 0) for row in p.rows for f in _SHARED):
        return "groups with different x, out, N, K or strides (a weight list of mixed layouts)"
    get = first.get
    if get("XSC", 0) != 1 or get("OSC", 0) != 1:
        return "x or out rows that are not contiguous"
    if get("WSN", 0) != 1 and get("WSK", 0) != 1:
        return "a weight with neither N nor K contiguous"
    n, k = get("N", 0), get("K1", 0) - get("K0", 0)
    if n <= 0 or k <= 0:
        return "an empty N or K"
    leading = (_lda(first), get("XSR", 0), get("OSR", 0))
    if any(ld % 8 or ld <= 0 for ld in leading) or any(a % 16 for r in p.rows for a in (r["X"], r["W"], r["OUT"])):
        return "an address or leading dimension off the library's 16-byte grid"
    if max(p.axis, *leading) > INT32_MAX:
        return "sizes past the int32 arrays"
    return None


def _lda(row: dict[str, int]) -> int:
    """The weight's column-major leading dimension: [K, N] rows (N contiguous), else [N, K] storage (transposed)."""
    return row["WSK"] if row.get("WSN", 0) == 1 else row.get("WSN", 0)


def _alignment(*values: int) -> int:
    """The largest power of two (at most 256) dividing every value: what an address plus any multiple of the strides
    among ``values`` keeps."""
    return min(min(v & -v, 256) if v else 256 for v in values)


def report_gemm(gemm: GroupedGemm) -> GmmBlaslt:
    """The stand-in the runner's path report names for a call the library computed."""
    return GmmBlaslt(gemm.dtype, gemm.bias, gemm.out)


def enqueue(
    runner: GroupedMatmulRunner, p: GroupPlan, gemm: GroupedGemm, table: int, flag: int, temps: list[int], stream: int
) -> str | None:
    """The arrays kernel, then the provider's grouped GEMM (None), or the library's refusal (no output written)."""
    groups, first = len(p.rows), p.rows[0]
    sizes, scalars, nbytes = layout(groups)
    arrays = runner._temp(nbytes, temps, stream)
    transposed = int(first.get("WSN", 0) != 1)
    out = gemm.dtype if gemm.out is None else gemm.out
    meta = [groups, transposed, gemm.dtype.info.storage_bits // 8, out.info.storage_bits // 8, 0]
    values = [KernelArgs.index_array(meta, "long long"), KernelArgs.pointer(table), KernelArgs.pointer(flag)]
    values += [KernelArgs.pointer(arrays), KernelArgs.pointer(arrays + sizes), KernelArgs.pointer(arrays + scalars)]
    config = LaunchConfig((-(-groups // THREADS), 1, 1), (THREADS, 1, 1), 0)
    runner._launch(GmmBlasltArrays(), config, values, stream)
    in_bytes, out_bytes = meta[2], meta[3]
    x_at = first["X"] + first.get("K0", 0) * first["XSC"] * in_bytes
    alignments = (
        _alignment(*(r["W"] for r in p.rows)),
        _alignment(x_at, first["XSR"] * in_bytes),
        _alignment(first["OUT"], first["OSR"] * out_bytes),
    )
    call = GroupedGemmCall(
        dtype=int(gemm.dtype),
        out_dtype=int(out),
        groups=groups,
        n=first["N"],
        k=first["K1"] - first.get("K0", 0),
        rows_hint=p.axis,
        transpose_a=bool(transposed),
        pointers=arrays,
        sizes=arrays + sizes,
        scalars=arrays + scalars,
        alignments=alignments,
    )
    workspace = runner._temp(WORKSPACE_BYTES, temps, stream)
    return runner.backend.provider.grouped_gemm(call, workspace, WORKSPACE_BYTES, stream)
