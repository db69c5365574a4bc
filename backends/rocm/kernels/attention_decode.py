"""Split-KV flash-decoding kernels: one query token against a long KV cache, GQA groups in one block.

Decode attention reads every cached key and value once and does little arithmetic with them, so it
is bound by memory bandwidth only when enough blocks stream the cache at once. The cache of each
(batch, kv head) is cut into ``splits`` chunks of ``chunk`` keys (:func:`decode_splits`, from the
cache capacity and the device's compute units, never from the actual lengths: the launches of one
signature do not change with them, so a task-group update can swap in new lengths).

The split kernel: one block per (batch, kv head, split), grid flattened to x. Each warp walks its
share of the chunk :data:`KEYS_PER_WARP` keys at a time: every lane holds ``ceil(D / warp)`` dims of each
of the group's query rows and of each key (vector loads where the layout allows); a tile's K and V rows
are issued together (one memory latency a tile), and the next tile's mask bytes right after them, a warp
all-reduce (xor shuffles) forms the scores, and the warp keeps its own fp32 online softmax (running
max, sum and output accumulator per query head). The warps merge through shared memory; the block
writes its partial (o, m, l) per query head, or, when there is a single split, the output itself.
Keys past the batch's actual length (a kernel argument) and keys the mask sets are left out; a key the mask
hides from every head a warp serves loads no K or V row (a decode over a cache larger than its filled part,
masked past the position, reads only the filled part's K and V). Caches of at most
:data:`SINGLE_SPLIT_KEYS` keys take one split and no combine launch.

The combine kernel: one block per (batch, query head), a thread per split's (max, sum), rescales the
splits' partials by ``exp(m_s - max m)`` (log-sum-exp) and writes the output in its dtype, and
FusedInferAttentionScore's ``softmaxLse`` (+inf where no key was kept, as the row kernel writes it). A sink
(FusedInferAttentionScoreV5's learnableSinkOptional: one value-less logit per query head) joins the
combined (max, sum) last, where the output is written: in the combine kernel, or in the split kernel
when there is a single split.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention import PackedMeta, Strides, meta_struct
from acl_rocm.kernels.attention_decode_combine import fast_combine_source
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.reduction import ATOMICS, SHUFFLE_XOR

DECODE_THREADS: Final = 128
"""Threads per block of both kernels."""
KEYS_PER_WARP: Final = 8
"""Keys a warp loads before it reduces their scores (memory-level parallelism)."""
MAX_DECODE_BATCH: Final = 256
"""Batches whose actual lengths travel in the kernel arguments (4-byte each, inside the 4 KiB limit)."""
MAX_SPLITS: Final = 128
"""At most DECODE_THREADS: the combine kernel reads one split's (max, sum) per thread."""
MIN_CHUNK: Final = 32
"""Keys per split at least (and the granule chunks are rounded to)."""
BLOCKS_PER_UNIT: Final = 4
"""Split-kernel blocks wanted per compute unit (several resident blocks hide the load latency)."""
SINGLE_SPLIT_KEYS: Final = 0
"""Caches of at most this many keys take one split and no combine launch. 0: none does. At 128 the Qwen3-0.6B
decode (a 96-key cache, 8 KV heads, batch 1: 8 blocks walking three 32-key tiles one after another) spent
13.1 µs a layer in the split kernel on the H100 (2026-12-06 07:38), against 8.2 + 3.2 µs for three splits and
the combine with the kernel before (06:21): a tile's load latency, not the combine launch, dominates there."""
AUTO_BLOCK_KEYS: Final = 256
"""Caches of at most this many keys take the short-cache block kernel (``attention_decode_block``) by default
(``auto``); longer ones the split-KV path. Measured on an H100 (2026-12-06 10:12, graph µs a call, B1 N16/8
D128): at 128 keys the block kernel 5.81 (a block per kv head) and 4.91 (a block per query head,
``bheads=1``) against split + combine 7.57; at 1k keys 25.2 / 19.4 against 9.47 (a few blocks cannot stream a
long cache). The kernel's time grows by about 0.017 µs a key, so it meets split + combine's near 256."""
BLOCK_HEADS: Final = 1
"""Query heads per block of the short-cache kernel by default: one (16 blocks for Qwen3's 8 KV heads, the
second head's K / V read from L2) measured 4.91 µs against 5.81 for the whole GQA group a block at 128 keys."""
BLOCK_ALWAYS: Final = 1 << 40
"""The ``block`` setting's threshold: every cache takes the block kernel."""
BLOCK_THREADS: Final = 256
"""Threads per block of the short-cache kernel unless the configuration says otherwise."""
BLOCK_ROWS: Final = 8
"""Keys a lane group of the short-cache kernel loads per tile (its K and V rows in flight together)."""
MAX_LANE_VALUES: Final = 64
"""Group size times dims per lane at most: each lane keeps that many query and accumulator registers."""
PIPE_STAGES: Final = 4
"""``cp.async`` stages of the pipelined split kernel by default (``pipe``): three tiles in flight a block."""
PIPE_KEYS: Final = 16
"""Keys a stage of the pipelined split kernel holds by default: a key per 8-lane group of its 128 threads."""
PIPE_BLOCKS_PER_UNIT: Final = 2
"""Split blocks per compute unit where the pipelined kernel takes a call (``pbpu``): on the H100 (2026-12-06
21:45, results/h100-2026-12-06i, N16/8 D128 bf16, graph µs) 54.4 at 32k keys and 12.5 at 4k, against 57.8 / 13.6
at 4 a unit and the register-tile kernel's 72.6 / 16.0 (torch SDPA 50.2 / 9.3)."""
DEFAULT_DECODE_SETTING: Final = "auto,pipe,bpdl,pskip"
"""What runs where ``ACL_DECODE_CONFIG`` is unset or empty: short caches on the block kernel launched
programmatically, longer ones on the pipelined split kernel (:data:`PIPE_BLOCKS_PER_UNIT`), a masked call copying
only the rows some head keeps (``pskip``); chosen from the H100 figures of 2026-12-06 21:45 and, for ``pskip``, of
2026-12-07 08:44 and 17:38 (a 32k cache with 4k keys written: 58.8 / 57.8 graph µs against 70.6 / 71.1 without it,
torch 57.7 / 58.9; unmasked calls do not change). A setting of one's own starts from the plain kernels
(:class:`DecodeConfig`'s field defaults) and names every choice it wants."""
PIPE_SMEM: Final = 40 * 1024
"""Shared bytes the pipelined kernel's stages may take (static shared memory stays under 48 KiB with the merge's)."""


