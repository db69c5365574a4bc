"""QkvRmsNormRopeCache on the GPU (PA_NZ or ND caches): one launch for the whole call (the index checked inline
by every block when it holds at most ``INLINE_CHECK_MAX`` tokens, a decode step; a Check launch before it
otherwise).

No host round trip: the index's range check sets the device flag and the kernel writes nothing once it
is set (161002 at synchronisation), so the launch captures. ``ACL_QKV_ROPE_CONFIG`` picks the lanes a
head takes: ``g16`` (the default; the three measured within 7% of each other on an H100: 8 columns a lane,
one 16-byte access of a 16-bit row), ``g8`` (16 columns, two 16-byte accesses) or ``g32`` (4 columns, one
8-byte access). Every choice computes the same values (:mod:`acl_rocm.kernels.norm_rope_cache`).
"""

from __future__ import annotations

import ctypes
import struct
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.tensor import AclTensor
from acl_rocm.kernels.movement import Check
from acl_rocm.kernels.norm_rope_cache import BLOCK_THREADS, GROUPS, QkvMeta, QkvNormRopeCache, meta_values
from acl_rocm.launch import KernelArgs, LaunchConfig, launch_tensor
from acl_rocm.ops.movement import INLINE_CHECK_MAX
from acl_rocm.ops.program import FLAG, Program, Step, program_kernel
from acl_rocm.ops.sort import address, refuse

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

CONFIG_ENV = "ACL_QKV_ROPE_CONFIG"
"""Lanes a head: ``g16`` (default), ``g8`` or ``g32``."""
CONFIGS = tuple(f"g{g}" for g in GROUPS)

OPS: tuple[str, ...] = ("QkvRmsNormRopeCache",)
"""The aclnn operators this module runs."""

FAMILY = "norm_rope_cache"


def _ptr(t: AclTensor | None) -> ctypes.c_void_p:
    return KernelArgs.pointer(0 if t is None else address(t))


def _optional(launch: Launch, name: str) -> AclTensor | None:
    t = launch.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _s2(t: AclTensor | None) -> tuple[int, int]:
    return (0, 0) if t is None else (int(t.strides[0]), int(t.strides[1]))


def _s4(t: AclTensor) -> tuple[int, int, int, int]:
    return (int(t.strides[0]), int(t.strides[1]), int(t.strides[2]), int(t.strides[3]))


def vector_ok(tensors: list[AclTensor | None], cols: int) -> bool:
    """Whether every tensor's last stride is 1, its other strides and its address multiples of ``cols`` elements."""
    for t in tensors:
        if t is None:
            continue
        strides = [int(s) for s in t.strides]
        size = t.dtype.info.storage_bits // 8
        if strides[-1] != 1 or any(s % cols for s in strides[:-1]) or address(t) % (cols * size):
            return False
    return True


