"""How a FlashAttentionScore call runs on the GPU: the path (row or flash kernel, BLAS, cuDNN) and the BLAS chunks.

Pure arithmetic, no device: :func:`choose_path` picks the path from the call's size and what the
platform offers (cuDNN, then the flash kernel, then BLAS for large calls); :func:`plan_chunks` splits
a BLAS-path call into chunks of (batch, heads, query rows, key columns) whose fp32 score and
probability temporaries stay under a byte budget. Calls with a key window (causal and band sparse
modes) are cut into query-row blocks that multiply only the keys the block's window can reach, so a
causal prefill does a bit over half of the dense GEMM work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D

PATHS: Final = ("kernel", "flash", "blas", "cudnn")
BUDGET_BYTES: Final = 1 << 30
"""Bytes of score + probability temporaries one BLAS-path call holds at a time."""
ROW_BLOCK: Final = 512
"""Query rows per chunk when a key window lets a row block skip keys (causal / band modes)."""
LARGE_ROWS: Final = 64
LARGE_WORK: Final = 1 << 22
"""A call is "large" when Sq and Skv are at least :data:`LARGE_ROWS` and B*N*Sq*Skv at least this."""
CUDNN_DTYPES: Final = frozenset({D.ACL_FLOAT16, D.ACL_BF16})
CUDNN_MAX_HEAD_DIM: Final = 256


@dataclass(frozen=True)
class Chunk:
    """One BLAS-path step: query heads ``group_index + group * (kv_head0 + t)`` for ``t < heads``.

    Rows ``row0 .. row0+rows`` of those heads of batch ``batch`` against keys ``kv0 .. kv0+cols``.
    """

    batch: int
    group_index: int
    kv_head0: int
    heads: int
    row0: int
    rows: int
    kv0: int
    cols: int

    def head0(self, group: int) -> int:
        """The first query head of the chunk."""
        return self.group_index + group * self.kv_head0


def is_large(b: int, nq: int, sq: int, skv: int, work: int = LARGE_WORK) -> bool:
    """True when the call is big enough for a GEMM-based path to beat the row kernel."""
    return min(sq, skv) >= LARGE_ROWS and b * nq * sq * skv >= work


def key_range(row0: int, rows: int, skv: int, bounds: tuple[int, int, int] | None) -> tuple[int, int]:
    """[lo, hi) of the keys rows ``row0 .. row0+rows`` may keep under window ``bounds`` (lo, hi, shift)."""
    if bounds is None or rows <= 0:
        return 0, skv
    lo, hi, shift = bounds
    first = max(0, row0 + shift + lo)
    last = min(skv, row0 + rows - 1 + shift + hi + 1)
    return first, max(first, last)


KEY_RANGE_SOURCE: Final = r"""
// [*first, *last) of the keys rows row0 .. row0+rows may keep under the window (lo, hi, shift) when has_window:
// the device twin of attention_plan.key_range (same arithmetic, same empty-range and no-window cases)
ACL_DEV void acl_key_range(long long row0, long long rows, long long skv, long long has_window, long long lo,
                           long long hi, long long shift, long long* first, long long* last) {
  if (!has_window || rows <= 0) {
    *first = 0;
    *last = skv;
    return;
  }
  const long long f = row0 + shift + lo > 0 ? row0 + shift + lo : 0;
  const long long l = row0 + rows - 1 + shift + hi + 1 < skv ? row0 + rows - 1 + shift + hi + 1 : skv;
  *first = f;
  *last = l > f ? l : f;
}
"""
"""C source of :func:`key_range` for kernels (``acl_key_range``), so the fused flash kernel skips exactly the keys
the BLAS path's chunks skip."""


