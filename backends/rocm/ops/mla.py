"""The MLA family on the GPU: MlaPrologV2WeightNz (and V3, a version of it), composed from launches that exist.

No kernel of its own: the three FRACTAL_NZ weights are gathered into dense ND temporaries by the layout
family's NZ copy; the four matmuls (``x @ Wdq``, ``x @ Wdkvkr``, ``cqn @ Wuqqr`` and the per-head
``q^C @ Wuk`` as one batched GEMM over the heads, q^C a strided view of the up-projection) run through the
matmul family (cuBLASLt / hipBLASLt: float32 accumulation, bf16 stores, as CANN's kernel stores them);
KvRmsNormRopeCache's row kernel normalises c^Q (its no-cache mode, scaled by qcQrScale) and writes the kv
cache rows (RmsNorm scaled by kcScale) and the rotated k^R rows, FRACTAL_NZ blocks for PA_NZ; the attention
family's rotary kernel in mode 3 (interleave-half, cos / sin broadcast over the heads) gives queryRopeOut.
cacheIndex is range-checked first (movement's Check) and the cache-writing launch reads the flag, so a bad
slot writes nothing and is reported (161002) at synchronisation. Temporaries are stream-ordered and
nothing is read back to the host, so a call can be captured.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.spec.ops import get_spec
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.driver import handle
from acl_rocm.kernels.kv_cache import BLOCK_THREADS, KV_MODES, NO_CACHE, NormRopeCache, NormRopeMeta, values_of
from acl_rocm.launch import KernelArgs, LaunchConfig, launch_tensor
from acl_rocm.ops.program import FLAG, Program, Step, run_program
from acl_rocm.ops.sort import address, refuse

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = ("MlaPrologV2WeightNz",)
"""The aclnn operators this module runs (MlaPrologV3WeightNz is a version of it)."""

FAMILY = "mla"
ND = Format.ACL_FORMAT_ND
BF16 = D.ACL_BF16


def _view(t: AclTensor, dims: Sequence[int], strides: Sequence[int], offset: int | None = None) -> AclTensor:
    """Another view of ``t``'s storage."""
    return AclTensor(
        tuple(dims), t.dtype, tuple(strides), t.offset if offset is None else offset, t.format, t.storage_dims, t.data
    )


def _merged_stride(dims: Sequence[int], strides: Sequence[int]) -> int | None:
    """The stride of ``dims`` walked as one flat dim (row-major), or None when their strides do not merge."""
    kept = [(int(n), int(s)) for n, s in zip(dims, strides, strict=True) if n != 1]
    for (_, outer), (n, inner) in itertools.pairwise(kept):
        if outer != inner * n:
            return None
    return kept[-1][1] if kept else 0


def _s4(t: AclTensor) -> tuple[int, int, int, int]:
    a, b, c, d = (int(s) for s in t.strides)
    return a, b, c, d


def _double_bits(value: float) -> int:
    (bits,) = struct.unpack("<q", struct.pack("<d", float(value)))
    return int(bits)


def _ptr(t: AclTensor | None) -> ctypes.c_void_p:
    return KernelArgs.pointer(0 if t is None else address(t))


