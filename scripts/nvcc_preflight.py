"""Compile every kernel source the rocm backend generates for the conformance samples, with nvcc, on the CPU.

A GPU run is scarce; a kernel that does not compile under NVRTC fails every case of its operator there.
This runs each claimed operator's samples (every layout) on a backend over the fake provider, which
records the sources the backend asks it to compile without running anything, and compiles each distinct
source with ``nvcc -ptx`` for sm_90 with the backend's own options. Needs nvcc on the PATH.

Usage: python scripts/nvcc_preflight.py [OP_PATTERN ...]   (fnmatch patterns; default: every claimed op)
The switches in :data:`SWITCHES` reach the backend from the environment (``ACL_GEMV=1``: small-M products compile
the GEMV kernels; ``ACL_GEMV_CONFIG=deep``: in that shape policy; ACL_ROWNORM_CONFIG, ACL_ARGMAX_CONFIG and
ACL_ROPE_CONFIG: row-norm layout, long-row arg path, rotary kernel; ACL_KV_SCATTER_CONFIG=vec: ScatterPaKvCache's
vector copy; ACL_GMM_CONFIG: the grouped GEMM's block shape; ACL_GMM_KERNEL=simt|mma: its kernel (INT8 included),
=wgmma: the fp16 / bf16 groups on the warpgroup-MMA kernel (sm_90a, a cubin), ACL_GMM_WGMMA_CONFIG its block shape,
=blaslt: the library grouped GEMM's arrays kernel (the fake provider offers the grouped GEMM, computing nothing);
ACL_DECODE_CONFIG=fused: the one-launch decode kernels, two: the split path at every length, block: the short-cache
kernel (,bpdl: its programmatic wait), two,pipe: the pipelined split kernel (,pdyn / ,pskip / ,pmma / ,pcomb / ,ppdl:
its opt-in items);
ACL_PAGED_DECODE=gather: paged decode
through the gather kernel, direct: the decode kernels read the block table a key row at a time (default tile: a
table entry a warp's tile); ACL_QMM_MX_DECODE and
ACL_QMM_EPILOGUE: the quantised GEMMs' MX decode and epilogue; ACL_PDL=1|regs: the GEMV kernels' sm_90 wait for
their predecessor, the fake provider offering programmatic launch; ACL_RANDOM_NORMAL: the packed normal fill's
transform (sincos, float32, float32p); ACL_ADAMW_CONFIG=scalar: the one-element AdamW step;
ACL_FOREACH_CONFIG=scan|grid2d: how a Foreach block finds its slot; ACL_MC2_ROUTE=block|grid: MoeDistributeDispatch's
routing kernels; ACL_MC2_ROWS=row: its block-a-row expandX copy; ACL_TAKE_CHECK=fused|vec: Take's in-gather
index check or its 16-byte Check launch; ACL_LI_PATH=tiled|sort: LightningIndexer's key-tile scores before the row
sorter, or the first path;
ACL_MISH_CONFIG=poly: Mish's float32 polynomial body; ACL_CE_ROWS=vec: CrossEntropyLoss's vector row kernel;
ACL_REPEAT_ROWS=rows|search|blocks|gather|gather8: RepeatInterleave(WithDim)'s copy (source-row copy, binary search,
the chunked scan, its row index with the output-major copy); ACL_SFA_PATH=gemm:
SparseFlashAttention's GEMM path's kernels (default: its block kernel); ACL_FLATQUANT_KERNEL=slice|simt|dmma|dmma16:
FlatQuant's kernel (its [2, 64, 64] call below reaches the token tiles); ACL_FLASH_CONFIG with
ACL_ATTENTION_PATH=flash (read from the process environment): the flash kernel's block shapes (``wg2k128``,
``wg2k128wop``: the wgmma kernels, warp-specialised too, compiled for sm_90a to a cubin); ACL_RANDOM_LAYOUT is read
from the process environment by every backend;
ACL_CMO_CONFIG: aclrtCmoAsync's prefetch, whose kernels of every method compile under the pattern ``aclrtCmoAsync`` or
with no pattern); ACL_CONV_GRAD_PATH=cudnn: ConvolutionBackward's cuDNN path (no kernel of its own: where cuDNN
loads, only gradBias's row sum is compiled; here, without it, the GEMM path's kernels as before);
ACL_ATTENTION_GRAD_PATH=cudnn: FlashAttentionScoreGrad's log-sum-exp kernel (cuDNN itself does not load here, so the
calls take the composed path; ACL_ATTENTION_GRAD_CUDNN_PLAN / _SQUARE pick cuDNN's plan / mask and add no source);
ACL_ATTENTION_GRAD_PATH=flash: its fused flash backward kernels (pre-pass, dK / dV, dQ) for the samples they take
(fp16 / bf16, D a multiple of 16), the composed path's for the rest, ACL_FLASH_GRAD_CONFIG their block shapes;
ACL_SELECT_LOADS=vec: the select family's compaction passes with whole tiles read by vector loads;
the ops of :data:`DECODE_CALLS` also run at decode's shapes (the split arg path, the
short norm rows, the down projection's GEMV).
``ACL_PREFLIGHT_ARCHS`` (default ``sm_90``, e.g. ``sm_80,sm_90``): the architectures each source is compiled for.
Exit status 1 when a source fails to compile (its log is printed), 2 without nvcc.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acl_core import eager
from acl_core.errors import AclCoreError
from acl_core.spec.ops import all_specs
from acl_rocm.backend import RocmBackend
from tests.rocm.fake_provider import FakeProvider


class Recording(FakeProvider):
    """The fake provider, keeping every source the backend compiles (name -> (source, options))."""

    def compile(self, source: str, name: str, options: tuple[str, ...], arch: str) -> bytes:
        SOURCES[name] = (source, tuple(options))
        if arch.endswith("a"):
            SPECIFIC[name] = arch
        return super().compile(source, name, options, arch)

    def collective_library(self) -> tuple[Any, str]:
        """A one-rank host NCCL, so that the MC2 ops (claimed only with a collective engine) run too."""
        from tests.rocm.test_mc2_cpu import HostNccl

        return HostNccl([]), ""


SOURCES: dict[str, tuple[str, tuple[str, ...]]] = {}
SPECIFIC: dict[str, str] = {}
"""Kernels the backend compiles for an arch-specific target (name -> e.g. sm_90a: the wgmma flash kernel); they
are compiled for that target alone, to a cubin (ptxas checks the wgmma instructions, which ``-ptx`` would not)."""
ARCHS: tuple[str, ...] = tuple(
    a.strip() for a in os.environ.get("ACL_PREFLIGHT_ARCHS", "sm_90").split(",") if a.strip()
)
SWITCHES = (
    "ACL_CONV_GRAD_PATH",
    "ACL_GEMV",
    "ACL_GEMV_CONFIG",
    "ACL_ROWNORM_CONFIG",
    "ACL_ARGMAX_CONFIG",
    "ACL_ROPE_CONFIG",
    "ACL_KV_SCATTER_CONFIG",
    "ACL_QKV_ROPE_CONFIG",
    "ACL_GMM_CONFIG",
    "ACL_GMM_KERNEL",
    "ACL_GMM_WGMMA_CONFIG",
    "ACL_QMM_MX_DECODE",
    "ACL_QMM_EPILOGUE",
    "ACL_PDL",
    "ACL_DECODE_CONFIG",
    "ACL_LI_PATH",
    "ACL_PAGED_DECODE",
    "ACL_RANDOM_NORMAL",
    "ACL_CMO_CONFIG",
    "ACL_ADAMW_CONFIG",
    "ACL_FOREACH_CONFIG",
    "ACL_MC2_ROUTE",
    "ACL_MC2_ROWS",
    "ACL_TAKE_CHECK",
    "ACL_MISH_CONFIG",
    "ACL_FLATQUANT_KERNEL",
    "ACL_FLASH_CONFIG",
    "ACL_SFA_PATH",
    "ACL_CE_ROWS",
    "ACL_REPEAT_ROWS",
    "ACL_ATTENTION_GRAD_PATH",
    "ACL_FLASH_GRAD_CONFIG",
    "ACL_ATTENTION_GRAD_CUDNN_PLAN",
    "ACL_ATTENTION_GRAD_CUDNN_SQUARE",
    "ACL_SELECT_LOADS",
)


def _decode_calls() -> dict[str, list[dict[str, Any]]]:
    """Decode-shaped calls (op -> args) beyond the samples: long arg rows, q/k-norm and residual norm rows."""
    import ml_dtypes

    from acl_core.spec.ops.attention import compressed_mask

    rng = np.random.default_rng(1)
    bf16 = ml_dtypes.bfloat16

    def x(*shape: int, dtype: Any = bf16) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32).astype(dtype)

    arg = [{"self": x(r, 9000, dtype=d), "dim": -1, "keepdim": False} for r in (1, 8) for d in (bf16, np.float32)]
    reps = rng.integers(1, 4, 64)
    return {
        "ArgMax": arg,
        "ArgMin": arg[:1],
        # decode's down projection [1024 x 3072]: the nk GEMV at M 1 and 8
        "Mm": [{"self": x(m, 3072), "mat2": x(3072, 1024), "cubeMathType": 0} for m in (1, 8)],
        "RmsNorm": [{"x": x(1, n, 128), "gamma": x(128), "epsilon": 1e-6} for n in (16, 8)],
        "AddRmsNorm": [{"x1": x(r, 1024), "x2": x(r, 1024), "gamma": x(1024), "epsilon": 1e-6} for r in (1, 8)],
        "ApplyRotaryPosEmb": [
            {"queryRef": x(b, 1, 16, 128), "keyRef": x(b, 1, 8, 128), "cos": x(b, 1, 1, 128), "sin": x(b, 1, 1, 128)}
            | {"layout": 1}
            for b in (1, 8)
        ],
        # decode attention over a 512-key cache (past the short-cache kernel's threshold): the split kernels at
        # head dims 64 / 128 / 256 (ACL_DECODE_CONFIG=two,pipe: the pipelined split kernel's instances)
        "IncreFlashAttention": [
            {"query": x(1, 1, 16, d), "key": [x(1, 512, 8, d)], "value": [x(1, 512, 8, d)], "numHeads": 16}
            | {"scaleValue": 0.125, "inputLayout": "BSND", "numKeyValueHeads": 8}
            for d in (64, 128, 256)
        ],
        # FlatQuant at the bench's slice shape: the token-tile kernels (ACL_FLATQUANT_KERNEL picks which)
        "FlatQuant": [
            {"x": x(2, 64, 64, dtype=d), "kroneckerP1": x(64, 64, dtype=d), "kroneckerP2": x(64, 64, dtype=d)}
            | {"clipRatio": 1.0}
            for d in (np.float16, bf16)
        ],
        # prefill attention at the flash kernel's head dims (the samples' are smaller): under ACL_ATTENTION_PATH=flash
        # the flash kernel's instances, ACL_FLASH_CONFIG=wg2k128 the wgmma kernel's (causal: a compressed mask)
        "FlashAttentionScore": [
            {"query": x(1, 2, 80, d, dtype=t), "key": x(1, 1, 80, d, dtype=t), "value": x(1, 1, 80, d, dtype=t)}
            | {"scaleValue": 0.125, "keepProb": 1.0, "preTokens": 2147483647, "nextTokens": 2147483647}
            | {"headNum": 2, "inputLayout": "BNSD", "innerPrecise": 0, "sparseMode": 3}
            | {"attenMaskOptional": compressed_mask()}
            for d in (64, 128)
            for t in (bf16, np.float16)
        ],
        # rows the vector kernels take (ACL_CE_ROWS=vec): bf16 / fp16 / fp32 logits, weighted and smoothed or not
        "CrossEntropyLoss": [
            {"input": x(2, 4104, dtype=d), "target": np.array([1, 7], np.int64), "ignoreIndex": -100}
            | {"weightOptional": x(4104, dtype=np.float32) if eps else None, "reductionOptional": "mean"}
            | {"labelSmoothing": eps, "lseSquareScaleForZloss": 0.0, "returnZloss": False}
            for d in (bf16, np.float16, np.float32)
            for eps in (0.0, 0.1)
        ],
        # the bench's repeat rows (ACL_REPEAT_ROWS=rows: 16-byte words, 32 lanes a slice; one item a slice)
        "RepeatInterleaveWithDim": [
            {"self": x(64, 2048), "repeats": reps, "dim": 0, "outputSize": int(reps.sum())},
            {"self": x(64, 3), "repeats": reps, "dim": 0, "outputSize": int(reps.sum())},
        ],
        "ScatterPaKvCache": [
            {"key": x(b, 8, 128), "value": x(b, 8, 128), "slotMapping": np.arange(b, dtype=np.int32) * 3}
            | {"keyCacheRef": x(4, 16, 8, 128), "valueCacheRef": x(4, 16, 8, 128)}
            for b in (1, 8)
        ],
    }


DECODE_CALLS = _decode_calls()


def collect(patterns: list[str]) -> list[str]:
    """Run the samples of the claimed ops matching ``patterns``; the ops whose calls raised something odd."""
    switches = {k: os.environ[k] for k in SWITCHES if k in os.environ}  # e.g. ACL_GEMV=1: the GEMV kernels
    backend = RocmBackend(Recording(blas=True, grouped_blas=True), {"ACL_KERNEL_CACHE": tempfile.mkdtemp(), **switches})
    backend.runtime.ensure_device(0)
    claimed = set(backend.capabilities().ops)
    odd: list[str] = []
    for name, spec in sorted(all_specs().items()):
        if name not in claimed or spec.samples is None:
            continue
        if patterns and not any(fnmatch.fnmatch(name, p) for p in patterns):
            continue
        calls = [(s.note, s.args) for s in spec.samples(np.random.default_rng(0))]
        calls += [("decode shape", args) for args in DECODE_CALLS.get(name, [])]
        for note, args in calls:
            for layout in eager.LAYOUTS:
                try:
                    eager.run(name, backend, layout=layout, op_args=args)
                except AclCoreError:
                    pass  # refusals and device checks: the sources were still generated
                except Exception as exc:
                    odd.append(f"{name} [{note}] {layout}: {type(exc).__name__}: {exc}")
    if not patterns or any(fnmatch.fnmatch(PREFETCH_NAME, p) for p in patterns):
        odd += _prefetch_kernels(backend)
    grad = "FlashAttentionScoreGrad"
    if switches.get("ACL_ATTENTION_GRAD_PATH") == "cudnn" and (
        not patterns or any(fnmatch.fnmatch(grad, p) for p in patterns)
    ):
        odd += _grad_lse_kernel(backend)
    return odd


def _grad_lse_kernel(backend: RocmBackend) -> list[str]:
    """Enqueue the cuDNN backward's log-sum-exp launch, so that its elementwise kernel is compiled."""
    from acl_core.dtypes import DataType
    from acl_core.formats import Format
    from acl_core.tensor import AclTensor, contiguous_strides

    rt = backend.runtime
    dev = rt.malloc(1 << 12)
    shape = (1, 2, 8, 8)
    stats = AclTensor(shape, DataType.ACL_FLOAT, contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, dev)
    try:
        backend.attention_grad.cudnn.lse(stats, stats, dev + 2048, 0)  # type: ignore[attr-defined]
    except Exception as exc:
        return [f"FlashAttentionScoreGrad log-sum-exp: {type(exc).__name__}: {exc}"]
    finally:
        rt.free(dev)
    return []


