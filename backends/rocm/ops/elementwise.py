"""The elementwise family on the GPU: one generated kernel per (op, dtypes, coalesced rank, index type).

A call never leaves the device: scalars travel as kernel arguments, a one-element ``value`` tensor is
read by the kernel itself, and results are written straight into the output's (possibly strided)
view. Unsupported dtypes are refused with 161002 before anything is enqueued.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acl_core.backend import RELAUNCH, Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec.kernel_args import Scalar
from acl_core.spec.opspec import Kind
from acl_core.spec.rules import float_result
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels.activation import MISH_CONFIGS, MISH_ENV, MISH_POLY
from acl_rocm.kernels.ctypes_map import SUPPORTED, ctype
from acl_rocm.kernels.elementwise import (
    INTERNAL,
    UFUNCS,
    VECTOR_UNROLL,
    Instance,
    Operand,
    ScalarArg,
    Ufunc,
    dtype_constants,
    generate,
    unroll_for,
    vector_width,
)
from acl_rocm.kernels.lowp import LOW_PRECISION
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.binding import named_kernels
from acl_rocm.views import Geometry, broadcast_strides, coalesce, index_type

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

VARIANTS = frozenset({"DivModTrue", "GeluBackwardV2Tanh"})
"""Ufuncs that are another op's mode (DivMod's mode 0, GeluBackwardV2's approximate "tanh"), not ops."""
OPS: tuple[str, ...] = tuple(sorted(n for n in UFUNCS if n not in VARIANTS))
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
    if op == "ClampTensor" and (launch.args["clipValueMin"] is None or launch.args["clipValueMax"] is None):
        return INTERNAL["ClampTensorUpper" if launch.args["clipValueMin"] is None else "ClampTensorLower"]
    if op == "GeluBackwardV2" and launch.args.get("approximate") == "tanh":
        return UFUNCS["GeluBackwardV2Tanh"]
    return UFUNCS[op]