class MlaRunner:
    """The MLA family on one backend, composed from the matmul, layout, kv_cache and attention runners."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend

    def kernels(self) -> dict[str, Kernel]:
        """MlaPrologV2WeightNz where the BLAS its matmuls need is present."""
        if self.backend.matmul.unavailable() is not None:
            return {}
        return {"MlaPrologV2WeightNz": self._prolog}

    # ------------------------------------------------------------------ helpers
    def _temp(self, dims: Sequence[int], dtype: D, stream: int, temps: list[int]) -> AclTensor:
        """A contiguous stream-ordered temporary of ``dims``."""
        dims = tuple(int(d) for d in dims)
        item = dtype.info.storage_bits // 8
        where = self.backend.provider.malloc_async(max(math.prod(dims), 1) * item, stream)
        temps.append(where)
        return AclTensor(dims, dtype, contiguous_strides(dims), 0, ND, dims, where)

    def _matmul(self, launch: Launch, a: AclTensor, b: AclTensor, out: AclTensor) -> None:
        """``out = a @ b`` through the matmul family (bf16 operands, float32 accumulation)."""
        plan = {"compute": BF16, "precision": None}
        call = Launch(get_spec("Matmul"), {"self": a, "mat2": b, "out": out}, plan, 0, 0, launch.stream, {})
        self.backend.matmul.run(call)

    def _step(self, prog: Program, kernel: Any, config: LaunchConfig, values: Sequence[Any]) -> None:
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        prog.steps.append(Step(function, config, tuple(values)))

    def _norm_rope(self, prog: Program, meta: NormRopeMeta, rows: int, pointers: Sequence[Any]) -> None:
        """One KvRmsNormRopeCache row kernel over ``rows`` token rows."""
        if rows > self.backend.properties.max_grid_x:
            raise refuse("MlaPrologV2WeightNz", f"{rows} token rows (the grid's limit is the x dimension's)")
        values = [KernelArgs.index_array(values_of(meta), "long long"), *pointers, FLAG]
        self._step(prog, NormRopeCache(BF16), LaunchConfig((rows, 1, 1), (BLOCK_THREADS, 1, 1)), values)

    # ------------------------------------------------------------------ MlaPrologV2WeightNz
    def _prolog(self, launch: Launch) -> None:
        names = ("tokenX", "weightDq", "weightUqQr", "weightUk", "weightDkvKr", "rmsnormGammaCq", "rmsnormGammaCkv")
        x, wdq, wuqqr, wuk, wdkvkr, gq, gkv = (launch_tensor(launch, n) for n in names)
        sin, cos, index = (launch_tensor(launch, n) for n in ("ropeSin", "ropeCos", "cacheIndex"))
        kvc, krc = launch_tensor(launch, "kvCacheRef"), launch_tensor(launch, "krCacheRef")
        query, query_rope = launch_tensor(launch, "queryOut"), launch_tensor(launch, "queryRopeOut")
        args = launch.args
        alpha_q = 1.0 if args.get("qcQrScale") is None else float(args["qcQrScale"])
        alpha_kv = 1.0 if args.get("kcScale") is None else float(args["kcScale"])
        lead = tuple(int(v) for v in x.view_dims[:-1])
        tokens = math.prod(lead)
        heads, d, hckv = (int(v) for v in wuk.view_dims)
        hcq = int(wdq.view_dims[1])
        dr = int(wdkvkr.view_dims[1]) - hckv
        blocks, block_size = int(kvc.view_dims[0]), int(kvc.view_dims[1])
        slots = blocks * block_size
        if tokens == 0:
            return
        stream = handle(launch.stream)
        provider = self.backend.provider
        temps: list[int] = []
        try:
            # the FRACTAL_NZ weights as dense ND matrices
            decode = Program()
            dense = []
            for w in (wdq, wuqqr, wdkvkr):
                nd = self._temp(w.view_dims, BF16, stream, temps)
                self.backend.layout.record_from_nz(decode, w, nd, nd.data)
                dense.append(nd)
            run_program(self.backend, decode, stream)
            dq, uqqr, dkvkr = dense
            x_rows = _merged_stride(lead, x.strides[:-1])
            x2 = x if x_rows is None else _view(x, (tokens, int(x.view_dims[-1])), (x_rows, x.strides[-1]))
            cq = self._temp((tokens, hcq), BF16, stream, temps)
            ckvkr = self._temp((tokens, hckv + dr), BF16, stream, temps)
            cqn = self._temp((tokens, hcq), BF16, stream, temps)
            if x2.rank == 3:  # leading dims that do not merge: the matmuls keep them
                cq3 = _view(cq, (*lead, hcq), contiguous_strides((*lead, hcq)))
                ck3 = _view(ckvkr, (*lead, hckv + dr), contiguous_strides((*lead, hckv + dr)))
                self._matmul(launch, x2, dq, cq3)
                self._matmul(launch, x2, dkvkr, ck3)
            else:
                self._matmul(launch, x2, dq, cq)
                self._matmul(launch, x2, dkvkr, ckvkr)

            # slot check, RmsNorm of c^Q, and the kv / k^R cache rows
            prog = Program(report="MlaPrologV2WeightNz: cacheIndex holds a slot outside the caches (and not -1)")
            if slots:
                self.backend.kv_cache._check(prog, index, -1, slots)
            eps_q = _double_bits(float(args["rmsnormEpsilonCq"]))
            norm_q = NormRopeMeta(
                seq=1,
                dv=hcq,
                dk=0,
                mode=NO_CACHE,
                output=1,
                epsilon_bits=eps_q,
                kv=(hcq, 0, 1),
                gamma=int(gq.strides[0]),
                v_out=(hcq, 0, 1),
                scale_bits=_double_bits(alpha_q),
            )
            none = KernelArgs.pointer(0)
            self._norm_rope(prog, norm_q, tokens, [_ptr(cq), _ptr(gq), none, none, none, none, none, none, _ptr(cqn)])
            if slots:
                seq = lead[-1]
                idx = (int(index.strides[0]), int(index.strides[1])) if index.rank == 2 else (0, int(index.strides[0]))
                cs = (0, *(int(v) for v in cos.strides)) if cos.rank == 2 else tuple(int(v) for v in cos.strides)
                sn = (0, *(int(v) for v in sin.strides)) if sin.rank == 2 else tuple(int(v) for v in sin.strides)
                width = hckv + dr
                norm_kv = NormRopeMeta(
                    seq=seq,
                    dv=hckv,
                    dk=dr,
                    mode=KV_MODES["paged"],
                    block_size=block_size,
                    epsilon_bits=_double_bits(float(args["rmsnormEpsilonCkv"])),
                    kv=(seq * width, width, 1),
                    index=idx,
                    gamma=int(gkv.strides[0]),
                    cos=(cs[0], cs[1], cs[2]),
                    sin=(sn[0], sn[1], sn[2]),
                    k_cache=_s4(krc),
                    v_cache=_s4(kvc),
                    scale_bits=_double_bits(alpha_kv),
                    nz=int(bool(launch.plan["mla_nz_cache"])),
                )
                pointers = [_ptr(ckvkr), _ptr(gkv), _ptr(cos), _ptr(sin), _ptr(index), _ptr(krc), _ptr(kvc), none, none]
                self._norm_rope(prog, norm_kv, tokens, pointers)
            run_program(self.backend, prog, stream)

            # q^C | q^R for every head, then q^N = q^C @ Wuk per head (one GEMM batched over the heads)
            per = d + dr
            qcqr = self._temp((tokens, heads * per), BF16, stream, temps)
            self._matmul(launch, cqn, uqqr, qcqr)
            qc = _view(qcqr, (heads, tokens, d), (per, heads * per, 1))
            q_rows = _merged_stride(lead, query.strides[:-2])
            sn_, sk_ = int(query.strides[-2]), int(query.strides[-1])
            if q_rows is not None:
                self._matmul(launch, qc, wuk, _view(query, (heads, tokens, hckv), (sn_, q_rows, sk_)))
            else:  # leading dims that do not merge: a contiguous product, then a copy into queryOut's view
                product = self._temp((heads, tokens, hckv), BF16, stream, temps)
                self._matmul(launch, qc, wuk, product)
                rows = tuple(c * hckv for c in contiguous_strides(lead))
                self.backend.elementwise.convert(
                    _view(product, (*lead, heads, hckv), (*rows, tokens * hckv, 1)), query, stream
                )

            # q^R: the rotary kernel's mode 3 over each head's rope columns, cos / sin shared by the heads
            qr = _view(qcqr, (*lead, heads, dr), (*(s * heads * per for s in contiguous_strides(lead)), per, 1), d)
            cos4 = _view(cos, (*lead, 1, dr), (*cos.strides[:-1], 0, cos.strides[-1]))
            sin4 = _view(sin, (*lead, 1, dr), (*sin.strides[:-1], 0, sin.strides[-1]))
            for step in self.backend.attention._rope(qr, cos4, sin4, query_rope, 3):
                self.backend.elementwise.launch_prepared(step, stream)
        finally:
            for where in temps:
                provider.free_async(where, stream)


RUNNER = MlaRunner
