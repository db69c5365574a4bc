"""``acl-core bench --suite decode``: the kernels of one decode token, beside PyTorch, against HBM speed.

Issue 15 item 7's shapes (a Qwen3-0.6B-shaped bf16 model): ArgMax over the 151,936-entry vocabulary,
IncreFlashAttention and FusedInferAttentionScore with one query token against a KV cache of up to 32k
(16 query heads, 8 KV heads, D 128; the split-KV decode kernel on rocm), FusedInferAttentionScore at the Qwen3
runner's short masked cache (``ShortDecode``: 96 of 128 keys, batch 1 and 8), the small-M GEMMs of the layers
and the LM head (M 1, 8, 16), AddRmsNorm of the residual and ApplyRotaryPosEmb of q and k. Every case
times phase 2 of a prepared aclnn call and the PyTorch equivalent in alternating rounds
(:func:`~acl_tools.bench.timing.measure_interleaved`), and reports microseconds and the bytes it must
move per call as GB/s and as a fraction of the device's HBM figure (:data:`HBM_GBPS`;
``ACL_BENCH_HBM_GBPS`` overrides it). The targets: ArgMax <= 10 us, decode attention and the GEMMs
near HBM speed (the GEMMs >= 70%).

``--only DecodeSplit`` (named only: the whole suite leaves it out) times rocm's split-path opt-in settings beside
the default and torch at 4k and 32k keys, and a 32k cache masked past 4k written keys (:data:`SPLIT_OPT_CONFIGS`).

Eager phase 2 of kernels this small is host-bound, so each row's ``extra`` also holds the device time of one
call (:func:`~acl_tools.bench.graph_time.graph_us`): ``acl_gpu_us`` from :data:`GRAPH_CALLS` prepared calls
captured on the bench stream and replayed, ``torch_gpu_us`` from the same under a ``torch.cuda.CUDAGraph``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from acl_core import aclnn
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.eager import DeviceArray, empty, to_device
from acl_tools.bench.graph_time import GRAPH_CALLS, graph_us
from acl_tools.bench.ops import SIZES, Case, Sizes, Suite

VOCAB = 151_936
HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD_DIM = 1024, 3072, 16, 8, 128
"""Qwen3-0.6B's shape."""

SWITCHES = (
    "ACL_ARGMAX_CONFIG",
    "ACL_ROWNORM_CONFIG",
    "ACL_ROPE_CONFIG",
    "ACL_KV_SCATTER_CONFIG",
    "ACL_GEMV",
    "ACL_ATTENTION_PATH",
    "ACL_DECODE_CONFIG",
    "ACL_PAGED_DECODE",
)
"""Environment switches of the rocm kernels these rows time, recorded in the report when set."""
VARIANTS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "ACL_ARGMAX_CONFIG": ("reduction", "forced_arg", ("split", "persist", "block")),
    "ACL_ROWNORM_CONFIG": (
        "norm",
        "forced_layout",
        ("block", "group", "group32", "warps", "warps2", "warps4", "warps-f"),
    ),
    "ACL_ROPE_CONFIG": ("attention", "forced_rope", ("scalar", "vec")),
    "ACL_KV_SCATTER_CONFIG": ("kv_cache", "forced_scatter", ("scalar", "vec", "row")),
}
"""switch -> (runner, its forcing attribute, the values timed as separate rows): the A/B of issue 15's tiny
decode kernels in one run (rocm; other backends time the case once)."""
PAGED_MODES = ("tile", "direct", "gather")
"""``ACL_PAGED_DECODE`` choices the paged rows time on rocm (``tile``: a table entry a warp's tile, the default;
``direct``: a table entry a key row; ``gather``: copy, then dense)."""
PIPE_CONFIGS = ("two", "two,pipe,pbpu=4", "two,pipe=2,pkeys=32")
"""Rows beside rocm's default (the pipelined split kernel, 4 stages of 16 keys, 2 blocks a compute unit): the
register-tile split kernel (the default until 2026-12-06), the pipeline at 4 blocks a unit, 2 stages of 32 keys."""
DECODE_CONFIGS = ("two,wide", "two,bpu=8", "two,wide,bpu=8", "two,kpw=16", *PIPE_CONFIGS)
"""``ACL_DECODE_CONFIG`` settings the dense IncreFlashAttention rows of the shapes' ``config_lengths`` also time on
rocm, each a row beside the default (the split kernel's bandwidth at long caches: 16-byte loads, more splits, more
keys a warp tile, a cp.async pipeline)."""
SPLIT_OPT_CONFIGS = (
    "two,pipe,pcomb,ppdl",
    "fused,pipe,pcomb,ppdl",
    "two,pipe=6,pkeys=32,pdyn,pbpu=2,pcomb,ppdl",
    "two,pipe=3,pkeys=64,pmma,pbpu=2,pcomb,ppdl",
    "fused,pipe=3,pkeys=64,pmma,pbpu=2,pcomb,ppdl",
    "auto,pipe=3,pkeys=64,pmma,bpdl",
)
"""``--only DecodeSplit``: settings timed beside rocm's default and torch at the ``config_lengths`` (4k, 32k keys):
the split path's opt-in items (``pcomb``: the faster combine, partials in stream scratch; ``ppdl``: programmatic
launches; ``pdyn``: deeper stages in dynamic shared memory; ``pmma``: tiles through the matrix units).
``ACL_BENCH_DECODE_SPLIT`` (settings separated by ``;``) replaces them for a run (e.g. with :data:`SPLIT_MORE_CONFIGS`).
"""
SPLIT_MORE_CONFIGS = (
    "two,pipe=3,pkeys=64,pmma",
    "two,pipe=4,pkeys=64,pmma,pbpu=1,pcomb,ppdl",
    "fused,pipe=4,pkeys=64,pmma,pbpu=1,pcomb,ppdl",
    "two,pipe=2,pkeys=64,pmma,pbpu=3,pcomb,ppdl",
    "two,pipe=12,pkeys=16,pdyn,pbpu=2,pcomb,ppdl",
)
"""A second ``DecodeSplit`` run's settings (``ACL_BENCH_DECODE_SPLIT``, joined by ``;``): ``pmma`` alone, at one and
three blocks a unit, and the lane layout twelve stages deep."""
MASKED_SPLIT_CONFIGS = ("auto,pipe,bpdl", "auto,pipe=3,pkeys=64,pmma,bpdl,pskip")
"""``--only DecodeSplit``'s masked row (a 32k cache with 4k keys written, the rest masked: the Qwen3 runner's cache
past its position) beside the default (``pskip`` since 2026-12-07: only the kept rows copied): the default before
it, and the matrix-unit tiles on top."""
MASKED_SPLIT: Final = (32_768, 4096)
"""The masked row's capacity and written keys (full size; small: the ``config_lengths`` entry and a quarter)."""
SHORT_CONFIGS = ("auto",)
"""``ACL_DECODE_CONFIG`` settings the short-cache rows (``--only ShortDecode``: the Qwen3 runner's decode attention)
also time on rocm, each a row beside the default (the block kernel launched programmatically, ``bpdl``): the same
launched plainly (the default until 2026-12-06)."""