def _itemsize(dtype: D) -> int:
    return max(dtype.info.storage_bits // 8, 1)


def _address(t: AclTensor) -> int:
    """The byte address of a view's first element (the byte holding it, for packed 4-bit types)."""
    return t.data + (t.offset * t.dtype.info.storage_bits) // 8


class ElementwiseRunner:
    """Turns elementwise Launches into kernel launches on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._sources: dict[Instance, str] = {}
        self._interned: dict[Instance, Instance] = {}
        self._memo_keys: dict[int, str] = {}

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per supported op name."""
        return named_kernels(OPS, self.run)

    def source(self, inst: Instance) -> str:
        """The generated source of ``inst`` (generated once per process)."""
        src = self._sources.get(inst)
        if src is None:
            src = generate(inst)
            with self._lock:
                self._sources[inst] = src
        return src

    def mish_config(self) -> str:
        """Mish's float32 body (:data:`MISH_ENV`; unset: ``libm``, the double body; bad values are refused)."""
        value = (self.backend.environ.get(MISH_ENV, "") or MISH_CONFIGS[0]).strip().lower()
        if value not in MISH_CONFIGS:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"{MISH_ENV}={value!r}: not one of {MISH_CONFIGS}")
        return value

    def plan(self, op: str, launch: Launch) -> Planned | None:
        """The kernel instance, launch and argument values for one call (None when there is nothing to do)."""
        u = _select(op, launch)
        args = launch.args
        out_name, _ = u.output
        out = args.get(out_name)
        if not isinstance(out, AclTensor):
            raise _refuse(op, f"no output tensor {out_name!r}")
        if u.name == "Mish" and out.dtype == D.ACL_FLOAT and self.mish_config() == "poly":
            u = Ufunc(u.name, u.signature, MISH_POLY, u.lowp)
        compute: D | None = launch.plan.get("compute")
        tokens = _tokens(compute, out.dtype)
        source = args.get("self")
        if op == "Cast" and out.dtype in LOW_PRECISION and isinstance(source, AclTensor) and source.dtype in SUPPORTED:
            tokens = _tokens(compute, source.dtype)  # the encoder reads the source in its own type: one rounding
        inputs = dict(u.inputs)
        tensors: list[tuple[str, AclTensor]] = []
        scalars: list[tuple[str, Scalar | None]] = []
        constants: list[tuple[str, int]] = []
        for p in launch.spec.params:
            value = args.get(p.name)
            if p.kind is Kind.TENSOR:
                if value is None or (p.name not in inputs and p.name != out_name):
                    continue
                assert isinstance(value, AclTensor)
                tensors.append((p.name, value))
            elif p.kind is Kind.SCALAR and p.name in inputs:
                scalars.append((p.name, value if isinstance(value, Scalar) else None))
            elif p.kind is Kind.FLOAT and p.name in inputs:  # a float attribute (rtol, eps) the body reads
                scalars.append((p.name, Scalar(float(value or 0.0), D.ACL_DOUBLE)))
            elif p.kind in (Kind.INT, Kind.BOOL) and u.uses(p.name):
                constants.append((p.name, int(value or 0)))
        constants += [(name, value) for name, value in dtype_constants(compute).items() if u.uses(name)]
        return self.instantiate(op, u, tokens, tensors, scalars, constants)

    def instantiate(
        self,
        op: str,
        u: Ufunc,
        tokens: dict[str, D | None],
        tensors: list[tuple[str, AclTensor]],
        scalars: Sequence[tuple[str, Scalar | None]] = (),
        constants: Sequence[tuple[str, int]] = (),
    ) -> Planned | None:
        """One kernel instance of ``u`` over ``tensors`` (the output among them, named as in ``u``)."""
        out_name, out_token = u.output
        inputs = dict(u.inputs)
        out = dict(tensors)[out_name]
        for token in set(inputs.values()) | {out_token}:
            dt = tokens.get(token)
            if dt is None:
                raise _refuse(op, f"no dtype for type {token}")
            if dt not in SUPPORTED:
                raise _refuse(op, f"{dt.short} computation")
        for name, t in tensors:
            if t.dtype not in SUPPORTED:
                raise _refuse(op, f"{name} of dtype {t.dtype.short}")
        scalar_args: list[ScalarArg] = []
        scalar_values: list[Any] = []
        for name, scalar in scalars:
            dt = tokens[inputs[name]]
            assert dt is not None
            scalar_args.append(ScalarArg(name, dt, scalar is not None))
            raw = host_scalar(scalar.value, dt) if scalar is not None else 0
            scalar_values.append(ctype(dt).scalar_ctype(raw))
        if out.numel == 0:
            return None
        out_shape = out.view_dims
        strides = [broadcast_strides(t.view_dims, t.strides, out_shape) for _, t in tensors]
        geometry = coalesce(out_shape, strides)
        operands = []
        for k, (name, t) in enumerate(tensors):
            dt = tokens[inputs.get(name, out_token)]
            assert dt is not None
            nibble = t.offset % 2 if ctype(t.dtype).packed else 0
            cls = geometry.stride_class(k)
            operands.append(Operand(name, t.dtype, dt, name in inputs, name == out_name, cls, nibble))
        lowp = any(ctype(t.dtype).lowp for _, t in tensors)  # bit-exact codecs: scalar path, exact loads
        vec = 1 if lowp else choose_vector(geometry, [t for _, t in tensors], operands)
        unroll = VECTOR_UNROLL if vec > 1 else unroll_for([_itemsize(t.dtype) for _, t in tensors])
        config = self.backend.elementwise_config(geometry.numel, unroll * vec)
        restrict = all(t.data != out.data for name, t in tensors if name != out_name)
        inst = Instance(
            ufunc=u,
            operands=tuple(operands),
            scalars=tuple(scalar_args),
            constants=tuple(constants),
            result=out.dtype if tokens[out_token] is None else tokens[out_token],  # ACL_FLOAT is 0
            ndim=geometry.ndim,
            index_type=index_type(geometry, config.threads * unroll * vec),
            restrict=restrict,
            types=tuple((tok, dt) for tok, dt in sorted(tokens.items()) if dt is not None),
            unroll=unroll,
            exact=lowp,
            vec=vec,
        )
        meta = [geometry.numel, *geometry.shape, *(s for st in geometry.strides for s in st)]
        values: list[Any] = [KernelArgs.index_array(meta, inst.index_type)]
        for _, t in tensors:
            values.append(KernelArgs.pointer(_address(t)))
        values.extend(scalar_values)
        return Planned(inst, config, values)

    def prepare(self, planned: Planned | None) -> Prepared | None:
        """The loaded function, launch configuration and packed arguments of a planned instance."""
        if planned is None:
            return None
        inst = self._interned.setdefault(planned.instance, planned.instance)  # one object: its name is computed once
        function = self.backend.function(self.source(inst), inst.kernel_name)
        return Prepared(function, planned.config, KernelArgs(planned.values))

    def launch_prepared(self, prepared: Prepared | None, stream: int) -> None:
        """Launch a prepared instance on ``stream``."""
        if prepared is not None:
            cfg = prepared.config
            self.backend.provider.launch(
                prepared.function, cfg.grid, cfg.block, cfg.shared_bytes, stream, prepared.args.address
            )

    def enqueue(self, planned: Planned | None, stream: int) -> None:
        """Launch a planned instance on ``stream`` (compiling or loading its kernel the first time)."""
        self.launch_prepared(self.prepare(planned), stream)

    def bind(self, prepared: Prepared | None) -> Callable[[int], None]:
        """:meth:`launch_prepared` of ``prepared`` as one callable of the stream (the provider's bound launch)."""
        if prepared is None:
            return _nothing
        cfg = prepared.config
        return self.backend.provider.launcher(
            prepared.function, cfg.grid, cfg.block, cfg.shared_bytes, prepared.args.address, prepared
        )

    def run(self, op: str, launch: Launch) -> None:
        """Enqueue one elementwise call on its stream; a repeated signature reuses its bound launch."""
        device = self.backend.provider.get_device()
        key = self._memo_keys.get(device)
        if key is None:
            key = self._memo_keys.setdefault(device, f"rocm.elementwise@{device}")
        enqueue = launch.memo.get(key)  # not memo_plan: its call and closure cost ~0.1 us on the hottest host path
        if enqueue is None:
            enqueue = launch.memo[key] = self.bind(self.prepare(self.plan(op, launch)))
        enqueue(handle(launch.stream))
        launch.memo[RELAUNCH] = _relaunch(self.backend.provider.get_device, device, enqueue)

    def convert(self, src: AclTensor, dst: AclTensor, stream: int, ufunc: str = "Cast") -> None:
        """``dst = ufunc(src)`` converted to dst's dtype, src broadcast to dst's view (device to device)."""
        self.enqueue(self.plan_convert(src, dst, ufunc), stream)

    def plan_convert(self, src: AclTensor, dst: AclTensor, ufunc: str = "Cast") -> Planned | None:
        """The planned instance of :meth:`convert` (None when dst is empty)."""
        u = INTERNAL[ufunc] if ufunc in INTERNAL else UFUNCS[ufunc]
        return self.instantiate(ufunc, u, _tokens(dst.dtype, dst.dtype), [("self", src), ("out", dst)])

    def zero(self, dst: AclTensor, stream: int) -> None:
        """Every element of the view ``dst`` = 0."""
        self.enqueue(
            self.instantiate("InplaceZero", UFUNCS["InplaceZero"], _tokens(None, dst.dtype), [("selfRef", dst)]), stream
        )