class NormRopeCacheRunner:
    """QkvRmsNormRopeCache on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.forced: str | None = None
        """A :data:`CONFIG_ENV` setting over the environment's for calls made while set (tests, bench A/B)."""

    def config(self) -> str:
        """The :data:`CONFIG_ENV` choice (``g16`` unless set; bad values are refused)."""
        value = (self.forced or self.backend.environ.get(CONFIG_ENV, "") or "g16").strip().lower()
        if value not in CONFIGS:
            raise AclnnError(
                AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"{CONFIG_ENV}={value!r}: expected one of {', '.join(CONFIGS)}"
            )
        return value

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        return {
            "QkvRmsNormRopeCache": program_kernel(self.backend, FAMILY, "QkvRmsNormRopeCache", self.plan, self.config)
        }

    def _step(self, prog: Program, kernel: Any, config: LaunchConfig, values: list[Any]) -> None:
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        prog.steps.append(Step(function, config, tuple(values)))

    def plan(self, launch: Launch) -> Program:
        """The index check (inline for a short index) and the one launch that writes every output."""
        names = ("qkv", "qGamma", "kGamma", "cos", "sin", "index", "qOut", "kCache", "vCache")
        qkv, qg, kg, cos, sin, index, q_out, kc, vc = (launch_tensor(launch, n) for n in names)
        ks, vs = _optional(launch, "kScaleOptional"), _optional(launch, "vScaleOptional")
        ko, vo = _optional(launch, "kOffsetOptional"), _optional(launch, "vOffsetOptional")
        q_bq, k_bq, v_bq = (_optional(launch, n) for n in ("qOutBeforeQuant", "kOutBeforeQuant", "vOutBeforeQuant"))
        if qkv.dtype not in (D.ACL_FLOAT16, D.ACL_BF16):
            raise refuse("QkvRmsNormRopeCache", f"a {qkv.dtype.short} qkv")
        nq, nk, nv = (int(v) for v in launch.args["headNums"])
        d = int(launch.args["qkvSize"][3])
        tokens = int(qkv.view_dims[0])
        nd = launch.plan["qkv_cache_layout"] == "nd"
        block_size = int(kc.view_dims[1 if nd else 2])
        high = int(kc.view_dims[0]) * block_size
        prog = Program(report="QkvRmsNormRopeCache: index holds a slot outside the caches (and not -1)")
        inline = 0 < tokens <= INLINE_CHECK_MAX
        if not inline:
            shape, strides = (tokens,), (int(index.strides[0]),)
            meta = KernelArgs.index_array([tokens, *shape, *strides], "long long")
            values = [meta, _ptr(index), ctypes.c_longlong(-1), ctypes.c_longlong(high), FLAG]
            cfg = self.backend.elementwise_config(max(tokens, 1), 1)
            check = LaunchConfig(cfg.grid, (min(cfg.block[0], 256), 1, 1))
            self._step(prog, Check(index.dtype, 1, "long long"), check, values)
        group = int(self.config()[1:])
        cols = d // group
        k_int8, v_int8 = kc.dtype == D.ACL_INT8, vc.dtype == D.ACL_INT8
        vec = vector_ok([qkv, qg, kg, cos, sin, q_out, q_bq, k_bq, v_bq, kc, vc], cols)
        kernel = QkvNormRopeCache(qkv.dtype, k_int8, v_int8, ko is not None, vo is not None, d, group, vec, inline, nd)
        units = tokens * (nq + nk + nv)
        (eps_bits,) = struct.unpack("<q", struct.pack("<d", float(launch.args["epsilon"])))
        meta_v = QkvMeta(
            units=units,
            heads=nq + nk + nv,
            nq=nq,
            nk=nk,
            block_size=block_size,
            epsilon_bits=eps_bits,
            qkv=_s2(qkv),
            cos=_s2(cos),
            sin=_s2(sin),
            q_gamma=int(qg.strides[0]),
            k_gamma=int(kg.strides[0]),
            index=int(index.strides[0]),
            q_out=_s2(q_out),
            q_bq=_s2(q_bq),
            k_bq=_s2(k_bq),
            v_bq=_s2(v_bq),
            k_cache=_s4(kc),
            v_cache=_s4(vc),
            k_scale=_s2(ks),
            v_scale=_s2(vs),
            k_offset=_s2(ko),
            v_offset=_s2(vo),
        )
        values = [KernelArgs.index_array(meta_values(meta_v), "long long")]
        values += [_ptr(t) for t in (qkv, qg, kg, cos, sin, index, q_out, kc, vc, ks, vs, ko, vo, q_bq, k_bq, v_bq)]
        values.append(FLAG)
        if inline:  # the index, its count and stride, and the bounds [-1, high)
            values += [_ptr(index), ctypes.c_longlong(tokens), ctypes.c_longlong(int(index.strides[0]))]
            values += [ctypes.c_longlong(-1), ctypes.c_longlong(high)]
        blocks = -(-units * group // BLOCK_THREADS)
        if units >= 1 << 31 or blocks > self.backend.properties.max_grid_x:
            raise refuse("QkvRmsNormRopeCache", f"{units} (token, head) units (the grid's limit is exceeded)")
        self._step(prog, kernel, LaunchConfig((blocks, 1, 1), (BLOCK_THREADS, 1, 1)), values)
        return prog


RUNNER = NormRopeCacheRunner