HBM_GBPS: dict[str, float] = {"H200": 4800.0, "H100": 3350.0, "MI300X": 5300.0, "MI325X": 6000.0}
"""Peak HBM bandwidth by device-name fragment (vendor figures, GB/s)."""

__all__ = ["GRAPH_CALLS", "DecodeSuite", "run"]

OPS = (
    "ArgMax",
    "IncreFlashAttention",
    "FusedInferAttentionScore",
    "PagedAttention",
    "ShortDecode",
    "DecodeSplit",
    "Matmul",
    "AddRmsNorm",
    "RmsNorm",
    "ApplyRotaryPosEmb",
    "SwiGlu",
    "ScatterPaKvCache",
)
"""The names ``--only`` picks from in the decode suite."""

FULL_SHAPES: dict[str, Any] = {
    "argmax_rows": (1, 8),
    "kv_lengths": (128, 1024, 4096, 32_768),  # 128: the Qwen3 runner's cache capacity in a short decode
    "paged_lengths": (4096, 32_768),
    "config_lengths": (4096, 32_768),
    "short_batches": (1, 8),
    "short_cache": (128, 96),  # the Qwen3 runner's decode: capacity 128, 96 keys written (the rest masked)
    "gemm_m": (1, 8, 16),
    "gemm_kn": ((HIDDEN, INTERMEDIATE), (INTERMEDIATE, HIDDEN), (HIDDEN, 2 * HIDDEN), (HIDDEN, VOCAB)),
    "rows": (1, 8),
    "kv_blocks": 64,
    "vocab": VOCAB,
    "hidden": HIDDEN,
    "intermediate": INTERMEDIATE,
}
SMALL_SHAPES: dict[str, Any] = {
    "argmax_rows": (1,),
    "kv_lengths": (64,),
    "paged_lengths": (64,),
    "config_lengths": (64,),
    "short_batches": (2,),
    "short_cache": (48, 37),
    "gemm_m": (1,),
    "gemm_kn": ((64, 96),),
    "rows": (1,),
    "kv_blocks": 2,
    "vocab": 10_000,
    "hidden": 64,
    "intermediate": 96,
}
"""Seconds on a CPU (the reference beside torch on the CPU), for tests."""


def hbm_gbps(device_name: str) -> float | None:
    """The device's HBM figure in GB/s (``ACL_BENCH_HBM_GBPS`` first, then :data:`HBM_GBPS`), or None."""
    forced = os.environ.get("ACL_BENCH_HBM_GBPS")
    if forced:
        return float(forced)
    for fragment, gbps in HBM_GBPS.items():
        if fragment.lower() in device_name.lower():
            return gbps
    return None


