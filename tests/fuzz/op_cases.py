"""Corrupted operator calls: a declared op's sample with one argument (or the call's shape) corrupted.

A case is built from its seed alone (``np.random.default_rng([seed, index])``), so any one of them
can be replayed. Through ``aclnn`` it runs phase 1 and, when that succeeds, phase 2 on a fresh
stream; through ``eager`` it runs ``eager.run(guard=True)`` on the corrupted NumPy arguments.
Tensors the harness places sit in canary-guarded allocations (:class:`~tests.fuzz.harness.Guarded`);
after the case, no byte may have changed outside the views the call was allowed to write.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from acl_core import aclnn, eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType, from_numpy, storage_nbytes
from acl_core.errors import AclCoreError, AclnnStatus
from acl_core.formats import Format
from acl_core.spec.opspec import Kind, OpSpec, OutInfo, Param, Role, Sample
from acl_core.spec.validate import check_inputs
from acl_core.tensor import (
    AclBoolArray,
    AclFloatArray,
    AclIntArray,
    AclScalar,
    AclScalarList,
    AclTensor,
    AclTensorList,
)

from .harness import FILL, Guarded, Hang, code_of, timed
from .verdict import ACLNN_PARAM_CODES, ANYTHING, Expect, Outcome, Verdict, classify_code

NULLPTR = int(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR)
REFUSE = Expect.refusal(ACLNN_PARAM_CODES)
"""A corrupted argument an aclnn call must refuse, with an aclnn parameter code."""
VALID = Expect(frozenset({0}))
"""The sample's own call: it must succeed."""
INT64 = (-(2**63), 2**63 - 1)
SAMPLE_POOL = 4
"""A case starts from one of an op's this-many smallest samples (the fuzz is about arguments, not sizes)."""


def _refuse_null(p: Param) -> Expect:
    return ANYTHING if p.optional else Expect.refusal({NULLPTR})


# ----------------------------------------------------------------------------- describing arguments
def describe(value: Any) -> str:
    """A compact, unambiguous rendering of one argument for a reproduction line."""
    if isinstance(value, AclTensor):
        text = f"T({list(value.view_dims)},{value.dtype.short}"
        if value.strides != tuple(_contiguous(value.view_dims)) or value.offset:
            text += f",strides={list(value.strides)},offset={value.offset}"
        if value.storage_dims != value.view_dims:
            text += f",storage={list(value.storage_dims)}"
        if value.format is not Format.ACL_FORMAT_ND:
            text += f",{value.format.name}"
        text += f",@{value.data:#x}"
        return text + (",destroyed)" if value.destroyed else ")")
    if isinstance(value, AclScalar):
        return f"S({value.value!r},{value.dtype.short}{',destroyed' if value.destroyed else ''})"
    if isinstance(value, (AclIntArray, AclFloatArray, AclBoolArray)):
        shown = list(value.values[:8]) + (["..."] if len(value.values) > 8 else [])
        return f"{type(value).__name__}({shown}{',destroyed' if value.destroyed else ''})"
    if isinstance(value, AclTensorList):
        return f"TL[{', '.join(describe(t) for t in value.tensors[:4])}{',destroyed' if value.destroyed else ''}]"
    if isinstance(value, AclScalarList):
        return f"SL[{', '.join(describe(s) for s in value.scalars[:4])}]"
    if isinstance(value, np.ndarray):
        return f"np({list(value.shape)},{value.dtype}{',strided' if not value.flags.c_contiguous else ''})"
    if isinstance(value, (list, tuple)) and len(value) > 8:
        return f"{type(value).__name__}(len {len(value)}: {[describe(v) for v in value[:4]]}...)"
    if isinstance(value, (list, tuple)):
        return repr(type(value)([describe(v) if not isinstance(v, (int, float)) else v for v in value]))
    if isinstance(value, str) and len(value) > 24:
        return repr(value[:24] + "...") + f"*{len(value)}"
    return repr(value)


def _contiguous(dims: tuple[int, ...]) -> list[int]:
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(dims[i + 1], 1)
    return strides


# ----------------------------------------------------------------------------- building a valid call
@dataclass
class Built:
    """The handles of one call and everything made for it (freed after the case)."""

    backend: Backend
    args: dict[str, Any] = field(default_factory=dict)
    guards: list[Guarded] = field(default_factory=list)
    arrays: list[Any] = field(default_factory=list)  # DeviceArrays from eager placement
    scratch: list[int] = field(default_factory=list)  # extra device allocations
    notes: list[str] = field(default_factory=list)  # aclCreate* calls the mutation made

    @property
    def rt(self) -> Any:
        """The backend's runtime."""
        return self.backend.runtime

    def guard_of(self, address: int) -> Guarded | None:
        """The guarded allocation whose payload or canaries hold ``address``."""
        for g in self.guards:
            if g.base <= address < g.base + g.size:
                return g
        return None

    def free(self) -> None:
        """Release everything made for the call."""
        for g in self.guards:
            g.free()
        for da in self.arrays:
            da.free()
        for address in self.scratch:
            self.rt.free(address)
        self.guards, self.arrays, self.scratch = [], [], []


def place(built: Built, value: Any) -> AclTensor:
    """An aclTensor over a guarded copy of ``value`` (private formats and packed types through eager)."""
    to_device = getattr(value, "acl_to_device", None)
    if to_device is not None:
        da = to_device(built.backend)
        built.arrays.append(da)
        return da.tensor()  # type: ignore[no-any-return]
    arr = np.asarray(value)
    dtype = from_numpy(arr.dtype)
    if dtype.is_packed or dtype.numpy is None:
        da = eager.to_device(arr, built.backend)
        built.arrays.append(da)
        return da.tensor()
    g = Guarded(built.rt, arr.astype(dtype.numpy, copy=False))
    built.guards.append(g)
    return AclTensor.create(arr.shape, dtype, None, 0, Format.ACL_FORMAT_ND, None, g.data)