def decode_splits(
    batch: int,
    kv_heads: int,
    capacity: int,
    units: int,
    blocks_per_unit: int = BLOCKS_PER_UNIT,
    min_chunk: int = MIN_CHUNK,
) -> tuple[int, int]:
    """(splits, chunk): ``blocks_per_unit`` (batch, kv head, split) blocks per compute unit, chunks >= ``min_chunk``."""
    if capacity <= 0:
        return 1, min_chunk
    if capacity <= SINGLE_SPLIT_KEYS:
        return 1, -(-capacity // min_chunk) * min_chunk
    work = max(1, batch * kv_heads)
    want = max(1, -(-max(units, 1) * blocks_per_unit // work))
    splits = max(1, min(want, -(-capacity // min_chunk), MAX_SPLITS))
    chunk = -(-capacity // splits)
    chunk = -(-chunk // min_chunk) * min_chunk
    return -(-capacity // chunk), chunk


@dataclass(frozen=True)
class DecodeConfig:
    """How decode calls run (env ``ACL_DECODE_CONFIG``, :func:`parse_decode_config`); the field defaults are the plain
    kernels a setting starts from (:data:`DEFAULT_DECODE_SETTING` runs where none is set)."""

    fused: bool = False
    """One launch (the last split block of each (batch, kv head) combines) instead of split + combine kernels."""
    blocks_per_unit: int = BLOCKS_PER_UNIT
    """Split blocks wanted per compute unit."""
    min_chunk: int = MIN_CHUNK
    """Keys per split at least (and the granule chunks round up to)."""
    kpw: int = KEYS_PER_WARP
    """Keys a warp loads per tile."""
    eager: bool = False
    """K / V rows load with the mask bytes, not after them."""
    dbuf: bool = False
    """K / V tiles double-buffered: the next tile's rows in flight while this one's are worked on."""
    block: int = AUTO_BLOCK_KEYS
    """Caches of at most this many keys take the short-cache block kernel (0: none; :data:`BLOCK_ALWAYS`: all)."""
    bthreads: int = BLOCK_THREADS
    """Threads per block of the short-cache kernel (fewer where its shared partials would not fit)."""
    brows: int = BLOCK_ROWS
    """Keys per lane group's tile in the short-cache kernel (fewer at GQA groups above 2)."""
    beager: bool = True
    """The short-cache kernel loads K / V rows with the mask bytes (else after them, only rows kept)."""
    bheads: int = BLOCK_HEADS
    """Query heads per block of the short-cache kernel (0: the whole GQA group; fewer: more blocks a kv head)."""
    wide: bool = False
    """The two-kernel path's split blocks run the short-cache kernel's layout (16-byte loads), then the combine."""
    bpdl: bool = False
    """The short-cache kernel launched programmatically (NVIDIA sm_90+): scheduled before its predecessor ends, it
    waits for it (``griddepcontrol.wait``) before its first read and lets its own successor be scheduled at once."""
    pipe: int = 0
    """Split blocks stage K / V tiles through shared memory in this many ``cp.async`` stages (0: the register-tile
    split kernel): :mod:`acl_rocm.kernels.attention_decode_pipe`."""
    pkeys: int = PIPE_KEYS
    """Keys a pipeline stage holds (``pipe``)."""
    pipe_bpu: int = PIPE_BLOCKS_PER_UNIT
    """Split blocks wanted per compute unit where the pipelined kernel takes the call (``pbpu``)."""
    pdyn: bool = False
    """The pipeline's stages live in dynamic shared memory, up to the device's opt-in maximum (``pdyn``; else
    :data:`PIPE_SMEM`): deeper stages and larger tiles than 48 KiB of static shared memory allows."""
    pskip: bool = False
    """Masked calls: the mask bytes of each tile ride ``cp.async`` a pipeline depth ahead of its K / V rows, and rows no
    head keeps are not copied (``pskip``): a cache masked past its filled part reads only that part."""
    pcomb: bool = False
    """The combine (kernel or fused last block) reduces a head's splits a warp at a time and sums every split of a dim
    with its loads in flight together, all of a block's heads at once; the two-kernel path's partials live in the
    stream's persistent scratch (no allocation per call). The same bits as the plain combine (``pcomb``)."""
    pmma: bool = False
    """The pipelined kernel's tiles go through the matrix units (``pmma``): a warp takes 16-key sub-tiles, scores and
    the value sum as 16 x 16 x 16 products (query heads as rows); stages padded for ``ldmatrix``, always in dynamic
    shared memory (as under ``pdyn``)."""
    ppdl: bool = False
    """The split kernel and the combine kernel are launched programmatically (``ppdl``; NVIDIA sm_90+): each waits for
    its predecessor before its first read, and the split kernel lets the combine be scheduled at once."""

    def __str__(self) -> str:
        path = "fused" if self.fused else "two"
        if self.block >= BLOCK_ALWAYS:
            path += ",block"
        elif self.block > 0:
            path += f",auto={self.block}"
        eager = ",eager" if self.eager else ""
        dbuf = ",dbuf" if self.dbuf else ""
        dbuf += ",wide" if self.wide else ""
        dbuf += f",pipe={self.pipe},pkeys={self.pkeys},pbpu={self.pipe_bpu}" if self.pipe else ""
        dbuf += ",pdyn" if self.pdyn else ""
        dbuf += ",pskip" if self.pskip else ""
        dbuf += ",pmma" if self.pmma else ""
        dbuf += ",pcomb" if self.pcomb else ""
        dbuf += ",ppdl" if self.ppdl else ""
        short = ""
        if self.block > 0 or self.wide:
            short = f",bthreads={self.bthreads},brows={self.brows},beager={int(self.beager)},bheads={self.bheads}"
            short += ",bpdl" if self.bpdl else ""
        return f"{path},bpu={self.blocks_per_unit},chunk={self.min_chunk},kpw={self.kpw}{eager}{dbuf}{short}"

    def takes_block(self, capacity: int) -> bool:
        """Whether a cache of ``capacity`` keys takes the short-cache block kernel."""
        return 0 < capacity <= self.block


BLOCK_THREAD_CHOICES: Final = (64, 128, 256, 512)
"""Threads per block the short-cache kernel accepts."""
BLOCK_ROW_CHOICES: Final = (1, 2, 4, 8, 16)
"""Keys per lane group's tile the short-cache kernel accepts."""
PIPE_STAGE_CHOICES: Final = (2, 3, 4, 6, 8, 12, 16)
"""``cp.async`` stages the pipelined split kernel accepts (``pipe=N``)."""
PIPE_KEY_CHOICES: Final = (16, 32, 64)
"""Keys a stage of the pipelined split kernel accepts (``pkeys=N``): a multiple of its 16 lane groups."""
PIPE_FLAGS: Final = ("pdyn", "pskip", "pmma", "pcomb", "ppdl")
"""The split path's opt-in items (each ``[=0|1]``): :class:`DecodeConfig`'s fields of the same names."""
CONFIG_KPW: Final = (4, 8, 16)
"""Keys per warp tile the config accepts (each lane keeps 2 x KPW rows of its dims in registers)."""


def parse_decode_config(text: str) -> DecodeConfig:
    """``ACL_DECODE_CONFIG``'s comma-separated items: the path, then the policy (ValueError names a bad item).

    ``two`` | ``fused`` (every cache on that split-KV path), ``block`` (every cache on the short-cache kernel),
    ``auto[=N]`` (caches of at most N keys, default :data:`AUTO_BLOCK_KEYS`, on the short-cache kernel, longer
    ones on two or fused, whichever came before), ``bpu=N``, ``chunk=N``, ``kpw=N``, ``eager[=0|1]``,
    ``dbuf[=0|1]``, ``wide[=0|1]`` (two's split blocks in the short-cache kernel's layout), ``pipe[=S]`` (split blocks
    stage K / V through S ``cp.async`` stages, default :data:`PIPE_STAGES`; ``pipe=0``: off), ``pkeys=N`` (keys a
    stage), ``pbpu=N`` (its split blocks a compute unit), ``pdyn`` / ``pskip`` / ``pmma`` (its stages in dynamic
    shared memory; masked rows not copied; tiles through the matrix units), ``pcomb`` / ``ppdl`` (the split path's
    faster combine; programmatic launches), and the short-cache kernel's ``bthreads=N``, ``brows=N``,
    ``beager[=0|1]``, ``bheads=N``, ``bpdl[=0|1]`` (its launch
    programmatic). Empty: :data:`DEFAULT_DECODE_SETTING` is the backend's (this function: the plain kernels).
    """
    cfg = DecodeConfig()
    fields: dict[str, object] = {}
    for raw in text.split(","):
        item = raw.strip().lower()
        if not item:
            continue
        key, _, value = item.partition("=")
        if item in ("two", "fused"):
            fields["fused"] = item == "fused"
            fields["block"] = 0
        elif item == "block":
            fields["block"] = BLOCK_ALWAYS
        elif key == "auto" and (value == "" or value.isdigit()):
            n = AUTO_BLOCK_KEYS if value == "" else int(value)
            if not 1 <= n < BLOCK_ALWAYS:
                raise ValueError(f"{item!r}: a threshold of 1 key or more")
            fields["block"] = n
        elif key == "bheads" and value.isdigit():
            if int(value) not in (0, 1, 2, 4, 8):
                raise ValueError(f"{item!r}: query heads per block 0 (the group), 1, 2, 4 or 8")
            fields[key] = int(value)
        elif key in ("bthreads", "brows") and value.isdigit():
            n = int(value)
            if key == "bthreads" and n not in BLOCK_THREAD_CHOICES:
                raise ValueError(f"{item!r}: threads per block one of {BLOCK_THREAD_CHOICES}")
            if key == "brows" and n not in BLOCK_ROW_CHOICES:
                raise ValueError(f"{item!r}: rows per lane group's tile one of {BLOCK_ROW_CHOICES}")
            fields[key] = n
        elif key == "pipe" and (value == "" or value.isdigit()):
            n = PIPE_STAGES if value == "" else int(value)
            if n and n not in PIPE_STAGE_CHOICES:
                raise ValueError(f"{item!r}: pipeline stages 0 (off) or one of {PIPE_STAGE_CHOICES}")
            fields["pipe"] = n
        elif key == "pkeys" and value.isdigit():
            if int(value) not in PIPE_KEY_CHOICES:
                raise ValueError(f"{item!r}: keys a pipeline stage one of {PIPE_KEY_CHOICES}")
            fields["pkeys"] = int(value)
        elif key in (*PIPE_FLAGS, "eager", "dbuf", "beager", "wide", "bpdl") and value in ("", "1", "0"):
            fields[key] = value != "0"
        elif key in ("bpu", "pbpu", "chunk", "kpw") and value.isdigit():
            n = int(value)
            if key in ("bpu", "pbpu") and not 1 <= n <= 64:
                raise ValueError(f"{item!r}: blocks per compute unit from 1 to 64")
            if key == "chunk" and (n < 8 or n > 4096 or n % 8):
                raise ValueError(f"{item!r}: a chunk of 8 to 4096 keys, a multiple of 8")
            if key == "kpw" and n not in CONFIG_KPW:
                raise ValueError(f"{item!r}: keys per warp tile one of {CONFIG_KPW}")
            fields[{"bpu": "blocks_per_unit", "pbpu": "pipe_bpu", "chunk": "min_chunk", "kpw": "kpw"}[key]] = n
        else:
            raise ValueError(
                f"{item!r} is not two, fused, block, auto[=N], bpu=N, chunk=N, kpw=N, eager[=0|1], dbuf[=0|1],"
                " wide[=0|1], pipe[=S], pkeys=N, pbpu=N, pdyn[=0|1], pskip[=0|1], pmma[=0|1], pcomb[=0|1],"
                " ppdl[=0|1], bthreads=N, brows=N, beager[=0|1], bheads=N or bpdl[=0|1]"
            )
    out = DecodeConfig(**{**cfg.__dict__, **fields})
    if out.wide and out.fused:
        raise ValueError("wide with fused: the short-cache layout runs the two-kernel path's split blocks only")
    if out.wide and out.pipe:
        raise ValueError("wide with pipe: the two-kernel path's split blocks run one of them")
    for flag in ("pdyn", "pskip", "pmma"):
        if getattr(out, flag) and not out.pipe:
            raise ValueError(f"{flag} without pipe: it shapes the pipelined split kernel's stages")
    if out.dbuf and out.kpw > 8:
        raise ValueError(f"dbuf with kpw={out.kpw}: two tiles of rows spill registers (255 at D128 G2); kpw <= 8")
    return out


def lanes_per_dim(head_dim: int, warp: int) -> int:
    """Dims each lane owns (``ceil(D / warp)``; lanes past D hold zeros)."""
    return -(-head_dim // warp)


@dataclass(frozen=True)
class DecodeMeta(PackedMeta):
    """One decode call's geometry (int64s, in order); strides in elements, (batch, head, row, dim or key)."""

    q: Strides
    k: Strides
    v: Strides
    o: Strides
    mask: Strides
    lse: Strides
    nq: int
    nkv: int
    splits: int
    chunk: int
    has_mask: int
    has_sink: int = 0
    sink_step: int = 0


DECODE_STRUCT: Final = meta_struct("DecodeMeta", DecodeMeta)


@dataclass(frozen=True)
class DecodeInstance:
    """One compiled pair of decode kernels: dtype, head dim, GQA group and whether K/V take vector loads."""

    dtype: D
    head_dim: int
    group: int
    vector: bool
    sink: D | None = None
    """The sink's dtype (None: no sink)."""
    kpw: int = KEYS_PER_WARP
    """Keys a warp loads per tile (bytes in flight per warp)."""
    fused: bool = False
    """One launch: each (batch, kv head)'s last split block combines the splits (no combine kernel)."""
    eager: bool = False
    """K and V rows load with the tile's mask bytes, not after them (masked rows are zeroed once they land)."""
    dbuf: bool = False
    """The next tile's K and V rows load while the warp works on this tile's (by range, as eager loads)."""
    paged: str = ""
    """Paged KV read through the block table on the device: "" (a dense cache), "rows" (BnBsH / BnNBsD pools:
    K/V strides are (block, head, row, dim)) or "nz" (NZ pools: the dim stride steps 16-wide tiles)."""
    ptile: bool = False
    """Paged: one table entry a warp's tile of KPW keys (read a tile ahead), not one per key row; needs every tile
    inside one page (blockSize and the split chunk multiples of KPW: :func:`page_tiles`)."""
    pipe: int = 0
    """The split kernel stages K / V tiles of ``pkeys`` keys through this many ``cp.async`` shared-memory stages
    (0: register tiles); dense caches with 16-byte rows only (:mod:`acl_rocm.kernels.attention_decode_pipe`)."""
    pkeys: int = 0
    """Keys a pipeline stage holds (``pipe``)."""
    dyn: bool = False
    """``pdyn``: the stages in dynamic shared memory (the launch passes :func:`pipe_dynamic_bytes`)."""
    skip: bool = False
    """``pskip``: the mask bytes staged a pipeline depth ahead, rows no head keeps not copied (a masked call)."""
    comb: bool = False
    """``pcomb``: the combine (kernel or fused ending) as :func:`fast_combine_source` writes it."""
    pdl: bool = False
    """``ppdl``: both kernels ``ACL_PDL_WAIT()`` before their first read (launched programmatically)."""
    mma: bool = False
    """``pmma``: the pipelined kernel's tiles go through the matrix units, a warp a 16-key sub-tile
    (:mod:`acl_rocm.kernels.attention_decode_mma`)."""

    @functools.cached_property
    def digest(self) -> str:
        """A short hash of the instance and the struct layout (kernel names stay stable across runs)."""
        text = repr((self, DECODE_STRUCT, MAX_DECODE_BATCH))
        # instances without the split path's opt-in items hash as before they existed (byte-identical sources)
        text = text.replace(", dyn=False, skip=False, comb=False, pdl=False, mma=False)", ")", 1)
        if not self.pipe:  # hashes as before the pipelined kernel existed: the source is byte-identical
            text = text.replace(", pipe=0, pkeys=0)", ")", 1)
        if not self.ptile:  # hashes as before page tiles existed: the source is byte-identical
            text = text.replace(", ptile=False)", ")", 1)
        if not self.paged:  # a dense instance hashes as before paging existed: its source is byte-identical
            text = text.replace(", paged='')", ")", 1)
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    @property
    def split_name(self) -> str:
        """The split kernel's ``extern "C"`` name."""
        kind = "fused" if self.fused else "split"
        return f"acl_decode_{kind}_{self.dtype.short}_d{self.head_dim}_g{self.group}_{self.digest}"

    @property
    def combine_name(self) -> str:
        """The combine kernel's ``extern "C"`` name."""
        return f"acl_decode_combine_{self.dtype.short}_d{self.head_dim}_{self.digest}"


def online_softmax_tile(rows: str, el: str, same: str, value: str) -> str:
    """C source the decode kernels share: fold a tile's scores ``sc[GROUP][rows]`` (``cur`` bit t: key t kept) into
    each head's running max ``mx``, sum and ``acc[GROUP][el]``, then add the tile's V rows (``value``: element e of
    row t as float); ``same`` says over which lanes a head's all-masked state agrees (no shuffle is needed)."""
    return f"""    #pragma unroll
    for (int g = 0; g < GROUP; ++g) {{
      float tile_max = -inf;
      #pragma unroll
      for (int t = 0; t < {rows}; ++t) {{
        sc[g][t] = (cur[g] >> t) & 1u ? scale * sc[g][t] : -inf;
        tile_max = sc[g][t] > tile_max ? sc[g][t] : tile_max;
      }}
      const float new_max = mx[g] > tile_max ? mx[g] : tile_max;
      if (new_max == -inf) {{  // nothing kept yet for this head ({same})
        #pragma unroll
        for (int t = 0; t < {rows}; ++t) sc[g][t] = 0.0f;
        continue;
      }}
      const float alpha = mx[g] == -inf ? 0.0f : acl_exp(mx[g] - new_max);
      float add = 0.0f;
      #pragma unroll
      for (int t = 0; t < {rows}; ++t) {{
        sc[g][t] = sc[g][t] == -inf ? 0.0f : acl_exp(sc[g][t] - new_max);
        add += sc[g][t];
      }}
      sum[g] = sum[g] * alpha + add;
      mx[g] = new_max;
      #pragma unroll
      for (int e = 0; e < {el}; ++e) acc[g][e] *= alpha;
    }}
    #pragma unroll
    for (int t = 0; t < {rows}; ++t) {{
      #pragma unroll
      for (int e = 0; e < {el}; ++e) {{
        const float val = {value};
        #pragma unroll
        for (int g = 0; g < GROUP; ++g) acc[g][e] += sc[g][t] * val;
      }}
    }}"""


PAGE_STRUCT: Final = "struct PageMeta { long long size; long long tb; long long tc; long long blocks; };"
"""The paged decode kernels' table geometry: tokens per block, the table's row and column steps, the pool's blocks."""


def _paged_common(paged: str, ptile: bool = False) -> str:
    """C source of the paged split kernel (empty for a dense one): the table lookup and, for NZ, the tiled row load.

    ``dec_page``: the start of key row ``j`` (head already applied): ``table[b, j / size]`` blocks in, row
    ``j % size`` of it; a row at or past ``hi`` (not loaded) reads no table entry, and an entry outside the
    pool sets the check flag and reads block 0 (its rows are not meaningful: the call fails at synchronisation).
    """
    if not paged:
        return ""
    nz = ""
    if paged == "nz":  # an NZ row: dim d at (d / 16) * stride + d % 16 (tiles contiguous); replaces dec_raw's math
        nz = nz_row_load("dec_raw", "lane", "VEC", "lane * VEC", "e * WARP + lane", "live")
    return page_lookup() + (page_tile_lookup() if ptile else "") + nz


def nz_row_load(name: str, who: str, width: str, first: str, dim: str, live: str) -> str:
    """C source of ``name``_nz, a paged NZ row load for both decode kernels, and ``#define name name_nz``.

    Element ``d`` of an NZ row sits at ``(d / 16) * stride + d % 16``: ``who`` (the lane or sub-group index) loads
    ``width`` elements, one vector from element ``first`` (``width`` divides 16) or, without vector loads, element
    ``dim`` for each ``e``; ``live`` decides whether the row is read (else zeros).
    """
    return f"""
#define NZ_AT(d, stride) ((long long)((d) >> 4) * (stride) + ((d) & 15))
ACL_DEV void {name}_nz(const st* row, long long stride, int {who}, bool live, AclVec<st, {width}>& out) {{
#if VECTOR_LOADS
  if ({live}) out = *(const AclVec<st, {width}>*)(row + NZ_AT({first}, stride));
  else {{
    #pragma unroll
    for (int e = 0; e < {width}; ++e) out.v[e] = (st)0;
  }}
#else
  #pragma unroll
  for (int e = 0; e < {width}; ++e) {{
    const int d = {dim};
    out.v[e] = live && d < HEAD_DIM ? row[NZ_AT(d, stride)] : (st)0;
  }}
#endif
}}
#define {name} {name}_nz
"""


def merge_warps(head: str) -> str:
    """C source both decode kernels end with: each (query head, dim) folds every warp's (max, sum, acc) from
    shared memory into ``best``, ``l`` and ``o`` and names its query head ``h`` (``head``: the block's first head)."""
    return f"""  for (int idx = tid; idx < GROUP * HEAD_DIM; idx += THREADS) {{
    const int g = idx / HEAD_DIM, d = idx % HEAD_DIM;
    float best = -inf;
    for (int w = 0; w < NWARPS; ++w) best = sm_m[w][g] > best ? sm_m[w][g] : best;
    float o = 0.0f, l = 0.0f;
    if (best != -inf) {{
      for (int w = 0; w < NWARPS; ++w) {{
        if (sm_m[w][g] == -inf) continue;
        const float r = acl_exp(sm_m[w][g] - best);
        o += sm_o[w][g][d] * r;
        l += sm_l[w][g] * r;
      }}
    }}
    const long long h = {head} * GROUP + g;"""


def page_tiles(size: int, keys: int, splits: int, chunk: int) -> bool:
    """Whether a tile of ``keys`` consecutive keys (starting at a multiple of ``keys`` past its split's start) never
    crosses a page of ``size`` rows: then a paged kernel reads one table entry a tile (``ptile``)."""
    return keys > 0 and size % keys == 0 and (splits <= 1 or chunk % keys == 0)


def page_tile_lookup() -> str:
    """C source of ``page_tile``: the (K, V) element offsets of key ``j``'s row in the pool (the table read once for
    the tile that starts at ``j``; nothing read at or past ``hi``; an entry outside the pool flags, reads block 0)."""
    return """
ACL_DEV void page_tile(long long j, long long hi, const int* tab, const PageMeta& pm, const long long* ks,
                       const long long* vs, int* flag, long long& kb, long long& vb) {
  kb = 0;
  vb = 0;
  if (j >= hi) return;
  const unsigned jj = (unsigned)j, size = (unsigned)pm.size, q = jj / size;  // 32-bit: once a tile
  long long blk = tab[(long long)q * pm.tc];
  if (blk < 0 || blk >= pm.blocks) {
    *flag = 1;
    blk = 0;
  }
  const long long r = (long long)(jj - q * size);
  kb = blk * ks[0] + r * ks[2];
  vb = blk * vs[0] + r * vs[2];
}
"""


def page_lookup() -> str:
    """C source both decode kernels' paged instances share: the table geometry and ``dec_page`` (``st`` typedef'd)."""
    return f"""
{PAGE_STRUCT}
ACL_DEV const st* dec_page(const st* head, const long long* s, long long j, long long hi, const int* tab,
                           const PageMeta& pm, int* flag) {{
  if (j >= hi) return head;
  // 32-bit quotient and remainder: a 64-bit division is a long software routine, paid per key row
  const unsigned jj = (unsigned)j, size = (unsigned)pm.size, q = jj / size;
  long long blk = tab[(long long)q * pm.tc];
  if (blk < 0 || blk >= pm.blocks) {{
    *flag = 1;
    blk = 0;
  }}
  return head + blk * s[0] + (long long)(jj - q * size) * s[2];
}}
"""


def decode_source(inst: DecodeInstance, which: str) -> str:
    """The source (prelude included) of ``inst``'s "split" or "combine" kernel (one kernel per source)."""
    c = ctype(inst.dtype)
    f32 = ctype(D.ACL_FLOAT)
    s = c.storage
    vec_load = "1" if inst.vector else "0"
    sink_c = ctype(inst.sink if inst.sink is not None else D.ACL_FLOAT)
    sink_logit = load("sink[h * m.sink_step]", sink_c, f32)
    paged_common = _paged_common(inst.paged, inst.ptile)
    common = f"""
#define HEAD_DIM {inst.head_dim}
#define GROUP {inst.group}
#define THREADS {DECODE_THREADS}
#define WARP ACL_WARP_SIZE
#define NWARPS (THREADS / WARP)
#define VEC ((HEAD_DIM + WARP - 1) / WARP)
#define KPW {inst.kpw}
#define VECTOR_LOADS {vec_load}
#define FUSED {int(inst.fused)}
#define EAGER_KV {int(inst.eager)}
#define DOUBLE_BUFFER {int(inst.dbuf)}
{DECODE_STRUCT}
struct DecodeLens {{ int n[{MAX_DECODE_BATCH}]; }};
typedef {s} st;

ACL_DEV float dec_inf() {{ return __uint_as_float(0x7f800000u); }}
typedef {sink_c.storage} sink_t;

// the sink joins a finished (max, sum, output) as one more logit with no value: o and l rescaled
ACL_DEV void dec_sink(float logit, float& best, float& l, float& o) {{
  const float top = logit > best ? logit : best;
  const float r = best == -dec_inf() ? 0.0f : acl_exp(best - top);
  o *= r;
  l = l * r + acl_exp(logit - top);
  best = top;
}}

ACL_DEV float warp_sum(float x) {{
  #pragma unroll
  for (int o = WARP / 2; o > 0; o >>= 1) x += ACL_SHFL_XOR(x, o);
  return x;
}}

// the dim lane ``lane`` holds in slot e: contiguous runs for vector loads, else interleaved (coalesced)
ACL_DEV int dec_dim(int lane, int e) {{ return VECTOR_LOADS ? lane * VEC + e : e * WARP + lane; }}

// row ``row``'s dims this lane owns, in storage (zeros when ``live`` is false: a key no head keeps)
ACL_DEV void dec_raw(const st* row, long long stride, int lane, bool live, AclVec<st, VEC>& out) {{
#if VECTOR_LOADS
  if (live) out = *(const AclVec<st, VEC>*)(row + lane * VEC);
  else {{
    #pragma unroll
    for (int e = 0; e < VEC; ++e) out.v[e] = (st)0;
  }}
#else
  #pragma unroll
  for (int e = 0; e < VEC; ++e) {{
    const int d = e * WARP + lane;
    out.v[e] = live && d < HEAD_DIM ? row[(long long)d * stride] : (st)0;
  }}
#endif
}}
{paged_common}
// bit t of kept[g]: head g of the group keeps key j0 + t (inside the split, not masked); returns their union.
// Every mask byte of the tile loads at once (no load waits on another); keys past hi load nothing.
ACL_DEV unsigned dec_keep(const DecodeMeta& m, const unsigned char* mask_kv, long long j0, long long hi,
                          unsigned* kept) {{
  unsigned rows = 0;
  #pragma unroll
  for (int g = 0; g < GROUP; ++g) {{
    unsigned bits = 0;
    #pragma unroll
    for (int t = 0; t < KPW; ++t) {{
      const bool in = j0 + t < hi;
      bool keep = in;
      if (m.has_mask) {{
        const unsigned char hidden = in ? mask_kv[g * m.mask[1] + (j0 + t) * m.mask[3]] : (unsigned char)1;
        keep = hidden == 0;
      }}
      bits |= (unsigned)keep << t;
    }}
    kept[g] = bits;
    rows |= bits;
  }}
  return rows;
}}

ACL_DEV float block_reduce(float x, bool take_max, float* scratch) {{
  #pragma unroll
  for (int o = WARP / 2; o > 0; o >>= 1) {{
    const float y = ACL_SHFL_XOR(x, o);
    x = take_max ? (y > x ? y : x) : x + y;
  }}
  const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = scratch[0];
  for (int w = 1; w < NWARPS; ++w) x = take_max ? (scratch[w] > x ? scratch[w] : x) : x + scratch[w];
  __syncthreads();
  return x;
}}

// (batch b, query head h)'s output from its splits' partials: thread s reads split s's (max, sum) (splits <=
// THREADS), the block reduces them, and each split's weight exp(m_s - top) waits in shared memory while a
// thread per dim sums the splits' partial outputs. The combine kernel and the fused kernel's last block both
// run it (``P``: plain pointer, or volatile where other blocks of the same launch wrote the partials).
template <typename P>
ACL_DEV void dec_combine(const DecodeMeta& m, P part, st* __restrict__ out, float* __restrict__ lse,
                         const sink_t* __restrict__ sink, long long b, long long h, float* sm_w, float* sm_r) {{
  const long long bh = b * m.nq + h;
  const int tid = threadIdx.x;
  const float inf = dec_inf();
  P rec = part + bh * m.splits * (HEAD_DIM + 2);
  const bool mine = tid < m.splits;
  const float ms = mine ? rec[tid * (HEAD_DIM + 2) + HEAD_DIM] : -inf;
  const float ls = mine ? rec[tid * (HEAD_DIM + 2) + HEAD_DIM + 1] : 0.0f;
  const float best = block_reduce(ms, true, sm_r);
  const float l = block_reduce(ms != -inf ? ls * acl_exp(ms - best) : 0.0f, false, sm_r);
  float top = best, total = l;  // with the sink, if any
  if (m.has_sink) {{
    float none = 0.0f;
    dec_sink({sink_logit}, top, total, none);
  }}
  sm_w[tid] = ms != -inf ? acl_exp(ms - top) / total : 0.0f;
  __syncthreads();
  for (int d = tid; d < HEAD_DIM; d += THREADS) {{
    float o = 0.0f;
    if (l > 0.0f) {{
      #pragma unroll 8
      for (int s = 0; s < m.splits; ++s) o += rec[s * (HEAD_DIM + 2) + d] * sm_w[s];
    }}
    out[b * m.o[0] + h * m.o[1] + d * m.o[3]] = {store("o", f32, c)};
  }}
  if (lse != nullptr && tid == 0) {{
    lse[b * m.lse[0] + h * m.lse[1]] = total > 0.0f ? top + acl_log(total) : inf;
  }}
  __syncthreads();  // sm_w is free again for the next head
}}
{fast_combine_source(c, sink_logit, MAX_SPLITS) if inst.comb else ""}
"""
    heads = (
        "  const st* k_head = k + b * m.k[0] + hk * m.k[1];\n  const st* v_head = v + b * m.v[0] + hk * m.v[1];\n"
        if not inst.paged
        else "  const st* k_head = k + hk * m.k[1];\n  const st* v_head = v + hk * m.v[1];\n"
        "  const int* tab = table + b * pm.tb;\n"
    )
    paged_params = ", const PageMeta pm, const int* __restrict__ table, int* flag" if inst.paged else ""

    def row_k(j: str, off: str = "kb") -> str:
        return row("k", j, off)

    def row_v(j: str, off: str = "vb") -> str:
        return row("v", j, off)

    def row(kv: str, j: str, off: str) -> str:
        """Key row ``j`` (``base + t``) of K or V; ``off``: the tile's pool offset variable (``ptile``)."""
        if not inst.paged:
            return f"{kv}_head + ({j}) * m.{kv}[2], m.{kv}[3]"
        if inst.ptile:  # the tile's page offset, then row t of the tile
            t = j.split(" + ")[1]
            return f"{kv}_head + {off} + (long long)({t}) * m.{kv}[2], m.{kv}[3]"
        return f"dec_page({kv}_head, m.{kv}, {j}, hi, tab, pm, flag), m.{kv}[3]"

    def tile_page(j: str, kb: str = "kb", vb: str = "vb", decl: bool = False) -> str:
        """``ptile``: the statement reading tile ``j``'s table entry into ``kb`` / ``vb`` (empty otherwise)."""
        if not inst.ptile:
            return ""
        head = f"long long {kb}, {vb};\n    " if decl else ""
        return f"    {head}page_tile({j}, hi, tab, pm, m.k, m.v, flag, {kb}, {vb});\n"

    # ptile outside double buffering: the first tile's table entry before the loop, each next tile's under the
    # current tile's rows (with its mask bytes), so no row load waits on a table read
    first_page = next_page = this_page = ""
    if inst.ptile:
        first_page = f"#if !DOUBLE_BUFFER\n  long long pkb, pvb;\n{tile_page('lo + warp * KPW', 'pkb', 'pvb')}#endif\n"
        this_page = "    const long long kb = pkb, vb = pvb;\n"
        next_page = tile_page("j0 + NWARPS * KPW", "pkb", "pvb")

    # ppdl: nothing the predecessor wrote is read before it completes; the combine may be scheduled at once
    pdl_wait = "  ACL_PDL_WAIT();\n  ACL_PDL_LAUNCH_DEPENDENTS();\n" if inst.pdl else ""
    opening = f"""
extern "C" __global__ void __launch_bounds__(THREADS) {inst.split_name}(
    const DecodeMeta m, const DecodeLens lens, const double scale_arg,
    const st* __restrict__ q, const st* __restrict__ k, const st* __restrict__ v,
    const unsigned char* __restrict__ mask, float* part, st* __restrict__ out,
    float* __restrict__ lse, const sink_t* __restrict__ sink, unsigned* counters{paged_params}) {{
  __shared__ float sm_m[NWARPS][GROUP];
  __shared__ float sm_l[NWARPS][GROUP];
  __shared__ float sm_o[NWARPS][GROUP][HEAD_DIM];
#if FUSED
  __shared__ float sm_w[{"GROUP * MAX_SPLITS" if inst.comb else "THREADS"}];
  __shared__ float sm_r[{"GROUP" if inst.comb else "NWARPS"}];
  __shared__ unsigned sm_last;
#endif
{pdl_wait}  const int tid = threadIdx.x, lane = tid % WARP, warp = tid / WARP;
  unsigned blk = blockIdx.x;  // 32-bit division: the grid is (batch, kv head, split) flattened to x
  const long long split = blk % (unsigned)m.splits;
  blk /= (unsigned)m.splits;
  const long long hk = blk % (unsigned)m.nkv, b = blk / (unsigned)m.nkv;
  const long long len = lens.n[b];
  const long long lo = split * m.chunk;
  const long long hi = lo + m.chunk < len ? lo + m.chunk : len;
  const float scale = (float)scale_arg;
  const float inf = dec_inf();
"""
    middle = f"""  float qr[GROUP][VEC], acc[GROUP][VEC], mx[GROUP], sum[GROUP];
  #pragma unroll
  for (int g = 0; g < GROUP; ++g) {{
    const st* q_row = q + b * m.q[0] + (hk * GROUP + g) * m.q[1];
    #pragma unroll
    for (int e = 0; e < VEC; ++e) {{
      const int d = dec_dim(lane, e);
      qr[g][e] = d < HEAD_DIM ? {load("q_row[(long long)d * m.q[3]]", c, f32)} : 0.0f;
      acc[g][e] = 0.0f;
    }}
    mx[g] = -inf;
    sum[g] = 0.0f;
  }}
{heads}  const unsigned char* mask_kv = m.has_mask ? mask + b * m.mask[0] + hk * GROUP * m.mask[1] : nullptr;
  // a warp's tiles are KPW keys, NWARPS * KPW apart; the next tile's mask bytes load under this tile's rows
  unsigned kept[GROUP];
  unsigned rows = dec_keep(m, mask_kv, lo + warp * KPW, hi, kept);
{first_page}#if DOUBLE_BUFFER
  // the first tile's rows (by range, as eager loads take them) before the loop; each iteration then puts
  // the next tile's rows in flight before it works on the rows that landed
  AclVec<st, VEC> kn[KPW], vn[KPW];
  {{
    const long long j1 = lo + warp * KPW;
{tile_page("j1", decl=True)}    #pragma unroll
    for (int t = 0; t < KPW; ++t) dec_raw({row_k("j1 + t")}, lane, j1 + t < hi, kn[t]);
    #pragma unroll
    for (int t = 0; t < KPW; ++t) dec_raw({row_v("j1 + t")}, lane, j1 + t < hi, vn[t]);
  }}
#endif
  for (long long j0 = lo + warp * KPW; j0 < hi; j0 += NWARPS * KPW) {{
    unsigned cur[GROUP];
    #pragma unroll
    for (int g = 0; g < GROUP; ++g) cur[g] = kept[g];
    const unsigned live = rows;
    // the tile's K and V rows in flight together (raw storage), then the next tile's mask, then the arithmetic
    AclVec<st, VEC> kr[KPW], vr[KPW];
#if DOUBLE_BUFFER
    #pragma unroll
    for (int t = 0; t < KPW; ++t) {{
      kr[t] = kn[t];
      vr[t] = vn[t];
    }}
    {{
      const long long jn = j0 + NWARPS * KPW;
{tile_page("jn", decl=True)}      #pragma unroll
      for (int t = 0; t < KPW; ++t) dec_raw({row_k("jn + t")}, lane, jn + t < hi, kn[t]);
      #pragma unroll
      for (int t = 0; t < KPW; ++t) dec_raw({row_v("jn + t")}, lane, jn + t < hi, vn[t]);
    }}
    rows = dec_keep(m, mask_kv, j0 + NWARPS * KPW, hi, kept);
    if (live == 0) continue;  // a tile no head keeps (the same in every lane)
    #pragma unroll
    for (int t = 0; t < KPW; ++t) {{
      if (!((live >> t) & 1u)) {{
        #pragma unroll
        for (int e = 0; e < VEC; ++e) {{
          kr[t].v[e] = (st)0;
          vr[t].v[e] = (st)0;
        }}
      }}
    }}
#elif EAGER_KV
    // every row inside the split loads at once with the mask bytes (no wait on them); rows no head keeps
    // are zeroed once they land, so the arithmetic below sees what the mask-first loads give it
{this_page}    #pragma unroll
    for (int t = 0; t < KPW; ++t) dec_raw({row_k("j0 + t")}, lane, j0 + t < hi, kr[t]);
    #pragma unroll
    for (int t = 0; t < KPW; ++t) dec_raw({row_v("j0 + t")}, lane, j0 + t < hi, vr[t]);
    rows = dec_keep(m, mask_kv, j0 + NWARPS * KPW, hi, kept);
{next_page}    if (live == 0) continue;  // a tile no head keeps (the same in every lane)
    #pragma unroll
    for (int t = 0; t < KPW; ++t) {{
      if (!((live >> t) & 1u)) {{
        #pragma unroll
        for (int e = 0; e < VEC; ++e) {{
          kr[t].v[e] = (st)0;
          vr[t].v[e] = (st)0;
        }}
      }}
    }}
#else
{this_page}    #pragma unroll
    for (int t = 0; t < KPW; ++t) dec_raw({row_k("j0 + t")}, lane, (live >> t) & 1u, kr[t]);
    #pragma unroll
    for (int t = 0; t < KPW; ++t) dec_raw({row_v("j0 + t")}, lane, (live >> t) & 1u, vr[t]);
    rows = dec_keep(m, mask_kv, j0 + NWARPS * KPW, hi, kept);
{next_page}    if (live == 0) continue;  // a tile no head keeps: no K / V bytes moved (the same in every lane)
#endif
    float sc[GROUP][KPW];
    #pragma unroll
    for (int g = 0; g < GROUP; ++g) {{
      #pragma unroll
      for (int t = 0; t < KPW; ++t) {{
        float dot = 0.0f;
        #pragma unroll
        for (int e = 0; e < VEC; ++e) dot += qr[g][e] * {load("kr[t].v[e]", c, f32)};
        sc[g][t] = warp_sum(dot);
      }}
    }}
{online_softmax_tile("KPW", "VEC", "the same in every lane", load("vr[t].v[e]", c, f32))}
  }}
  #pragma unroll
  for (int g = 0; g < GROUP; ++g) {{
    if (lane == 0) {{
      sm_m[warp][g] = mx[g];
      sm_l[warp][g] = sum[g];
    }}
    #pragma unroll
    for (int e = 0; e < VEC; ++e) {{
      if (dec_dim(lane, e) < HEAD_DIM) sm_o[warp][g][dec_dim(lane, e)] = acc[g][e];
    }}
  }}
  __syncthreads();
"""
    combine_heads = (
        "      dec_combine_heads(m, (const volatile float*)part, out, lse, sink, b, hk * GROUP, GROUP, sm_w, sm_r);\n"
        if inst.comb
        else "      #pragma unroll 1\n      for (int g = 0; g < GROUP; ++g) {\n"
        "        dec_combine(m, (const volatile float*)part, out, lse, sink, b, hk * GROUP + g, sm_w, sm_r);\n"
        "      }\n"
    )
    ending = f"""{merge_warps("hk")}
    if (m.splits == 1) {{  // the whole cache in one block: the output itself
      if (m.has_sink) dec_sink({sink_logit}, best, l, o);
      const float r = l > 0.0f ? o / l : 0.0f;
      out[b * m.o[0] + h * m.o[1] + d * m.o[3]] = {store("r", f32, c)};
      if (lse != nullptr && d == 0) lse[b * m.lse[0] + h * m.lse[1]] = l > 0.0f ? best + acl_log(l) : inf;
    }} else {{
      float* rec = part + ((b * m.nq + h) * m.splits + split) * (HEAD_DIM + 2);
      rec[d] = o;
      if (d == 0) {{
        rec[HEAD_DIM] = best;
        rec[HEAD_DIM + 1] = l;
      }}
    }}
  }}
#if FUSED
  // the (batch, kv head)'s last split block to finish combines its GROUP heads (the combine kernel's code);
  // its counter goes back to zero, so the next launch (or replay) on the stream starts from zero again
  if (m.splits > 1) {{
    ACL_FENCE();  // this thread's partials are visible device-wide before the block counts itself done
    __syncthreads();
    if (tid == 0) sm_last = ACL_ATOMIC_INC(counters + b * m.nkv + hk) == (unsigned)(m.splits - 1);
    __syncthreads();
    if (sm_last) {{
      ACL_FENCE();
{combine_heads}      if (tid == 0) counters[b * m.nkv + hk] = 0u;
    }}
  }}
#endif
}}

"""
    if inst.pipe:  # the pipelined kernel (kernels/attention_decode_pipe.py, which imports this module's pieces)
        from acl_rocm.kernels.attention_decode_pipe import pipe_common, pipe_split_body

        common += pipe_common(inst)
        middle = pipe_split_body(inst)
    body = common + opening + middle + ending
    where = "blockIdx.x / (unsigned)m.nq, blockIdx.x % (unsigned)m.nq"
    combine_body = (
        "  __shared__ float sm_w[THREADS];\n  __shared__ float sm_r[NWARPS];\n"
        f"  dec_combine(m, part, out, lse, sink, {where}, sm_w, sm_r);\n"
    )
    if inst.comb:
        combine_body = (
            f"  __shared__ float sm_w[MAX_SPLITS];\n  __shared__ float sm_t[1];\n"
            f"  dec_combine_heads(m, part, out, lse, sink, {where}, 1, sm_w, sm_t);\n"
        )
    if inst.pdl:  # ppdl: the split kernel's partials are read only once it completed; the next may be scheduled
        combine_body = "  ACL_PDL_WAIT();\n  ACL_PDL_LAUNCH_DEPENDENTS();\n" + combine_body
    combine = f"""
extern "C" __global__ void __launch_bounds__(THREADS) {inst.combine_name}(
    const DecodeMeta m, const float* __restrict__ part, st* __restrict__ out, float* __restrict__ lse,
    const sink_t* __restrict__ sink) {{
{combine_body}}}
"""
    assert MAX_SPLITS <= DECODE_THREADS
    header = f"// split-KV decode attention ({which}): {inst.dtype.short}, D={inst.head_dim}, group {inst.group}"
    return "\n".join([PRELUDE, SHUFFLE_XOR, ATOMICS, header, body if which == "split" else common + combine])