def _relaunch(get_device: Callable[[], int], device: int, enqueue: Callable[[int], None]) -> Callable[[object], bool]:
    """The signature's bound launch for phase 2's fast path (:data:`acl_core.backend.RELAUNCH`), on ``device`` only."""

    def relaunch(stream: object) -> bool:
        if get_device() != device:  # the loaded function belongs to the device it was planned on
            return False
        enqueue(handle(stream))
        return True

    return relaunch


@dataclass(frozen=True)
class Prepared:
    """A kernel ready to launch: the loaded function, its configuration and its packed arguments."""

    function: object
    config: LaunchConfig
    args: KernelArgs


@dataclass(frozen=True)
class Planned:
    """A kernel instance with its launch configuration and argument values."""

    instance: Instance
    config: LaunchConfig
    values: list[Any]


def choose_vector(geometry: Geometry, tensors: Sequence[AclTensor], operands: Sequence[Operand]) -> int:
    """Elements per access of the vector path for this call, or 1 for the general strided path.

    The vector path needs a rank-1 walk where every operand is unit-stride or broadcast (the output
    unit-stride) and every unit-stride operand's first element aligned to a whole vector; the width
    halves until the addresses allow it (an offset view of fp16 may still take 4-element vectors).
    """
    if geometry.ndim != 1 or geometry.numel < 2:
        return 1
    classes = [geometry.stride_class(k) for k in range(len(tensors))]
    if any(c == "any" for c in classes) or any(c != "unit" for c, op in zip(classes, operands) if op.write):
        return 1
    unit = [t for t, c in zip(tensors, classes) if c == "unit"]
    if not unit:
        return 1
    vec = vector_width([_itemsize(t.dtype) for t in tensors])
    while vec > 1:
        if all((t.data + t.offset * _itemsize(t.dtype)) % (vec * _itemsize(t.dtype)) == 0 for t in unit):
            return vec
        vec //= 2
    return 1


def _nothing(stream: int) -> None:
    """The launch of an empty output: nothing to enqueue."""


def _tokens(compute: D | None, output: D) -> dict[str, D | None]:
    return {
        "T": compute,
        "F": float_result(compute) if compute is not None else None,
        "B": D.ACL_BOOL,
        "O": output,
    }


RUNNER = ElementwiseRunner