def place_output(built: Built, info: OutInfo) -> AclTensor:
    """A guarded, 0xA5-filled output for ``info``."""
    dtype = info.dtype
    if dtype.is_packed or dtype.numpy is None:
        da = eager.empty(info.shape, dtype, built.backend)
        built.rt.memset(da.address, da.nbytes, FILL, da.nbytes)
        built.arrays.append(da)
        return da.tensor()
    nbytes = storage_nbytes(dtype, math.prod(info.shape))
    g = Guarded(built.rt, np.full(nbytes, FILL, dtype=np.uint8))
    built.guards.append(g)
    return AclTensor.create(info.shape, dtype, None, 0, Format.ACL_FORMAT_ND, None, g.data)


def build_call(spec: OpSpec, sample: Sample, backend: Backend) -> Built:
    """The valid call ``sample`` describes, as handles, with outputs allocated from the output rule."""
    built = Built(backend)
    args = built.args
    for p in spec.params:
        value = sample.args.get(p.name, p.default)
        if value is None:
            args[p.name] = None
        elif p.kind is Kind.TENSOR:
            args[p.name] = value if isinstance(value, AclTensor) else place(built, value)
        elif p.kind is Kind.TENSOR_LIST:
            args[p.name] = AclTensorList.create([place(built, v) for v in value])
        elif p.kind is Kind.SCALAR:
            args[p.name] = eager.to_scalar(value)
        elif p.kind is Kind.SCALAR_LIST:
            args[p.name] = AclScalarList.create([eager.to_scalar(v) for v in value])
        elif p.kind is Kind.INT_ARRAY:
            args[p.name] = AclIntArray.create(value)
        elif p.kind is Kind.FLOAT_ARRAY:
            args[p.name] = AclFloatArray.create(value)
        elif p.kind is Kind.BOOL_ARRAY:
            args[p.name] = AclBoolArray.create(value)
        else:
            args[p.name] = value
    infos = check_inputs(spec, dict(args), built.rt, outputs_required=False).plan["outputs"]
    for p in spec.params:
        info = infos.get(p.name)
        if p.role is not Role.OUT or args[p.name] is not None or info is None:
            continue
        if isinstance(info, list):
            args[p.name] = AclTensorList.create([place_output(built, i) for i in info])
        else:
            args[p.name] = place_output(built, info)
    return built


def pick_sample(spec: OpSpec, rng: np.random.Generator, seed: int) -> tuple[int, Sample]:
    """One of the op's smallest samples (drawn from a generator seeded by ``seed`` and the op alone)."""
    samples = list(spec.samples(np.random.default_rng([seed, *spec.name.encode()]))) if spec.samples else []
    if not samples:
        raise LookupError(f"{spec.name} declares no samples")
    sizes = [_elements(s) for s in samples]
    empty = [i for i in range(len(samples)) if sizes[i] == 0]
    filled = sorted((i for i in range(len(samples)) if sizes[i]), key=lambda i: (sizes[i], i))[:SAMPLE_POOL]
    pool = empty if empty and (not filled or rng.integers(5) == 0) else filled  # empty tensors one case in five
    index = int(pool[int(rng.integers(len(pool)))])
    return index, samples[index]


def _elements(sample: Sample) -> int:
    """Elements of the sample's smallest tensor (0 when one is empty), or 1 when it has no arrays."""
    counts = [np.asarray(v).size for v in _arrays(sample.args)]
    return min(counts) * sum(counts) if counts else 1


def _arrays(args: dict[str, Any]) -> list[np.ndarray]:
    found: list[np.ndarray] = []
    for v in args.values():
        if isinstance(v, np.ndarray):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(x for x in v if isinstance(x, np.ndarray))
    return found


# ----------------------------------------------------------------------------- corrupting one argument
Mutation = Callable[[Built, Param, Any, np.random.Generator], tuple[Any, Expect]]
"""(built call, parameter, its valid value, rng) -> (corrupted value, what the call may end in)."""

_NUMPY_TYPES = [d for d in DataType if d.numpy is not None and not d.is_packed and d.info.category != "string"]


def _span_past_alloc(built: Built, t: AclTensor) -> bool:
    """True when a non-empty view reaches outside the device allocation its data address lies in."""
    if t.numel == 0:
        return False
    start, end = t.byte_span()
    rng = built.rt.memory.find(start)
    return rng is None or end > rng.end


def _bounds(built: Built, t: AclTensor | None) -> Expect:
    return REFUSE if t is not None and _span_past_alloc(built, t) else ANYTHING


def _retensor(t: AclTensor, **changes: Any) -> AclTensor:
    fields = {
        "view_dims": t.view_dims,
        "dtype": t.dtype,
        "strides": t.strides,
        "offset": t.offset,
        "format": t.format,
        "storage_dims": t.storage_dims,
        "data": t.data,
    }
    fields.update(changes)
    return AclTensor.create(**fields)


def _made(built: Built, call: str, fn: Callable[[], Any]) -> Any:
    """An aclCreate* call through the front end, noted for the reproduction: a handle, or None and a parameter error.

    It must neither raise nor fail with an internal error (it returns None then too, so the message says which).
    """
    result, exc, _ = timed(fn, 5.0)
    if exc is not None:
        raise CreationEscaped(call, exc)
    message = aclnn.aclGetRecentErrMsg() if result is None else ""
    built.notes.append(f"{call} -> {describe(result)}")
    if "internal error" in message.lower():
        raise CreationInternal(call, message)
    return result


def _create(built: Built, *args: Any) -> Any:
    """aclCreateTensor with ``args`` (see :func:`_made`)."""
    return _made(
        built, f"aclCreateTensor({', '.join(describe(a) for a in args)})", lambda: aclnn.aclCreateTensor(*args)
    )