def plan_chunks(
    b: int,
    nq: int,
    nkv: int,
    sq: int,
    skv: int,
    bounds: tuple[int, int, int] | None,
    bytes_per_score: int,
    budget: int = BUDGET_BYTES,
    row_block: int = ROW_BLOCK,
) -> list[Chunk]:
    """Chunks covering every (batch, query head, query row) once, each under ``budget`` temporary bytes.

    ``bytes_per_score`` is what one score costs in temporaries (fp32 S plus P in its dtype).
    """
    group = nq // nkv
    rows = min(sq, row_block) if bounds is not None else sq
    rows = max(1, min(rows, budget // max(1, skv * bytes_per_score)))
    chunks: list[Chunk] = []
    for batch in range(b):
        for row0 in range(0, sq, rows):
            count_rows = min(rows, sq - row0)
            kv0, kv1 = key_range(row0, count_rows, skv, bounds)
            cols = kv1 - kv0
            heads = max(1, min(nkv, budget // max(1, count_rows * cols * bytes_per_score)))
            for g in range(group):
                for hk0 in range(0, nkv, heads):
                    chunks.append(Chunk(batch, g, hk0, min(heads, nkv - hk0), row0, count_rows, kv0, cols))
    return chunks


def chunk_bytes(chunks: list[Chunk]) -> int:
    """Scores in the largest chunk (the temporaries are sized for it once per call)."""
    return max((c.heads * c.rows * c.cols for c in chunks), default=0)


def cudnn_refusal(
    dtype: D,
    head_dim: int,
    mode: int,
    has_mask: bool,
    has_pse: bool,
    sq: int,
    skv: int,
    strides: dict[str, tuple[int, int, int, int]],
    addresses: dict[str, int],
    has_sink: bool = False,
) -> str | None:
    """Why cuDNN's SDPA cannot run this call exactly (None when it can).

    It runs fp16/bf16 without pse, with no mask, top-left causal (sparse 2) or bottom-right causal
    (sparse 3 with Sq <= Skv, so no row is fully masked); unit-stride head dims, strides that are
    multiples of 8 elements and 16-byte aligned addresses.
    """
    if dtype not in CUDNN_DTYPES:
        return f"{dtype.short} inputs (cuDNN SDPA runs fp16/bf16)"
    if has_pse:
        return "a pse (realShift) input"
    if has_sink:
        return "a sink (cuDNN SDPA has no value-less logit)"
    if head_dim % 8 or head_dim > CUDNN_MAX_HEAD_DIM:
        return f"head dim {head_dim} (needs a multiple of 8 up to {CUDNN_MAX_HEAD_DIM})"
    if has_mask and mode not in (2, 3):
        return f"sparseMode {mode} with a mask"
    if has_mask and mode == 3 and sq > skv:
        return "bottom-right causal with Sq > Skv (fully masked rows)"
    for name, st in strides.items():
        if st[3] != 1 or any(s % 8 for s in st[:3]):
            return f"{name} strides {st} (needs unit head-dim stride, others multiples of 8)"
    for name, address in addresses.items():
        if address % 16:
            return f"{name} is not 16-byte aligned"
    return None


def cudnn_mask(mode: int, has_mask: bool) -> str:
    """The cuDNN mask kind of a call cuDNN accepts: "none", "top_left" or "bottom_right"."""
    if not has_mask:
        return "none"
    return "top_left" if mode == 2 else "bottom_right"


def choose_path(
    *,
    large: bool,
    blas_refusal: str | None,
    cudnn_refusal_reason: str | None,
    flash_refusal_reason: str | None = "not offered",
    flash_slow: str | None = None,
    override: str | None = None,
) -> tuple[str, str]:
    """(path, why): cuDNN, then the flash kernel, then BLAS for large calls; else (or when none applies) the row kernel.

    ``flash_refusal_reason`` says why the flash kernel cannot run the call, ``flash_slow`` why it is not
    preferred although it can (no matrix instructions: its software path). ``override`` forces a path
    (tests, ``ACL_ATTENTION_PATH``); forcing one that cannot run raises ValueError with the reason.
    """
    if override is not None:
        if override not in PATHS:
            raise ValueError(f"unknown attention path {override!r}; expected one of {PATHS}")
        why = {"kernel": None, "flash": flash_refusal_reason, "blas": blas_refusal, "cudnn": cudnn_refusal_reason}
        if why[override] is not None:
            raise ValueError(f"the {override} attention path cannot run this call: {why[override]}")
        return override, "forced"
    if not large:
        return "kernel", "small call"
    if cudnn_refusal_reason is None:
        return "cudnn", "large call, cuDNN SDPA supports it"
    flash_why = flash_refusal_reason or flash_slow
    if flash_why is None:
        return "flash", f"large call; cuDNN: {cudnn_refusal_reason}"
    if blas_refusal is None:
        return "blas", f"large call; cuDNN: {cudnn_refusal_reason}; flash: {flash_why}"
    return "kernel", f"large call; cuDNN: {cudnn_refusal_reason}; flash: {flash_why}; BLAS: {blas_refusal}"