class DecodeSuite(Suite):
    """The decode cases of one size on one backend beside PyTorch (every case in alternating rounds)."""

    def __init__(
        self,
        backend: Backend,
        sizes: Sizes,
        shapes: dict[str, Any],
        progress: Callable[[str], None] = print,
        only: set[str] | None = None,
    ) -> None:
        super().__init__(backend, sizes, progress, only)
        self.shapes = shapes

    def _run(self, case: Case, acl: Callable[[], tuple[Callable[[], None], Any]], torch_fn: Any, op: str) -> None:
        self.case(case, acl, torch_fn, op, interleaved=True)
        if case.status == "ok":
            gpu = graph_us(self, acl, torch_fn)
            case.extra.update(gpu)

            def us(v: float | None) -> str:
                return "-" if v is None else f"{v:.2f}"

            self.progress(f"    graph replay us/call: acl {us(gpu['acl_gpu_us'])}  torch {us(gpu['torch_gpu_us'])}")

    def _variants(
        self, case: Case, acl: Callable[[], tuple[Callable[[], None], Any]], torch_fn: Any, op: str, switch: str
    ) -> None:
        """The case once per kernel variant of :data:`VARIANTS` ``switch`` where the backend has it (rocm: each
        forced on its runner for the row, the op labelled with it), else once as the environment sets it."""
        runner_key, attr, values = VARIANTS[switch]
        runners = getattr(self.backend, "runners", None)
        runner = runners.get(runner_key) if isinstance(runners, dict) else None
        if runner is None or not hasattr(runner, attr):
            return self._run(case, acl, torch_fn, op)
        for value in values:
            setattr(runner, attr, value)
            try:
                labelled = Case(f"{case.op} {value}", case.shape, case.dtype, case.unit, case.work)
                self._run(labelled, acl, torch_fn, op)
            finally:
                setattr(runner, attr, None)

    def argmax(self) -> None:
        """ArgMax over the vocabulary (bf16 logits), batch 1 and 8, beside ``torch.argmax``."""
        if not self.wanted("ArgMax"):
            return
        vocab = self.shapes["vocab"]
        for rows in self.shapes["argmax_rows"]:

            def acl(rows: int = rows) -> tuple[Callable[[], None], Any]:
                return self.prepared(
                    "ArgMax", {"self": self.array((rows, vocab), D.ACL_BF16), "dim": -1, "keepdim": False}
                )

            def torch_fn(rows: int = rows) -> Callable[[], object]:
                x = self.tensor((rows, vocab), D.ACL_BF16)
                return lambda: self.torch.argmax(x, dim=-1)

            case = Case("ArgMax", f"[{rows},{vocab}]", "bf16", "GB/s", rows * vocab * 2)
            self._variants(case, acl, torch_fn, "ArgMax", "ACL_ARGMAX_CONFIG")

    def attention(self) -> None:
        """IncreFlashAttention and FusedInferAttentionScore (BSND, one query token, GQA 16/8, D 128) beside SDPA.

        On rocm both take the split-KV decode kernel (``ACL_ATTENTION_PATH=kernel`` times the row kernel).
        """
        for op in ("IncreFlashAttention", "FusedInferAttentionScore"):
            if self.wanted(op):
                self._decode_attention(op)

    def _configs(
        self,
        case: Case,
        acl: Callable[[], tuple[Callable[[], None], Any]],
        torch_fn: Any,
        op: str,
        settings: tuple[str, ...] = DECODE_CONFIGS,
    ) -> None:
        """``case`` as the environment sets it, then (rocm) once more under each of ``settings`` (ACL_DECODE_CONFIG),
        forced on the decode planner for the row (the op labelled with it)."""
        self._run(case, acl, torch_fn, op)
        runners = getattr(self.backend, "runners", None)
        runner = runners.get("attention") if isinstance(runners, dict) else None
        decode = getattr(runner, "decode", None)
        if not hasattr(decode, "use_config"):
            return
        for setting in settings:
            decode.use_config(setting)  # type: ignore[union-attr]
            try:
                labelled = Case(f"{case.op} {setting}", case.shape, case.dtype, case.unit, case.work)
                self._run(labelled, acl, torch_fn, op)
            finally:
                decode.use_config(None)  # type: ignore[union-attr]

    def short_decode(self) -> None:
        """The Qwen3 runner's decode attention (``--only ShortDecode``): FusedInferAttentionScore, BSND, one query
        token against a short cache (capacity 128, 96 keys written, a [B,1,1,C] mask hiding the rest), batch 1 and
        8, beside SDPA with the same mask; on rocm once more under each :data:`SHORT_CONFIGS` setting."""
        if not self.wanted("ShortDecode"):
            return
        cap, filled = self.shapes["short_cache"]
        for b in self.shapes["short_batches"]:
            hidden = np.broadcast_to(np.arange(cap) >= filled, (b, 1, 1, cap)).copy()  # True: masked (CANN)

            def acl(b: int = b, hidden: np.ndarray = hidden) -> tuple[Callable[[], None], Any]:
                q = self.array((b, 1, HEADS, HEAD_DIM), D.ACL_BF16)
                k, v = (self.array((b, cap, KV_HEADS, HEAD_DIM), D.ACL_BF16) for _ in range(2))
                lists = [aclnn.aclCreateTensorList([t.tensor()]) for t in (k, v)]
                args: dict[str, Any] = {"query": q, "key": lists[0], "value": lists[1], "numHeads": HEADS}
                args |= {"attenMask": to_device(hidden, self.backend)}
                args |= {"scaleValue": 1 / math.sqrt(HEAD_DIM), "inputLayout": "BSND", "numKeyValueHeads": KV_HEADS}
                args |= {"preTokens": 2**31 - 1, "nextTokens": 2**31 - 1, "sparseMode": 0, "innerPrecise": 0}
                args |= {"blockSize": 0, "antiquantMode": 0, "softmaxLseFlag": False}
                launch, free = self.prepared("FusedInferAttentionScore", args)
                return launch, _also_free(free, k, v)

            def torch_fn(b: int = b, hidden: np.ndarray = hidden) -> Callable[[], object]:
                q = self.tensor((b, HEADS, 1, HEAD_DIM), D.ACL_BF16)
                k, v = (self.tensor((b, KV_HEADS, cap, HEAD_DIM), D.ACL_BF16) for _ in range(2))
                keep = self.torch.from_numpy(~hidden).to(self.device)  # SDPA's boolean mask: True keeps
                sdpa = self.torch.nn.functional.scaled_dot_product_attention
                return lambda: sdpa(q, k, v, attn_mask=keep, enable_gqa=True)

            nbytes = 2 * b * filled * KV_HEADS * HEAD_DIM * 2  # the written K and V rows
            shape = f"B{b} Skv{filled}/{cap} N{HEADS}/{KV_HEADS} D{HEAD_DIM} masked"
            case = Case("FusedInferAttentionScore short decode", shape, "bf16", "GB/s", nbytes)
            self._configs(case, acl, torch_fn, "FusedInferAttentionScore", SHORT_CONFIGS)

    def split_sweep(self) -> None:
        """``--only DecodeSplit``: IncreFlashAttention (B1, GQA 16/8, D 128, bf16) at the ``config_lengths`` beside
        SDPA, as the environment sets it and under each :data:`SPLIT_OPT_CONFIGS` setting (``ACL_BENCH_DECODE_SPLIT``
        overrides), then a long cache masked past its written part under :data:`MASKED_SPLIT_CONFIGS`. Named only:
        the whole suite leaves it out (its rows are a sweep of its own, sized for one <= 60 s run)."""
        if self.only is None or "DecodeSplit" not in self.only:
            return
        forced = os.environ.get("ACL_BENCH_DECODE_SPLIT", "").strip()
        settings = tuple(x.strip() for x in forced.split(";") if x.strip()) if forced else SPLIT_OPT_CONFIGS
        for skv in self.shapes["config_lengths"]:
            nbytes = 2 * skv * KV_HEADS * HEAD_DIM * 2
            case = Case(
                "IncreFlashAttention split", f"Skv{skv} N{HEADS}/{KV_HEADS} D{HEAD_DIM}", "bf16", "GB/s", nbytes
            )
            self._configs(case, self._dense_bnsd(skv, "BSND"), self._torch_decode(skv), "IncreFlashAttention", settings)
        cap = self.shapes["config_lengths"][-1]
        filled = MASKED_SPLIT[1] if cap == MASKED_SPLIT[0] else max(1, cap // 4)
        hidden = np.broadcast_to(np.arange(cap) >= filled, (1, 1, 1, cap)).copy()
        shape = f"Skv{filled}/{cap} N{HEADS}/{KV_HEADS} D{HEAD_DIM} masked"
        case = Case("IncreFlashAttention split", shape, "bf16", "GB/s", 2 * filled * KV_HEADS * HEAD_DIM * 2)
        self._configs(
            case, self._dense_bnsd(cap, "BSND", hidden), self._torch_decode(cap, hidden), "IncreFlashAttention",
            MASKED_SPLIT_CONFIGS,
        )  # fmt: skip

    def _decode_attention(self, op: str) -> None:
        for skv in self.shapes["kv_lengths"]:

            def acl(skv: int = skv) -> tuple[Callable[[], None], Any]:
                q = self.array((1, 1, HEADS, HEAD_DIM), D.ACL_BF16)
                k, v = (self.array((1, skv, KV_HEADS, HEAD_DIM), D.ACL_BF16) for _ in range(2))
                lists = [aclnn.aclCreateTensorList([t.tensor()]) for t in (k, v)]
                args: dict[str, Any] = {"query": q, "key": lists[0], "value": lists[1], "numHeads": HEADS}
                args |= {"scaleValue": 1 / math.sqrt(HEAD_DIM), "inputLayout": "BSND", "numKeyValueHeads": KV_HEADS}
                if op == "FusedInferAttentionScore":
                    args |= {"preTokens": 2**31 - 1, "nextTokens": 2**31 - 1, "sparseMode": 0, "innerPrecise": 0}
                    args |= {"blockSize": 0, "antiquantMode": 0, "softmaxLseFlag": False}
                launch, free = self.prepared(op, args)
                return launch, _also_free(free, k, v)

            def torch_fn(skv: int = skv) -> Callable[[], object]:
                q = self.tensor((1, HEADS, 1, HEAD_DIM), D.ACL_BF16)
                k, v = (self.tensor((1, KV_HEADS, skv, HEAD_DIM), D.ACL_BF16) for _ in range(2))
                sdpa = self.torch.nn.functional.scaled_dot_product_attention
                return lambda: sdpa(q, k, v, enable_gqa=True)

            nbytes = 2 * skv * KV_HEADS * HEAD_DIM * 2  # K and V are read once; q and the output are noise
            case = Case(f"{op} decode", f"Skv{skv} N{HEADS}/{KV_HEADS} D{HEAD_DIM}", "bf16", "GB/s", nbytes)
            if op == "IncreFlashAttention" and skv in self.shapes["config_lengths"]:
                self._configs(case, acl, torch_fn, op)
            else:
                self._run(case, acl, torch_fn, op)

    def paged_attention(self) -> None:
        """Paged decode (``--only PagedAttention``): IncreFlashAttentionV4 over a (blocks, KV_N, 128, D) pool and
        FusedInferAttentionScoreV4 over an NZ pool (blocks, KV_N, D/16, 128, 16), shuffled block tables, beside
        dense IncreFlashAttention on the same length and SDPA on the dense cache; rocm times each
        ``ACL_PAGED_DECODE`` choice of :data:`PAGED_MODES`."""
        if not self.wanted("PagedAttention"):
            return
        runners = getattr(self.backend, "runners", None)
        runner = runners.get("attention") if isinstance(runners, dict) else None
        modes: tuple[str | None, ...] = PAGED_MODES if hasattr(runner, "use_paged_mode") else (None,)
        for skv in self.shapes["paged_lengths"]:
            dense = Case("IncreFlashAttention decode (dense)", f"Skv{skv} N{HEADS}/{KV_HEADS} D{HEAD_DIM}", "bf16",
                         "GB/s", 2 * skv * KV_HEADS * HEAD_DIM * 2)  # fmt: skip
            self._run(dense, self._dense_bnsd(skv), self._torch_decode(skv), "IncreFlashAttention")
            for op, form in (("IncreFlashAttentionV4", "BnNBsD"), ("FusedInferAttentionScoreV4", "NZ")):
                for mode in modes:
                    if mode is not None:
                        runner.use_paged_mode(mode)  # type: ignore[union-attr]
                    try:
                        label = f"{op} paged {form}" + ("" if mode is None else f" {mode}")
                        case = Case(label, f"Skv{skv} N{HEADS}/{KV_HEADS} D{HEAD_DIM} block 128", "bf16", "GB/s",
                                    2 * skv * KV_HEADS * HEAD_DIM * 2)  # fmt: skip
                        self._run(case, self._paged(op, form, skv), self._torch_decode(skv), op)
                    finally:
                        if mode is not None:
                            runner.use_paged_mode(None)  # type: ignore[union-attr]

    def _torch_decode(self, skv: int, hidden: np.ndarray | None = None) -> Callable[[], Callable[[], object]]:
        """SDPA on a (1, KV_HEADS, skv, D) cache; ``hidden``: a CANN mask (True hides), given as SDPA's keep mask."""

        def torch_fn() -> Callable[[], object]:
            q = self.tensor((1, HEADS, 1, HEAD_DIM), D.ACL_BF16)
            k, v = (self.tensor((1, KV_HEADS, skv, HEAD_DIM), D.ACL_BF16) for _ in range(2))
            sdpa = self.torch.nn.functional.scaled_dot_product_attention
            if hidden is None:
                return lambda: sdpa(q, k, v, enable_gqa=True)
            keep = self.torch.from_numpy(~hidden).to(self.device)
            return lambda: sdpa(q, k, v, attn_mask=keep, enable_gqa=True)

        return torch_fn

    def _dense_bnsd(
        self, skv: int, layout: str = "BNSD", hidden: np.ndarray | None = None
    ) -> Callable[[], tuple[Callable[[], None], Any]]:
        """IncreFlashAttention over a dense ``layout`` cache of ``skv`` keys; ``hidden``: its attenMask."""
        shape = {"BNSD": (1, KV_HEADS, skv, HEAD_DIM), "BSND": (1, skv, KV_HEADS, HEAD_DIM)}[layout]

        def acl() -> tuple[Callable[[], None], Any]:
            q = self.array((1, HEADS, 1, HEAD_DIM) if layout == "BNSD" else (1, 1, HEADS, HEAD_DIM), D.ACL_BF16)
            k, v = (self.array(shape, D.ACL_BF16) for _ in range(2))
            lists = [aclnn.aclCreateTensorList([t.tensor()]) for t in (k, v)]
            args: dict[str, Any] = {"query": q, "key": lists[0], "value": lists[1], "numHeads": HEADS}
            args |= {"scaleValue": 1 / math.sqrt(HEAD_DIM), "inputLayout": layout, "numKeyValueHeads": KV_HEADS}
            if hidden is not None:
                args |= {"attenMask": to_device(hidden, self.backend)}
            launch, free = self.prepared("IncreFlashAttention", args)
            return launch, _also_free(free, k, v)

        return acl

    def _paged(self, op: str, form: str, skv: int) -> Callable[[], tuple[Callable[[], None], Any]]:
        block = 128

        def acl() -> tuple[Callable[[], None], Any]:
            blocks = -(-skv // block)
            pool: tuple[int, ...] = (blocks + 8, KV_HEADS, block, HEAD_DIM)
            if form == "NZ":
                pool = (blocks + 8, KV_HEADS, HEAD_DIM // 16, block, 16)
            q = self.array((1, HEADS, 1, HEAD_DIM), D.ACL_BF16)
            k, v = (self.array(pool, D.ACL_BF16) for _ in range(2))
            table = to_device(
                self.rng.permutation(blocks + 8)[:blocks].reshape(1, blocks).astype(np.int32), self.backend
            )
            lists = [aclnn.aclCreateTensorList([t.tensor()]) for t in (k, v)]
            args: dict[str, Any] = {"query": q, "key": lists[0], "value": lists[1], "numHeads": HEADS}
            args |= {"scaleValue": 1 / math.sqrt(HEAD_DIM), "inputLayout": "BNSD", "numKeyValueHeads": KV_HEADS}
            args |= {"blockSize": block}
            if op.startswith("IncreFlashAttention"):
                args |= {"blocktable": table, "actualSeqLengths": aclnn.aclCreateIntArray([skv]), "innerPrecise": 1}
            else:
                args |= {"blockTableOptional": table, "actualSeqLengthsKvOptional": aclnn.aclCreateIntArray([skv])}
                args |= {"preTokens": 2**31 - 1, "nextTokens": 2**31 - 1, "sparseMode": 0, "innerPrecise": 0}
                args |= {"antiquantMode": 0, "softmaxLseFlag": False, "keyAntiquantMode": 0, "valueAntiquantMode": 0}
                args |= {"queryQuantMode": 0}
            launch, free = self.prepared(op, args)
            return launch, _also_free(free, k, v)  # the table is one of the call's arrays

        return acl

    def gemms(self) -> None:
        """Matmul [M,K] x [K,N] in bf16 for decode's M, beside ``torch.matmul``; the weight read dominates.

        On a backend with the GEMV switch (rocm), each shape also runs with the weight stored [N, K] (a
        Linear layer's, used transposed) and [K, N] (the unlabelled row's layout, which ``auto`` decides
        for), each twice: the GEMV kernel forced on, and the vendor BLAS forced.
        """
        if not self.wanted("Matmul"):
            return
        runner = getattr(self.backend, "matmul", None)
        switch = runner is not None and hasattr(runner, "forced_gemv")
        for k, n in self.shapes["gemm_kn"]:
            for m in self.shapes["gemm_m"]:
                nbytes = 2 * (k * n + m * k + m * n)
                self._run(
                    Case("Matmul small-M", f"M{m} K{k} N{n}", "bf16", "GB/s", nbytes),
                    self._gemm(m, k, n, False),
                    self._torch_gemm(m, k, n, False),
                    "Matmul",
                )
                if not switch:
                    continue
                for linear, label in ((True, "weight[N,K]"), (False, "weight[K,N]")):
                    for path, mode in (("GEMV", "on"), ("BLAS", "off")):
                        runner.forced_gemv = mode  # type: ignore[union-attr]
                        try:
                            self._run(
                                Case(f"Matmul small-M {path}", f"M{m} K{k} N{n} {label}", "bf16", "GB/s", nbytes),
                                self._gemm(m, k, n, linear),
                                self._torch_gemm(m, k, n, linear),
                                "Matmul",
                            )
                        finally:
                            runner.forced_gemv = None  # type: ignore[union-attr]

    def _gemm(self, m: int, k: int, n: int, linear: bool) -> Callable[[], tuple[Callable[[], None], Any]]:
        def acl() -> tuple[Callable[[], None], Any]:
            a = self.array((m, k), D.ACL_BF16)
            if linear:  # the [N, K] weight seen as [K, N]: a transposed view
                values = self.rng.random((k, n), dtype=np.float32) * 2 - 1
                b = to_device(values, self.backend, dtype=D.ACL_BF16, layout="transposed")
            else:
                b = self.array((k, n), D.ACL_BF16)
            out = empty((m, n), D.ACL_BF16, self.backend)
            return self.prepared("Matmul", {"self": a, "mat2": b, "out": out, "cubeMathType": 0})

        return acl

    def _torch_gemm(self, m: int, k: int, n: int, linear: bool) -> Callable[[], Callable[[], object]]:
        def torch_fn() -> Callable[[], object]:
            a, o = self.tensor((m, k), D.ACL_BF16), self.tensor((m, n), D.ACL_BF16)
            b = self.tensor((n, k), D.ACL_BF16).t() if linear else self.tensor((k, n), D.ACL_BF16)
            return lambda: self.torch.matmul(a, b, out=o)

        return torch_fn

    def add_rms_norm(self) -> None:
        """AddRmsNorm of the residual (one launch on rocm) beside torch's add then ``rms_norm``."""
        if not self.wanted("AddRmsNorm"):
            return
        hidden = self.shapes["hidden"]
        for rows in self.shapes["rows"]:

            def acl(rows: int = rows) -> tuple[Callable[[], None], Any]:
                x1, x2 = self.array((rows, hidden), D.ACL_BF16), self.array((rows, hidden), D.ACL_BF16)
                args = {"x1": x1, "x2": x2, "gamma": self.array((hidden,), D.ACL_BF16), "epsilon": 1e-6}
                return self.prepared("AddRmsNorm", args)

            def torch_fn(rows: int = rows) -> Callable[[], object]:
                x1, x2 = self.tensor((rows, hidden), D.ACL_BF16), self.tensor((rows, hidden), D.ACL_BF16)
                w = self.tensor((hidden,), D.ACL_BF16)
                rms_norm = self.torch.nn.functional.rms_norm
                return lambda: rms_norm(x1 + x2, (hidden,), w, 1e-6)

            nbytes = 2 * (4 * rows * hidden + hidden)  # x1, x2 in; y and x1 + x2 out; gamma
            case = Case("AddRmsNorm", f"[{rows},{hidden}]", "bf16", "GB/s", nbytes)
            self._variants(case, acl, torch_fn, "AddRmsNorm", "ACL_ROWNORM_CONFIG")

    def rms_norm(self) -> None:
        """RmsNorm of q and k per head (Qwen3's q-norm / k-norm: [B, N, 128] rows, gamma [128]) beside torch's."""
        if not self.wanted("RmsNorm"):
            return
        for rows in self.shapes["rows"]:
            for heads in (HEADS, KV_HEADS):

                def acl(rows: int = rows, heads: int = heads) -> tuple[Callable[[], None], Any]:
                    args = {"x": self.array((rows, heads, HEAD_DIM), D.ACL_BF16), "epsilon": 1e-6}
                    return self.prepared("RmsNorm", {**args, "gamma": self.array((HEAD_DIM,), D.ACL_BF16)})

                def torch_fn(rows: int = rows, heads: int = heads) -> Callable[[], object]:
                    x, w = self.tensor((rows, heads, HEAD_DIM), D.ACL_BF16), self.tensor((HEAD_DIM,), D.ACL_BF16)
                    rms_norm = self.torch.nn.functional.rms_norm
                    return lambda: rms_norm(x, (HEAD_DIM,), w, 1e-6)

                nbytes = 2 * (2 * rows * heads * HEAD_DIM + HEAD_DIM)
                case = Case("RmsNorm q/k-norm", f"[{rows},{heads},{HEAD_DIM}]", "bf16", "GB/s", nbytes)
                if heads == HEADS:
                    self._variants(case, acl, torch_fn, "RmsNorm", "ACL_ROWNORM_CONFIG")
                else:  # k-norm: the environment's layout only (the variants' A/B is the q-norm rows')
                    self._run(case, acl, torch_fn, "RmsNorm")

    def swiglu(self) -> None:
        """SwiGlu of the fused gate/up projection ([B, 2I] -> [B, I]) beside torch's silu(gate) * up."""
        if not self.wanted("SwiGlu"):
            return
        inter = self.shapes["intermediate"]
        for rows in self.shapes["rows"]:

            def acl(rows: int = rows) -> tuple[Callable[[], None], Any]:
                return self.prepared("SwiGlu", {"x": self.array((rows, 2 * inter), D.ACL_BF16), "dim": -1})

            def torch_fn(rows: int = rows) -> Callable[[], object]:
                x = self.tensor((rows, 2 * inter), D.ACL_BF16)
                silu = self.torch.nn.functional.silu
                return lambda: silu(x[:, :inter]) * x[:, inter:]

            nbytes = 2 * 3 * rows * inter
            self._run(Case("SwiGlu", f"[{rows},{2 * inter}]", "bf16", "GB/s", nbytes), acl, torch_fn, "SwiGlu")

    def kv_scatter(self) -> None:
        """ScatterPaKvCache of one token's k and v per sequence (8 heads of 128, bf16) into paged caches of 128-slot
        blocks (64 at full size), beside torch's index_copy_ of both into the flattened caches."""
        if not self.wanted("ScatterPaKvCache"):
            return
        blocks, size = self.shapes["kv_blocks"], 128
        for rows in self.shapes["rows"]:
            slots = np.arange(rows, dtype=np.int64) * 37 + 5

            def acl(rows: int = rows, slots: np.ndarray = slots) -> tuple[Callable[[], None], Any]:
                kv = [self.array((rows, KV_HEADS, HEAD_DIM), D.ACL_BF16) for _ in range(2)]
                caches = [self.array((blocks, size, KV_HEADS, HEAD_DIM), D.ACL_BF16) for _ in range(2)]
                args = {"key": kv[0], "value": kv[1], "keyCacheRef": caches[0], "valueCacheRef": caches[1]}
                return self.prepared("ScatterPaKvCache", {**args, "slotMapping": to_device(slots, self.backend)})

            def torch_fn(rows: int = rows, slots: np.ndarray = slots) -> Callable[[], object]:
                k, v = (self.tensor((rows, KV_HEADS, HEAD_DIM), D.ACL_BF16) for _ in range(2))
                kc, vc = (self.tensor((blocks * size, KV_HEADS, HEAD_DIM), D.ACL_BF16) for _ in range(2))
                index = self.torch.as_tensor(slots, device=self.device)
                return lambda: (kc.index_copy_(0, index, k), vc.index_copy_(0, index, v))

            nbytes = 2 * 2 * rows * KV_HEADS * HEAD_DIM * 2  # k and v read and written
            case = Case("ScatterPaKvCache", f"[{rows},{KV_HEADS},{HEAD_DIM}]", "bf16", "GB/s", nbytes)
            self._variants(case, acl, torch_fn, "ScatterPaKvCache", "ACL_KV_SCATTER_CONFIG")

    def rope(self) -> None:
        """ApplyRotaryPosEmb of q and k in place (BSND, one token) beside torch's rotate-half on both."""
        if not self.wanted("ApplyRotaryPosEmb"):
            return
        for rows in self.shapes["rows"]:

            def acl(rows: int = rows) -> tuple[Callable[[], None], Any]:
                q = self.array((rows, 1, HEADS, HEAD_DIM), D.ACL_BF16)
                k = self.array((rows, 1, KV_HEADS, HEAD_DIM), D.ACL_BF16)
                cos, sin = (self.array((rows, 1, 1, HEAD_DIM), D.ACL_BF16) for _ in range(2))
                return self.prepared(
                    "ApplyRotaryPosEmb", {"queryRef": q, "keyRef": k, "cos": cos, "sin": sin, "layout": 1}
                )

            def torch_fn(rows: int = rows) -> Callable[[], object]:
                q = self.tensor((rows, 1, HEADS, HEAD_DIM), D.ACL_BF16)
                k = self.tensor((rows, 1, KV_HEADS, HEAD_DIM), D.ACL_BF16)
                cos, sin = (self.tensor((rows, 1, 1, HEAD_DIM), D.ACL_BF16) for _ in range(2))
                half = HEAD_DIM // 2

                def rotate(x: Any) -> Any:
                    return self.torch.cat((-x[..., half:], x[..., :half]), dim=-1)

                def call() -> None:
                    q.copy_(q * cos + rotate(q) * sin)
                    k.copy_(k * cos + rotate(k) * sin)

                return call

            nbytes = 2 * (2 * rows * (HEADS + KV_HEADS) * HEAD_DIM + 2 * rows * HEAD_DIM)
            case = Case("ApplyRotaryPosEmb q+k", f"B{rows} N{HEADS}/{KV_HEADS} D{HEAD_DIM}", "bf16", "GB/s", nbytes)
            self._variants(case, acl, torch_fn, "ApplyRotaryPosEmb", "ACL_ROPE_CONFIG")

    def run_decode(self) -> dict[str, Any]:
        """Every decode case; rows gain ``acl_us``, ``torch_us`` and the fraction of HBM each side reaches."""
        import acl_core

        acl_core.use_backend(self.backend.name)
        try:
            self.argmax()
            self.attention()
            self.short_decode()
            self.split_sweep()
            self.paged_attention()
            self.gemms()
            self.add_rms_norm()
            self.rms_norm()
            self.rope()
            self.swiglu()
            self.kv_scatter()
        finally:
            self.rt.destroy_stream(self.stream)
            acl_core.use_backend(None)
        hbm = hbm_gbps(self.caps.device_name)
        rows = []
        for c in self.cases:
            row = c.to_json()
            row["acl_us"] = c.acl_ms * 1e3 if c.acl_ms else None
            row["torch_us"] = c.torch_ms * 1e3 if c.torch_ms else None
            if hbm:
                for side in ("acl", "torch"):
                    gbps = row["metric"][side]
                    row[f"{side}_fraction_of_hbm"] = gbps / hbm if gbps else None
            rows.append(row)
        return {"hbm_GBps": hbm, "cases": rows}


def _also_free(free: Callable[[], None], *arrays: DeviceArray) -> Callable[[], None]:
    """``free`` followed by freeing ``arrays`` (tensors passed inside tensor lists)."""

    def cleanup() -> None:
        free()
        for a in arrays:
            a.free()

    return cleanup


def run(
    backend: Backend,
    size: str = "small",
    progress: Callable[[str], None] = print,
    only: set[str] | None = None,
    min_time: float | None = None,
    rounds: int | None = None,
) -> dict[str, Any]:
    """Run the decode suite of ``size`` on ``backend`` beside PyTorch; returns the JSON body (no header).

    ``min_time`` / ``rounds`` replace the size's timing budget (seconds a round, rounds a side)."""
    shapes = FULL_SHAPES if size == "full" else SMALL_SHAPES
    suite = DecodeSuite(backend, SIZES[size].timed(min_time, rounds), shapes, progress, only)
    body = suite.run_decode()
    torch = suite.torch
    name = torch.cuda.get_device_name() if suite.device.type == "cuda" else "cpu"
    body["torch"] = {"version": torch.__version__, "device": f"{suite.device.type} ({name})"}
    body["switches"] = {k: os.environ[k] for k in SWITCHES if k in os.environ}  # which kernel variants ran
    return body
