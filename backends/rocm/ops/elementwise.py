"""The elementwise family on the GPU: one generated kernel per (op, dtypes, coalesced rank, index type).

A call never leaves the device: scalars travel as kernel arguments, a one-element ``value`` tensor is
read by the kernel itself, and results are written straight into the output's (possibly strided)
view. Unsupported dtypes are refused with 161002 before anything is enqueued.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec.opspec import Kind
from acl_core.spec.rules import float_result
from acl_core.tensor import AclScalar, AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels.ctypes_map import SUPPORTED, ctype
from acl_rocm.kernels.elementwise import UFUNCS, UNROLL, Instance, Operand, ScalarArg, Ufunc, generate
from acl_rocm.launch import KernelArgs
from acl_rocm.views import broadcast_strides, coalesce, index_type

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = tuple(sorted(n for n in UFUNCS if n != "DivModTrue"))
"""The aclnn operators this module runs (in-place twins reuse their base op's kernel)."""


def _refuse(op: str, what: str) -> AclnnError:
    return AclnnError(
        AclnnStatus.ACLNN_ERR_PARAM_INVALID,
        f"the rocm backend cannot run {op} with {what} (kernels support: "
        + ", ".join(sorted(d.short for d in SUPPORTED))
        + ")",
    )


def host_scalar(value: bool | int | float | complex, dtype: D) -> bool | int | float:
    """A Python scalar converted to ``dtype`` as a kernel argument, with CANN's cast rules."""
    if isinstance(value, complex):
        if value.imag:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, "a complex scalar needs a complex dtype")
        value = value.real
    c = ctype(dtype)
    if c.kind == "bool":
        return bool(value != 0)
    if c.kind == "float":
        return float(value)
    if isinstance(value, float):
        if math.isnan(value):
            return 0
        whole = math.trunc(value) if math.isfinite(value) else (c.hi if value > 0 else c.lo)
        return int(min(max(whole, c.lo), c.hi))
    if c.kind == "uint64":
        return int(value) & (2**64 - 1)
    wrapped = int(value) & (2**64 - 1)
    return wrapped - 2**64 if wrapped >= 2**63 else wrapped


def _select(op: str, launch: Launch) -> Ufunc:
    if op == "DivMod" and int(launch.args["mode"]) == 0:
        return UFUNCS["DivModTrue"]
    return UFUNCS[op]


def _itemsize(dtype: D) -> int:
    return dtype.info.storage_bits // 8


class ElementwiseRunner:
    """Turns elementwise Launches into kernel launches on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._sources: dict[Instance, str] = {}

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per supported op name."""
        return {name: self._bind(name) for name in OPS}

    def _bind(self, op: str) -> Kernel:
        def kernel(launch: Launch) -> None:
            self.run(op, launch)

        kernel.__name__ = f"rocm_{op}"
        return kernel

    def source(self, inst: Instance) -> str:
        """The generated source of ``inst`` (generated once per process)."""
        src = self._sources.get(inst)
        if src is None:
            src = generate(inst)
            with self._lock:
                self._sources[inst] = src
        return src

    def plan(self, op: str, launch: Launch) -> tuple[Instance, list[Any]] | None:
        """The kernel instance and its argument values for one call (None when there is nothing to do)."""
        u = _select(op, launch)
        args = launch.args
        spec = launch.spec
        out_name, out_token = u.output
        out = args.get(out_name)
        if not isinstance(out, AclTensor):
            raise _refuse(op, f"no output tensor {out_name!r}")
        compute: D | None = launch.plan.get("compute")
        tokens: dict[str, D | None] = {
            "T": compute,
            "F": float_result(compute) if compute is not None else None,
            "B": D.ACL_BOOL,
            "O": out.dtype,
        }
        inputs = dict(u.inputs)
        used = set(inputs.values()) | {out_token}
        for token in used:
            dt = tokens.get(token)
            if dt is None:
                raise _refuse(op, f"no dtype for type {token}")
            if dt not in SUPPORTED:
                raise _refuse(op, f"{dt.short} computation")
        tensors: list[tuple[str, AclTensor]] = []
        scalars: list[ScalarArg] = []
        scalar_values: list[Any] = []
        constants: list[tuple[str, int]] = []
        for p in spec.params:
            value = args.get(p.name)
            if p.kind is Kind.TENSOR:
                if value is None or (p.name not in inputs and p.name != out_name):
                    continue
                assert isinstance(value, AclTensor)
                if value.dtype not in SUPPORTED:
                    raise _refuse(op, f"{p.name} of dtype {value.dtype.short}")
                tensors.append((p.name, value))
            elif p.kind is Kind.SCALAR and p.name in inputs:
                dt = tokens[inputs[p.name]]
                assert dt is not None
                present = isinstance(value, AclScalar)
                scalars.append(ScalarArg(p.name, dt, present))
                raw = host_scalar(value.value, dt) if isinstance(value, AclScalar) else 0
                scalar_values.append(ctype(dt).scalar_ctype(raw))
            elif p.kind in (Kind.INT, Kind.BOOL) and u.uses(p.name):
                constants.append((p.name, int(value or 0)))
        if out.numel == 0:
            return None
        out_shape = out.view_dims
        strides = [broadcast_strides(t.view_dims, t.strides, out_shape) for _, t in tensors]
        geometry = coalesce(out_shape, strides)
        config = self.backend.elementwise_config(geometry.numel)
        operands = []
        for k, (name, t) in enumerate(tensors):
            token = inputs.get(name, out_token)
            dt = tokens[token]
            assert dt is not None
            operands.append(Operand(name, t.dtype, dt, name in inputs, name == out_name, geometry.stride_class(k)))
        out_start = out.data + out.offset * _itemsize(out.dtype)
        restrict = all(t.data != out.data for name, t in tensors if name != out_name)
        types = tuple((tok, dt) for tok, dt in sorted(tokens.items()) if dt is not None)
        inst = Instance(
            ufunc=u,
            operands=tuple(operands),
            scalars=tuple(scalars),
            constants=tuple(constants),
            result=tokens[out_token] or out.dtype,
            ndim=geometry.ndim,
            index_type=index_type(geometry, config.threads * UNROLL),
            restrict=restrict,
            types=types,
        )
        meta = [geometry.numel, *geometry.shape, *(s for st in geometry.strides for s in st)]
        values: list[Any] = [KernelArgs.index_array(meta, inst.index_type)]
        for name, t in tensors:
            start = out_start if name == out_name else t.data + t.offset * _itemsize(t.dtype)
            values.append(KernelArgs.pointer(start))
        values.extend(scalar_values)
        return inst, [config, *values]

    def run(self, op: str, launch: Launch) -> None:
        """Enqueue one elementwise call on its stream."""
        planned = self.plan(op, launch)
        if planned is None:
            return
        inst, (config, *values) = planned
        function = self.backend.function(self.source(inst), inst.kernel_name)
        args = KernelArgs(values)
        self.backend.provider.launch(
            function,
            config.grid,
            config.block,
            config.shared_bytes,
            handle(launch.stream),
            args.address,
        )