PREFETCH_NAME = "aclrtCmoAsync"
"""The pattern that selects aclrtCmoAsync's prefetch kernels (every ``ACL_CMO_CONFIG`` method)."""


def _prefetch_kernels(backend: RocmBackend) -> list[str]:
    """Enqueue a prefetch under each method, so that each prefetch kernel is compiled."""
    from acl_rocm.kernels.prefetch import METHODS

    rt = backend.runtime
    dev = rt.malloc(1 << 16)
    odd = []
    for method in METHODS:
        backend.prefetch.use_config(method)
        try:
            rt.cmo_async(dev + 3, 60_000, 0, None)
        except Exception as exc:
            odd.append(f"{PREFETCH_NAME} {method}: {type(exc).__name__}: {exc}")
    backend.prefetch.use_config(None)
    rt.free(dev)
    return odd


def compile_one(item: tuple[str, tuple[str, tuple[str, ...]]], folder: Path) -> str | None:
    """nvcc -ptx of one source; its log when it fails or warns."""
    name, (source, options) = item
    path = folder / f"{name}.cu"
    path.write_text(source)
    flags = [o for o in options if o.startswith(("-D", "-std"))]
    specific = SPECIFIC.get(name)
    for arch in (specific,) if specific else ARCHS:
        kind = "-cubin" if specific else "-ptx"
        ptx = path.with_suffix(f".{arch}.{kind[1:]}")
        done = subprocess.run(
            ["nvcc", kind, f"-arch={arch}", *flags, str(path), "-o", str(ptx)], capture_output=True, text=True
        )
        if done.returncode != 0:
            return f"=== {name} {arch} (nvcc exit {done.returncode})\n{done.stderr[-3000:]}"
    return None


def main(argv: list[str]) -> int:
    """Collect, compile, report."""
    if shutil.which("nvcc") is None:
        print("nvcc is not on the PATH")
        return 2
    odd = collect(argv)
    for line in odd[:20]:
        print("call failed:", line)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=2) as pool:
        logs = [log for log in pool.map(lambda item: compile_one(item, Path(tmp)), sorted(SOURCES.items())) if log]
    for log in logs:
        print(log)
    archs = ", ".join(ARCHS)
    for target in sorted(set(SPECIFIC.values())):
        archs += f" ({sum(t == target for t in SPECIFIC.values())} for {target} alone)"
    print(f"{len(SOURCES)} kernel sources compiled with nvcc for {archs}: {len(logs)} failed; {len(odd)} calls raised")
    return 1 if logs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