class CreationEscaped(Exception):
    """An aclCreate* call raised instead of returning None."""

    def __init__(self, call: str, exc: BaseException) -> None:
        super().__init__(f"{call} raised {type(exc).__name__}: {exc}")
        self.call = call
        self.exc = exc


class CreationInternal(Exception):
    """An aclCreate* call returned None with an internal error for a parameter fault."""

    def __init__(self, call: str, message: str) -> None:
        super().__init__(f"{call} -> None: {message}")
        self.call = call
        self.message = message


def t_null(b: Built, p: Param, t: Any, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A null tensor."""
    return None, _refuse_null(p)


_WRONG_KINDS: tuple[Any, ...] = ("x", 7, 1.5, b"\x00", [1, 2], 2**70, -1, True)


def wrong_kind(b: Built, p: Param, v: Any, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A value of a kind the pointer parameter cannot be (a string, a number, a list...)."""
    choice = _WRONG_KINDS[int(rng.integers(len(_WRONG_KINDS)))]
    if choice is True:  # a handle of another kind
        choice = AclIntArray.create([1]) if p.kind is not Kind.INT_ARRAY else AclScalar.create(1.0, DataType.ACL_FLOAT)
    return choice, REFUSE


def t_destroyed(b: Built, p: Param, t: AclTensor, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A tensor that aclDestroyTensor released."""
    clone = _retensor(t)
    aclnn.aclDestroyTensor(clone)
    return clone, REFUSE


def t_freed(b: Built, p: Param, t: AclTensor, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A tensor over device memory that was freed."""
    start, end = t.byte_span()
    address = b.rt.malloc(max(end - start, 1) + 64)
    b.rt.free(address)
    moved = _retensor(t, data=address + (t.data - start))
    return moved, REFUSE if t.numel else ANYTHING


def t_foreign(b: Built, p: Param, t: AclTensor, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A tensor whose data address nobody handed out (a host buffer, or a made-up number)."""
    host = np.zeros(64, dtype=np.uint8)
    b.notes.append("host buffer kept alive for the case")
    b.arrays.append(_Keep(host))
    address = int(host.ctypes.data) if rng.integers(2) else 0x1234_5678
    return _retensor(t, data=address), REFUSE if t.numel else ANYTHING


class _Keep:
    """Keeps a host object alive for the length of a case."""

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def free(self) -> None:
        self.obj = None


def t_short(b: Built, p: Param, t: AclTensor, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A tensor whose view runs past the end of an allocation half its size."""
    start, end = t.byte_span()
    size = max((end - start) // 2, 1)
    address = b.rt.malloc(size)
    b.scratch.append(address)
    moved = _retensor(t, data=address - (start - t.data))
    return moved, _bounds(b, moved)


def t_offset(b: Built, p: Param, t: AclTensor, rng: np.random.Generator) -> tuple[Any, Expect]:
    """The same view moved past its storage by a large element offset (storage dims enlarged to cover it)."""
    shift = max(t.storage_numel, 1) * int(rng.choice([1, 2, 1000]))
    span = max(t.storage_numel, 1)
    moved = _retensor(t, offset=t.offset + shift, storage_dims=(t.offset + shift + span,))
    return moved, _bounds(b, moved)


def t_stride0(b: Built, p: Param, t: AclTensor, rng: np.random.Generator) -> tuple[Any, Expect]:
    """Every stride 0: all elements alias the first one."""
    moved = _retensor(t, strides=(0,) * t.rank, offset=0, storage_dims=(1,))
    aliased = p.writes and moved.numel > 1
    return moved, REFUSE if aliased else ANYTHING


def t_overlap(b: Built, p: Param, t: AclTensor, rng: np.random.Generator) -> tuple[Any, Expect]:
    """Strides smaller than contiguous (rows overlap), or a dim with stride 0 among others."""
    if t.rank == 0:
        return t_stride0(b, p, t, rng)
    strides = list(t.strides)
    k = int(rng.integers(t.rank))
    strides[k] = max(strides[k] // 2, 0) if strides[k] > 1 else 0
    moved = _retensor(t, strides=tuple(strides))
    overlapping = moved.numel > 1 and t.view_dims[k] > 1 and (strides[k] == 0 or t.rank > 1)
    return moved, REFUSE if p.writes and overlapping and _self_overlaps(moved) else _bounds(b, moved)


def _self_overlaps(t: AclTensor) -> bool:
    """True when two elements of the view share an address (small views: enumerated)."""
    if t.numel > 1 << 16:
        return True
    index = np.zeros((), dtype=np.int64)
    for d, s in zip(t.view_dims, t.strides):
        index = np.add.outer(index, np.arange(d, dtype=np.int64) * s)
    flat = index.reshape(-1)
    return bool(np.unique(flat).size != flat.size)


def t_huge(b: Built, p: Param, t: AclTensor, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A huge stride-0 view (2^32 x 2^32-class dims over one element): phase 1 must stay bounded."""
    rank = max(t.rank, 2)
    dims = (1 << 32, 1 << 31) + (1,) * (rank - 2)
    huge = AclTensor.create(dims, t.dtype, (0,) * rank, 0, t.format, (1,), t.data)
    return huge, REFUSE if p.writes else ANYTHING


def t_2pow64(b: Built, p: Param, t: AclTensor, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A stride-0 view of at least 2^64 elements: no int64_t can count them."""
    rank = max(t.rank, 2)
    dims = (1 << 32, 1 << 32) + (1,) * (rank - 2)
    return AclTensor.create(dims, t.dtype, (0,) * rank, 0, t.format, (1,), t.data), REFUSE


def t_dtype(b: Built, p: Param, t: AclTensor, rng: np.random.Generator) -> tuple[Any, Expect]:
    """The same bytes read as another element type."""
    other = _NUMPY_TYPES[int(rng.integers(len(_NUMPY_TYPES)))]
    moved = _retensor(t, dtype=other)
    return moved, _bounds(b, moved)


def t_alias(b: Built, p: Param, t: AclTensor, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A written tensor moved onto another argument's memory, one element in (partial overlap)."""
    others = [v for name, v in b.args.items() if isinstance(v, AclTensor) and v is not t and v.numel and name != p.name]
    if not p.writes or not others or not t.numel:
        return t_stride0(b, p, t, rng)
    target = others[int(rng.integers(len(others)))]
    step = max(t.dtype.info.storage_bits // 8, 1)
    moved = AclTensor.create(
        t.view_dims, t.dtype, t.strides, 0, t.format, (max(t.storage_numel, 1),), target.data + step
    )
    (a0, a1), (b0, b1) = moved.byte_span(), target.byte_span()
    return moved, REFUSE if (a0 < b1 and b0 < a1) or _span_past_alloc(b, moved) else ANYTHING


def t_create(b: Built, p: Param, t: AclTensor, rng: np.random.Generator) -> tuple[Any, Expect]:
    """aclCreateTensor given what C cannot express or CANN refuses; the call then gets whatever came back."""
    data = t.data
    dims, strides, storage = list(t.view_dims), list(t.strides), list(t.storage_dims)
    if not dims:  # a 0-d tensor: corrupt a one-element view instead, or "[x] * rank" would be a valid []
        dims, strides, storage = [1], [1], [1]
    dtype, fmt, offset = int(t.dtype), int(t.format), t.offset
    variants: list[tuple[Any, ...]] = [
        ([-1, *dims], dtype, None, 0, fmt, None, data),  # negative dim
        ([2**63, *dims], dtype, None, 0, fmt, None, data),  # outside int64_t
        ([2**64], dtype, [1], 0, fmt, [1], data),
        ([1] * 9, dtype, None, 0, fmt, None, data),  # rank 9
        (dims, 9999, strides, offset, fmt, storage, data),  # no such aclDataType
        (dims, dtype, strides, offset, 9999, storage, data),  # no such aclFormat
        (dims, dtype, [-1] * len(dims), offset, fmt, storage, data),  # negative strides
        (dims, dtype, strides, -5, fmt, storage, data),  # negative offset
        (dims, dtype, strides, offset, fmt, storage, -64),  # negative address
        (None, dtype, strides, offset, fmt, storage, data),  # null dims
        ([2.5] * len(dims), dtype, None, 0, fmt, None, data),  # float dims
        (["x"], dtype, None, 0, fmt, None, data),
        (dims, dtype, strides[:-1] if strides else [1], offset, fmt, storage, data),  # wrong stride count
        (dims, dtype, strides, offset, fmt, storage, "0x10"),  # a string address
        (dims, dtype, strides, 2**64, fmt, storage, data),
    ]
    made = _create(b, *variants[int(rng.integers(len(variants)))])
    if made is None:
        return None, _refuse_null(p)
    return made, REFUSE


TENSOR_MUTATIONS: tuple[Mutation, ...] = (
    t_null,
    wrong_kind,
    t_destroyed,
    t_freed,
    t_foreign,
    t_short,
    t_offset,
    t_stride0,
    t_overlap,
    t_huge,
    t_2pow64,
    t_dtype,
    t_alias,
    t_create,
)


def h_null(b: Built, p: Param, v: Any, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A null handle."""
    return None, _refuse_null(p)


def h_destroyed(b: Built, p: Param, v: Any, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A handle of the right kind that was destroyed (a copy, so the valid call's own stays usable)."""
    destroy = {
        AclScalar: aclnn.aclDestroyScalar,
        AclIntArray: aclnn.aclDestroyIntArray,
        AclFloatArray: aclnn.aclDestroyFloatArray,
        AclBoolArray: aclnn.aclDestroyBoolArray,
        AclTensorList: aclnn.aclDestroyTensorList,
        AclScalarList: aclnn.aclDestroyScalarList,
    }
    if isinstance(v, AclScalar):
        copy: Any = AclScalar(v.value, v.dtype)
    elif isinstance(v, AclTensorList):
        copy = AclTensorList.create([_retensor(t) for t in v.tensors])
    elif isinstance(v, AclScalarList):
        copy = AclScalarList.create([AclScalar(s.value, s.dtype) for s in v.scalars])
    else:
        copy = type(v)(v.values)
    destroy[type(v)](copy)
    return copy, REFUSE


def s_value(b: Built, p: Param, v: AclScalar, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A scalar holding NaN, ±Inf, a complex number, an extreme integer, or another dtype."""
    choices: list[tuple[object, DataType]] = [
        (float("nan"), DataType.ACL_FLOAT),
        (float("inf"), DataType.ACL_DOUBLE),
        (float("-inf"), DataType.ACL_FLOAT16),
        (1 + 2j, DataType.ACL_COMPLEX64),
        (complex(float("nan"), 1), DataType.ACL_COMPLEX128),
        (2**63 - 1, DataType.ACL_INT64),
        (-(2**63), DataType.ACL_INT64),
        (255, DataType.ACL_UINT8),
        (True, DataType.ACL_BOOL),
        (0, DataType.ACL_INT8),
    ]
    value, dtype = choices[int(rng.integers(len(choices)))]
    return AclScalar.create(value, dtype), ANYTHING


def s_create(b: Built, p: Param, v: AclScalar, rng: np.random.Generator) -> tuple[Any, Expect]:
    """aclCreateScalar given a value its dtype cannot hold, a dtype that is no scalar type, or no number."""
    variants: list[tuple[object, object]] = [
        (2**64, DataType.ACL_INT64),
        (-(2**63) - 1, DataType.ACL_INT64),
        (2**70, DataType.ACL_UINT64),
        (1.0, 9999),
        (1.0, DataType.ACL_STRING),
        ("1", DataType.ACL_FLOAT),
        (None, DataType.ACL_FLOAT),
        (1.0, "float"),
        (10**400, DataType.ACL_DOUBLE),
    ]
    value, dtype = variants[int(rng.integers(len(variants)))]
    call = f"aclCreateScalar({describe(value)}, {describe(dtype)})"
    result = _made(b, call, lambda: aclnn.aclCreateScalar(value, dtype))
    return result, _refuse_null(p) if result is None else ANYTHING


INT_VALUES: tuple[Any, ...] = (
    2**63 - 1,
    -(2**63),
    2**63,
    -(2**63) - 1,
    2**64,
    10**30,
    -1,
    0,
    2**31,
    -(2**31) - 1,
    True,
    1.5,
    "3",
    None,
    np.int64(5),
    b"1",
    float("nan"),
)


def i_value(b: Built, p: Param, v: Any, rng: np.random.Generator) -> tuple[Any, Expect]:
    """An int64 attribute at and past ±2^63, negative, of another Python type, or None."""
    value = INT_VALUES[int(rng.integers(len(INT_VALUES)))]
    if value is None or isinstance(value, (str, bytes, float)):
        return value, REFUSE
    if isinstance(value, int) and not INT64[0] <= int(value) <= INT64[1]:
        return value, REFUSE
    return value, ANYTHING


FLOAT_VALUES: tuple[Any, ...] = (
    float("nan"),
    float("inf"),
    float("-inf"),
    1e308,
    -0.0,
    5e-324,
    2**64,
    "1.0",
    None,
    1 + 1j,
    True,
    10**400,
)


def f_value(b: Built, p: Param, v: Any, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A double attribute that is NaN, ±Inf, extreme, complex, a string, or None."""
    value = FLOAT_VALUES[int(rng.integers(len(FLOAT_VALUES)))]
    refused = value is None or isinstance(value, (str, complex)) or (isinstance(value, int) and value > 2**1024)
    return value, REFUSE if refused else ANYTHING


BOOL_VALUES: tuple[Any, ...] = (2, -1, "true", None, 1.5, np.bool_(True), 2**64)


def b_value(b: Built, p: Param, v: Any, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A bool attribute given 2, -1, a string, a float, or None."""
    value = BOOL_VALUES[int(rng.integers(len(BOOL_VALUES)))]
    return value, REFUSE if value is None or isinstance(value, str) else ANYTHING


STRING_VALUES: tuple[Any, ...] = ("", "\x00", "bogus", "x" * 10000, 123, b"BSND", "ＢＳＮＤ", b"\xff\xfe", None)


def str_value(b: Built, p: Param, v: Any, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A char* attribute that is empty, NUL, unknown, very long, not text, or null."""
    value = STRING_VALUES[int(rng.integers(len(STRING_VALUES)))]
    if value is None:
        return value, _refuse_null(p)
    return value, REFUSE if isinstance(value, int) else ANYTHING


DTYPE_VALUES: tuple[Any, ...] = (9999, -1, 1.5, "x", None, 0, 27, 13, 40)


def d_value(b: Built, p: Param, v: Any, rng: np.random.Generator) -> tuple[Any, Expect]:
    """An aclDataType attribute that is no aclDataType, a string, None, or another type."""
    value = DTYPE_VALUES[int(rng.integers(len(DTYPE_VALUES)))]
    known = isinstance(value, int) and value in {int(d) for d in DataType}
    return value, ANYTHING if known else REFUSE


def a_value(b: Built, p: Param, v: Any, rng: np.random.Generator) -> tuple[Any, Expect]:
    """An array handle that is empty, very long, negative, extreme, NaN, or made from values it cannot hold."""
    n = len(v.values)
    if p.kind is Kind.INT_ARRAY:
        variants: list[Any] = [[], [-1] * n, [2**62] * n, [0] * 1000, [1] * (n + 1), [-(2**63)] * max(n, 1)]
        if rng.integers(3) == 0:  # values aclCreateIntArray cannot store: it must return None
            values: Any = [2**64] * max(n, 1) if rng.integers(2) else ["x"]
            result = _made(b, f"aclCreateIntArray({describe(values)})", lambda: aclnn.aclCreateIntArray(values))
            return result, (_refuse_null(p) if result is None else Expect.refusal(()))
        return AclIntArray.create(variants[int(rng.integers(len(variants)))]), ANYTHING
    if p.kind is Kind.FLOAT_ARRAY:
        fvariants: list[Any] = [[], [float("nan")] * max(n, 1), [float("inf")] * max(n, 1), [1e38] * (n + 1)]
        return AclFloatArray.create(fvariants[int(rng.integers(len(fvariants)))]), ANYTHING
    bvariants: list[Any] = [[], [True] * (n + 1), [False] * max(n, 1)]
    return AclBoolArray.create(bvariants[int(rng.integers(len(bvariants)))]), ANYTHING


def l_value(b: Built, p: Param, v: Any, rng: np.random.Generator) -> tuple[Any, Expect]:
    """A list handle that is empty, has one member corrupted, or repeats a member."""
    if p.kind is Kind.SCALAR_LIST:
        scalars = list(v.scalars)
        choice = int(rng.integers(3))
        if choice == 0:
            return AclScalarList.create([]), ANYTHING
        if choice == 1 and scalars:
            return AclScalarList.create([*scalars, scalars[0]]), ANYTHING
        return AclScalarList.create(
            [AclScalar.create(1 + 1j, DataType.ACL_COMPLEX128)] * max(len(scalars), 1)
        ), ANYTHING
    tensors = list(v.tensors)
    choice = int(rng.integers(4))
    if choice == 0 or not tensors:
        return AclTensorList.create([]), ANYTHING
    if choice == 1:
        return AclTensorList.create([*tensors, tensors[0]]), ANYTHING
    mutate = TENSOR_MUTATIONS[int(rng.integers(len(TENSOR_MUTATIONS)))]
    member, expect = mutate(b, p, tensors[0], rng)
    b.notes.append(f"member 0 corrupted by {mutate.__name__}")
    if isinstance(member, AclTensor) and not member.destroyed:
        return AclTensorList.create([member, *tensors[1:]]), expect
    # a null, destroyed or non-tensor member: aclCreateTensorList must refuse it (and the call gets null)
    members = [member, *tensors[1:]]
    call = f"aclCreateTensorList([{', '.join(describe(m) for m in members[:4])}])"
    result = _made(b, call, lambda: aclnn.aclCreateTensorList(members))
    return result, _refuse_null(p) if result is None else REFUSE


MUTATIONS: dict[Kind, tuple[Mutation, ...]] = {
    Kind.TENSOR: TENSOR_MUTATIONS,
    Kind.SCALAR: (h_null, wrong_kind, h_destroyed, s_value, s_value, s_create),
    Kind.INT_ARRAY: (h_null, wrong_kind, h_destroyed, a_value, a_value),
    Kind.FLOAT_ARRAY: (h_null, wrong_kind, h_destroyed, a_value),
    Kind.BOOL_ARRAY: (h_null, wrong_kind, h_destroyed, a_value),
    Kind.TENSOR_LIST: (h_null, wrong_kind, h_destroyed, l_value, l_value, l_value),
    Kind.SCALAR_LIST: (h_null, wrong_kind, h_destroyed, l_value),
    Kind.INT: (i_value,),
    Kind.FLOAT: (f_value,),
    Kind.BOOL: (b_value,),
    Kind.STRING: (str_value,),
    Kind.DTYPE: (d_value,),
}

CALL_MUTATIONS = (
    "unchanged",
    "missing-arg",
    "extra-arg",
    "unknown-keyword",
    "duplicate-keyword",
    "keywords-shuffled",
    "executor-reused",
    "executor-of-another-op",
    "null-executor",
    "destroyed-stream",
    "bogus-stream",
    "string-stream",
    "short-workspace",
    "foreign-workspace",
    "input-freed-between-phases",
)
"""Corruptions of the call itself rather than of one argument (arity, keywords, phase 2's arguments)."""


# ----------------------------------------------------------------------------- running an aclnn case
@dataclass
class Plan:
    """What an aclnn case does: an op's sample with one parameter (or the call) corrupted."""

    op: str
    sample: int
    target: str  # a parameter name, or "call"
    mutation: str


def plan_aclnn(spec: OpSpec, rng: np.random.Generator) -> tuple[str, str]:
    """(target, mutation name) for one case of ``spec``: a parameter and a mutation of its kind, or a call mutation."""
    params = list(spec.params)
    if rng.integers(len(params) + 2) >= len(params):
        return "call", CALL_MUTATIONS[int(rng.integers(len(CALL_MUTATIONS)))]
    p = params[int(rng.integers(len(params)))]
    choices = MUTATIONS[p.kind]
    return p.name, choices[int(rng.integers(len(choices)))].__name__


_BY_NAME = {m.__name__: m for ms in MUTATIONS.values() for m in ms}


def _repro(spec: OpSpec, args: list[Any], kwargs: dict[str, Any], notes: list[str]) -> str:
    shown = [describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in kwargs.items()]
    names = list(spec.param_names)
    if not kwargs and len(args) == len(names):
        shown = [f"{n}={s}" for n, s in zip(names, shown)]
    prefix = "; ".join(notes)
    call = f"aclnn{spec.name}GetWorkspaceSize({', '.join(shown)})"
    return f"{prefix}; {call}" if prefix else call


def _tensors(values: dict[str, Any]) -> list[AclTensor]:
    found: list[AclTensor] = []
    for v in values.values():
        if isinstance(v, AclTensor):
            found.append(v)
        elif isinstance(v, AclTensorList):
            found.extend(t for t in v.tensors if isinstance(t, AclTensor))
    return found


def _placeholder(built: Built, p: Param) -> Any:
    """A valid value of ``p``'s kind for an optional parameter the sample left out (so it can be corrupted)."""
    if p.kind is Kind.TENSOR:
        return place(built, np.ones(4, dtype=np.float32))
    if p.kind is Kind.TENSOR_LIST:
        return AclTensorList.create([place(built, np.ones(4, dtype=np.float32))])
    if p.kind is Kind.SCALAR:
        return AclScalar.create(1.0, DataType.ACL_FLOAT)
    if p.kind is Kind.SCALAR_LIST:
        return AclScalarList.create([AclScalar.create(1.0, DataType.ACL_FLOAT)])
    if p.kind is Kind.INT_ARRAY:
        return AclIntArray.create([1])
    if p.kind is Kind.FLOAT_ARRAY:
        return AclFloatArray.create([1.0])
    if p.kind is Kind.BOOL_ARRAY:
        return AclBoolArray.create([True])
    return None


def _written(spec: OpSpec, values: dict[str, Any]) -> list[tuple[int, int]]:
    spans = []
    for p in spec.outputs:
        v = values.get(p.name)
        members = v.tensors if isinstance(v, AclTensorList) else [v] if isinstance(v, AclTensor) else []
        for t in members:
            if isinstance(t, AclTensor) and t.numel:
                spans.append(t.byte_span())
    return spans


def run_aclnn(
    spec: OpSpec, backend: Backend, rng: np.random.Generator, seed: int, out: Outcome, limit: float
) -> Built | None:
    """Run one corrupted aclnn call of ``spec``; record the verdict in ``out``; return what to free."""
    index, sample = pick_sample(spec, rng, seed)
    target, mutation = plan_aclnn(spec, rng)
    out.mutation = f"{target}:{mutation}"
    out.notes.append(f"sample {index}")
    built = build_call(spec, sample, backend)
    args: list[Any] = [built.args[n] for n in spec.param_names]
    kwargs: dict[str, Any] = {}
    expect = ANYTHING
    try:
        if target != "call":
            p = spec.param(target)
            valid = built.args[target]
            if valid is None:
                valid = _placeholder(built, p)
                built.notes.append(f"{target} (absent in the sample) given as {describe(valid)} before corruption")
            value, expect = _BY_NAME[mutation](built, p, valid, rng)
            args[spec.param_names.index(target)] = value
        elif mutation == "unchanged":  # the valid call itself: both phases must succeed
            expect = VALID
        elif mutation == "missing-arg":
            args, expect = args[:-1], REFUSE
        elif mutation == "extra-arg":
            args, expect = [*args, None], REFUSE
        elif mutation == "unknown-keyword":
            kwargs, expect = {"notAParameter": 1}, REFUSE
        elif mutation == "duplicate-keyword":
            kwargs, expect = {spec.param_names[0]: args[0]}, REFUSE
        elif mutation == "keywords-shuffled":
            order = rng.permutation(len(args))
            kwargs = {spec.param_names[i]: args[i] for i in order}
            args = []
    except CreationEscaped as escaped:
        out.repro = "; ".join([*built.notes, escaped.call])
        verdict = Verdict.HANG if isinstance(escaped.exc, Hang) else Verdict.ESCAPED
        out.worse(verdict, "aclCreate*", 0, str(escaped))
        return built
    except CreationInternal as internal:
        out.repro = "; ".join(built.notes)
        out.worse(Verdict.INTERNAL, "aclCreate*", 0, internal.message)
        return built
    values = dict(zip(spec.param_names, args)) if not kwargs else {**dict(zip(spec.param_names, args)), **kwargs}
    out.repro = _repro(spec, args, kwargs, built.notes)
    phase1 = getattr(aclnn, f"aclnn{spec.name}GetWorkspaceSize")
    result, exc, seconds = timed(lambda: phase1(*args, **kwargs), limit)
    if _judge_exception(out, exc, seconds, limit, "phase 1"):
        return built
    size, executor, ret = result
    out.worse(
        classify_code(ret, aclnn.aclGetRecentErrMsg() if ret else "", expect),
        "phase 1",
        ret,
        aclnn.aclGetRecentErrMsg() if ret else "accepted",
    )
    if ret == 0:
        _phase2(spec, built, int(size), executor, mutation if target == "call" else "", out, limit)
    allowed = _written(spec, values) if ret == 0 else []
    for g in built.guards:
        damage = g.changed(allowed)
        if damage:
            out.worse(Verdict.CORRUPTION, "after the call", 0, damage)
            break
    return built


def _judge_exception(out: Outcome, exc: BaseException | None, seconds: float, limit: float, step: str) -> bool:
    """Record a hang or an escaped exception; True when one happened."""
    if isinstance(exc, Hang) or (exc is None and seconds > limit):
        out.worse(Verdict.HANG, step, 0, f"took {seconds:.1f} s (deadline {limit:g} s)")
        return True
    if exc is not None:
        out.worse(Verdict.ESCAPED, step, 0, f"{type(exc).__name__}: {exc}")
        return True
    return False


def _phase2(spec: OpSpec, built: Built, size: int, executor: Any, misuse: str, out: Outcome, limit: float) -> None:
    rt = built.rt
    phase2 = getattr(aclnn, f"aclnn{spec.name}")
    stream = rt.create_stream()
    workspace = rt.malloc(size) if size else 0
    if workspace:
        built.scratch.append(workspace)
    ws_size = size
    expect = ANYTHING
    stream_arg: Any = stream
    try:
        if misuse == "unchanged":
            expect = VALID
        elif misuse == "null-executor":
            executor, expect = None, REFUSE
        elif misuse == "executor-of-another-op":
            other = "Mul" if spec.name != "Mul" else "Add"
            phase2, expect = getattr(aclnn, f"aclnn{other}"), REFUSE
        elif misuse == "destroyed-stream":
            doomed = rt.create_stream()
            rt.destroy_stream(doomed)
            stream_arg, expect = doomed, REFUSE
        elif misuse == "bogus-stream":
            stream_arg, expect = 0xDEAD_BEEF, REFUSE
        elif misuse == "string-stream":
            stream_arg, expect = "stream", REFUSE
        elif misuse == "short-workspace" and size:
            ws_size, expect = size - 1, REFUSE
        elif misuse == "foreign-workspace" and size:
            host = np.zeros(size, dtype=np.uint8)
            built.arrays.append(_Keep(host))
            workspace, expect = int(host.ctypes.data), REFUSE
        elif misuse == "input-freed-between-phases":
            held = [
                g for g in built.guards for t in _tensors(built.args) if t.numel and g.base <= t.data < g.base + g.size
            ]
            if held:  # the memory behind a non-empty tensor goes away: phase 2 must notice
                held[0].free()
                built.guards.remove(held[0])
                expect = REFUSE
        call = f"aclnn{spec.name}({describe(workspace)}, {ws_size}, executor, {describe(stream_arg)})"
        out.repro += f"; {call}"
        result, exc, seconds = timed(lambda: phase2(workspace, ws_size, executor, stream_arg), limit)
        if _judge_exception(out, exc, seconds, limit, "phase 2"):
            return
        ret = int(result)
        if ret == 0 and misuse == "executor-reused":
            out.repro += f"; {call} again"
            result, exc, seconds = timed(lambda: phase2(workspace, ws_size, executor, stream_arg), limit)
            if _judge_exception(out, exc, seconds, limit, "phase 2 again"):
                return
            ret, expect = int(result), REFUSE
        message = aclnn.aclGetRecentErrMsg() if ret else "accepted"
        stage = "phase 2"
        if ret == 0:  # the queued work runs here (and can hang here); a kernel's error surfaces here, as on a GPU
            _, exc, seconds = timed(lambda: rt.synchronize_stream(stream), limit)
            if isinstance(exc, AclCoreError):
                ret, message, stage = exc.code, exc.message, "synchronize"
            elif _judge_exception(out, exc, seconds, limit, "synchronize"):
                return
        out.worse(classify_code(ret, message if ret else "", expect), stage, ret, message)
    finally:
        rt.destroy_stream(stream)


# ----------------------------------------------------------------------------- the eager path
def _np_corrupt(p: Param, value: Any, rng: np.random.Generator) -> tuple[Any, str, Expect]:
    """A corrupted NumPy-level value for ``p`` (what a Python user could pass to eager.run)."""
    if p.kind in (Kind.TENSOR, Kind.TENSOR_LIST):
        plain = p.kind is Kind.TENSOR and value is not None and not hasattr(value, "acl_to_device")
        arr = np.asarray(value) if plain else None
        variants: list[tuple[str, Any, Expect]] = [
            ("None", None, _refuse_null(p)),
            ("string", "x", REFUSE),
            ("int", 7, ANYTHING),
            # a tensor list whose tensors differ in shape is legal (Foreach ops take one): only a tensor refuses it
            ("ragged list", [[1.0, 2.0], [3.0]], REFUSE if p.kind is Kind.TENSOR else ANYTHING),
            ("object array", np.array([object()], dtype=object), REFUSE),
            ("string array", np.array(["a", "b"]), REFUSE),
        ]
        if arr is not None:
            other = _NUMPY_TYPES[int(rng.integers(len(_NUMPY_TYPES)))]
            assert other.numpy is not None
            with np.errstate(all="ignore"):
                cast = arr.astype(other.numpy)
            variants += [
                (f"as {other.short}", cast, ANYTHING),
                ("extra dim", arr[None, ...], ANYTHING),
                ("empty", np.zeros((0, *arr.shape[1:]), dtype=arr.dtype), ANYTHING),
                ("0-d", np.asarray(arr.reshape(-1)[0] if arr.size else 0, dtype=arr.dtype), ANYTHING),
                ("strided view", arr[..., ::-1] if arr.ndim else arr, ANYTHING),
            ]
        name, corrupted, expect = variants[int(rng.integers(len(variants)))]
        return corrupted, name, expect
    if p.kind is Kind.SCALAR:
        scalar_variants: list[tuple[str, Any, Expect]] = [
            ("None", None, _refuse_null(p)),
            ("complex", 1 + 2j, ANYTHING),
            ("nan", float("nan"), ANYTHING),
            ("2**64", 2**64, REFUSE),
            ("string", "1", REFUSE),
            ("bad dtype pair", (1.0, 9999), REFUSE),
            ("array", np.ones(3), REFUSE),
        ]
        name, corrupted, expect = scalar_variants[int(rng.integers(len(scalar_variants)))]
        return corrupted, name, expect
    pools: dict[Kind, tuple[Any, ...]] = {
        Kind.INT: INT_VALUES,
        Kind.FLOAT: FLOAT_VALUES,
        Kind.BOOL: BOOL_VALUES,
        Kind.STRING: STRING_VALUES,
        Kind.DTYPE: DTYPE_VALUES,
    }
    if p.kind in pools:
        pool = pools[p.kind]
        corrupted = pool[int(rng.integers(len(pool)))]
        checker = {
            Kind.INT: i_value,
            Kind.FLOAT: f_value,
            Kind.BOOL: b_value,
            Kind.STRING: str_value,
            Kind.DTYPE: d_value,
        }
        expect = _expect_for_value(checker[p.kind], p, corrupted)
        return corrupted, repr(corrupted)[:40], expect
    array_variants: list[tuple[str, Any, Expect]] = [
        ("None", None, _refuse_null(p)),
        ("empty", [], ANYTHING),
        ("strings", ["a"], REFUSE),
        ("2**64", [2**64], REFUSE if p.kind is Kind.INT_ARRAY else ANYTHING),
        ("nested", [[1, 2]], REFUSE),
    ]
    name, corrupted, expect = array_variants[int(rng.integers(len(array_variants)))]
    return corrupted, name, expect


def _expect_for_value(fn: Mutation, p: Param, value: Any) -> Expect:
    class _Fixed:
        def integers(self, n: int) -> int:
            return next(i for i, v in enumerate(pool) if v is value)  # by identity: 2**64 == np.int64 overflows

    pool = {
        i_value: INT_VALUES,
        f_value: FLOAT_VALUES,
        b_value: BOOL_VALUES,
        str_value: STRING_VALUES,
        d_value: DTYPE_VALUES,
    }[fn]
    _, expect = fn(None, p, None, _Fixed())  # type: ignore[arg-type]
    return expect


def run_eager(spec: OpSpec, backend: Backend, rng: np.random.Generator, seed: int, out: Outcome, limit: float) -> None:
    """Run ``eager.run(guard=True)`` on one corrupted NumPy-level argument of a sample of ``spec``."""
    index, sample = pick_sample(spec, rng, seed)
    args = dict(sample.args)
    params = [p for p in spec.params if p.role is not Role.OUT]
    if rng.integers(len(params) + 1) == len(params) or not params:
        args["notAParameter"] = 1
        out.mutation, expect = "unknown-keyword", REFUSE
    else:
        p = params[int(rng.integers(len(params)))]
        value, name, expect = _np_corrupt(p, args.get(p.name, p.default), rng)
        args[p.name] = value
        out.mutation = f"{p.name}:{name}"
    out.notes.append(f"sample {index}")
    shown = ", ".join(f"{k}={describe(v)}" for k, v in args.items())
    out.repro = f"eager.run({spec.name!r}, guard=True, op_args={{{shown}}})"
    _result, exc, seconds = timed(lambda: eager.run(spec.name, backend, op_args=args, guard=True), limit)
    if isinstance(exc, eager.OutOfBoundsWrite):
        out.worse(Verdict.CORRUPTION, "eager.run", 0, str(exc))
    elif isinstance(exc, AclCoreError):
        code, message = code_of(exc)
        out.worse(classify_code(code, message, expect), "eager.run", code, message)
    elif not _judge_exception(out, exc, seconds, limit, "eager.run"):
        out.worse(classify_code(0, "", expect), "eager.run", 0, "accepted")
