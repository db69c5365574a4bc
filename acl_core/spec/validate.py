"""The one validator every operator call passes before any backend sees it.

Order of checks, as CANN reports them: null required arguments (161001), argument kinds, destroyed
handles, element types, formats and ranks, attribute ranges, device memory behind tensors (161002),
then the op's own rule (``OpSpec.infer``), then output shapes and dtypes, then forbidden overlap of
outputs with other arguments (161002).
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from acl_core.dtypes import DataType
from acl_core.errors import AclError
from acl_core.formats import PLAIN_FORMATS
from acl_core.spec import plan as plan_schema
from acl_core.spec.opspec import Call, Kind, OpSpec, OutInfo, Param, Role, invalid, nullptr
from acl_core.spec.promotion import can_cast
from acl_core.tensor import (
    INT64_MAX,
    AclBoolArray,
    AclFloatArray,
    AclIntArray,
    AclScalar,
    AclScalarList,
    AclTensor,
    AclTensorList,
    Handle,
)

if TYPE_CHECKING:
    from acl_core.runtime import Runtime

_HANDLE_TYPES: dict[Kind, type[Handle]] = {
    Kind.TENSOR: AclTensor,
    Kind.TENSOR_LIST: AclTensorList,
    Kind.SCALAR: AclScalar,
    Kind.SCALAR_LIST: AclScalarList,
    Kind.INT_ARRAY: AclIntArray,
    Kind.FLOAT_ARRAY: AclFloatArray,
    Kind.BOOL_ARRAY: AclBoolArray,
}


def bind(spec: OpSpec, args: Sequence[Any], kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Map positional (official order) and keyword arguments to parameter names.

    A call C could not have compiled (too many or too few arguments, an unknown or repeated
    keyword) is a parameter error, 161002 naming what is wrong, not a defect of the library.
    """
    if not kwargs and len(args) == len(spec.params):
        return dict(zip(spec.param_names, args))
    kwargs = dict(kwargs or {})
    what = f"aclnn{spec.name}GetWorkspaceSize"
    if len(args) > len(spec.params):
        raise invalid(f"{what} takes {len(spec.params)} arguments, got {len(args)}")
    bound = {p.name: v for p, v in zip(spec.params, args)}
    for name, value in kwargs.items():
        if name in bound:
            raise invalid(f"{what} got {name!r} twice")
        if name not in spec.param_names:
            raise invalid(f"{what} has no parameter {name!r}; its parameters are {', '.join(spec.param_names)}")
        bound[name] = value
    missing = [p.name for p in spec.params if p.name not in bound]
    if missing:
        raise invalid(f"{what} is missing {', '.join(missing)}")
    return bound


def bind_values(spec: OpSpec, args: Sequence[Any], kwargs: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """The arguments in official order, as :func:`bind` maps them (161002 on misuse)."""
    names = spec.param_names
    if kwargs:
        rest = names[len(args) :]
        if len(kwargs) == len(rest):
            try:  # the common keyword form: every remaining parameter named once, no dict built
                return (*args, *[kwargs[n] for n in rest])
            except KeyError:
                pass
    elif len(args) == len(names):
        return tuple(args)
    bound = bind(spec, args, kwargs)
    return tuple([bound[n] for n in names])


def _is_null(value: Any) -> bool:
    return value is None or (type(value) is int and value == 0)


_C_INT_RANGES = {
    "int8_t": (-(2**7), 2**7 - 1),
    "int16_t": (-(2**15), 2**15 - 1),
    "int32_t": (-(2**31), 2**31 - 1),
    "int": (-(2**31), 2**31 - 1),
    "int64_t": (-(2**63), 2**63 - 1),
    "uint8_t": (0, 2**8 - 1),
    "uint16_t": (0, 2**16 - 1),
    "uint32_t": (0, 2**32 - 1),
    "uint64_t": (0, 2**64 - 1),
}
"""The values each C integer type of an attribute can carry."""


def c_int_range(c_type: str) -> tuple[int, int]:
    """[lo, hi] of the C integer type ``c_type`` (``const`` ignored); KeyError for a type not listed."""
    return _C_INT_RANGES[c_type.removeprefix("const ").strip()]


def _normalise(param: Param, value: Any) -> Any:
    """Check the Python type of one argument and return it in canonical form."""
    kind = param.kind
    if kind in _HANDLE_TYPES:
        if not isinstance(value, _HANDLE_TYPES[kind]):
            raise invalid(f"{param.name} must be an {kind.value}, not {type(value).__name__}")
        handle: Handle = value
        handle.check_alive(param.name)
        return handle
    if kind is Kind.INT:
        try:
            number = operator.index(value)
        except TypeError:
            raise invalid(f"{param.name} must be an integer, not {type(value).__name__}") from None
        lo, hi = c_int_range(param.c_type)
        if not lo <= number <= hi:
            raise invalid(f"{param.name}={number} does not fit {param.c_type} (range [{lo}, {hi}])")
        return int(number)
    if kind is Kind.FLOAT:
        if isinstance(value, (str, bytes)) or (
            isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real)
        ):
            raise invalid(f"{param.name} must be a real number, not {type(value).__name__}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise invalid(f"{param.name} must be a real number, not {type(value).__name__}") from None
        except OverflowError:
            raise invalid(f"{param.name}={value} does not fit {param.c_type}") from None
    if kind is Kind.BOOL:
        if isinstance(value, (bool, int)) or type(value).__name__ == "bool_":
            return bool(value)
        raise invalid(f"{param.name} must be a bool, not {type(value).__name__}")
    if kind is Kind.STRING:
        if isinstance(value, bytes):
            try:
                value = value.decode()
            except UnicodeDecodeError:
                raise invalid(f"{param.name} is not a UTF-8 string") from None
        if not isinstance(value, str):
            raise invalid(f"{param.name} must be a string, not {type(value).__name__}")
        return value
    if kind is Kind.DTYPE:
        try:
            return DataType(operator.index(value))
        except (TypeError, ValueError):
            raise invalid(f"{param.name}: {value!r} is not an aclDataType") from None
    raise AssertionError(kind)


def _tensors(param: Param, value: Any) -> Iterator[tuple[str, AclTensor]]:
    if isinstance(value, AclTensor):
        yield param.name, value
    elif isinstance(value, AclTensorList):
        for i, t in enumerate(value.tensors):
            yield f"{param.name}[{i}]", t


def _check_tensor(param: Param, label: str, t: AclTensor, runtime: Runtime | None) -> None:
    t.check_alive(label)
    if param.dtypes is not None and t.dtype not in param.dtypes:
        allowed = ", ".join(sorted(d.short for d in param.dtypes))
        raise invalid(f"{label} has dtype {t.dtype.short}; supported: {allowed}")
    formats = param.formats if param.formats is not None else PLAIN_FORMATS
    if t.format not in formats:
        raise invalid(f"{label} has format {t.format.name}, which this operator does not accept")
    if param.max_rank is not None and t.rank > param.max_rank:
        raise invalid(f"{label} has rank {t.rank}; at most {param.max_rank} is supported")
    if t.rank < param.min_rank:
        raise invalid(f"{label} has rank {t.rank}; at least {param.min_rank} is required")
    numel = t.numel
    if numel == 0:
        return
    if numel > INT64_MAX:
        raise invalid(
            f"{label} has {numel} elements (view dims {list(t.view_dims)}); an int64_t counts at most {INT64_MAX}"
        )
    if not t.data:
        raise nullptr(f"{label} has a null data address")
    if runtime is not None:
        start, end = t.byte_span()
        try:
            runtime.device_range(start, end - start, f"{label} data")
        except AclError as exc:
            raise invalid(exc.message) from None
    if param.writes and numel > 1 and t.overlaps_itself:
        raise invalid(
            f"{label} is written, but elements of its view share storage (view dims {list(t.view_dims)}, "
            f"strides {list(t.strides)}): each written element needs its own location"
        )


def _check_attr(param: Param, value: Any) -> None:
    if param.choices is not None and value not in param.choices:
        raise invalid(f"{param.name}={value!r} is not supported; expected one of {list(param.choices)}")
    if param.bounds is not None:
        lo, hi = param.bounds
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise invalid(f"{param.name}={value!r} is outside [{lo}, {hi}]")
    if param.kind is Kind.DTYPE and param.dtypes is not None and value not in param.dtypes:
        raise invalid(f"{param.name}={DataType(value).name} is not supported")


def _same_view(a: AclTensor, b: AclTensor) -> bool:
    return (a.data, a.offset, a.view_dims, a.strides, a.dtype) == (b.data, b.offset, b.view_dims, b.strides, b.dtype)


def _overlaps(a: AclTensor, b: AclTensor) -> bool:
    a0, a1 = a.byte_span()
    b0, b1 = b.byte_span()
    return a0 < b1 and b0 < a1


def check_out(param: Param, t: AclTensor, info: OutInfo, label: str) -> None:
    """Refuse (161002) output ``t`` when its shape or dtype does not match the output rule's ``info``."""
    if tuple(t.view_dims) != tuple(info.shape):
        raise invalid(f"{label} has shape {list(t.view_dims)}; expected {list(info.shape)}")
    if info.dtype_rule == "same" and t.dtype != info.dtype:
        raise invalid(f"{label} has dtype {t.dtype.short}; expected {info.dtype.short}")
    if info.dtype_rule == "castable" and not can_cast(info.dtype, t.dtype):
        raise invalid(f"{label} has dtype {t.dtype.short}, which the result dtype {info.dtype.short} cannot be cast to")


def check_inputs(spec: OpSpec, args: dict[str, Any], runtime: Runtime | None, *, outputs_required: bool = True) -> Call:
    """Validate everything but the outputs and run the op's rule; ``call.plan["outputs"]`` holds its answer."""
    canon: dict[str, Any] = {}
    for p in spec.params:
        value = args.get(p.name)
        if _is_null(value) and p.kind.is_handle:
            if not p.optional and (outputs_required or p.role is not Role.OUT):
                raise nullptr(f"{p.name} is null")
            canon[p.name] = None
            continue
        if value is None:
            raise invalid(f"{p.name} is passed by value and cannot be None")
        canon[p.name] = _normalise(p, value)
    for p in spec.params:
        value = canon[p.name]
        if value is None:
            continue
        if p.kind in (Kind.TENSOR, Kind.TENSOR_LIST):
            for label, t in _tensors(p, value):
                _check_tensor(p, label, t, runtime)
        elif p.kind is Kind.SCALAR and p.dtypes is not None and value.dtype not in p.dtypes:
            raise invalid(f"{p.name} has dtype {value.dtype.short}, which this operator does not accept")
        elif p.kind in (Kind.INT, Kind.FLOAT, Kind.BOOL, Kind.STRING, Kind.DTYPE):
            _check_attr(p, value)
    call = Call(spec, canon, outputs_required=outputs_required)
    infos = spec.infer(call)
    call.plan["outputs"] = infos
    if plan_schema.CHECKING:  # a debug check (tests): every key the rule wrote is declared, with its type
        plan_schema.check_plan(spec.name, call.plan)
    _check_complex_scalars(spec, canon, infos)
    return call


def _is_complex_info(info: Any) -> bool:
    if isinstance(info, list):
        return any(_is_complex_info(i) for i in info)
    return isinstance(info, OutInfo) and info.dtype.is_complex


def _check_complex_scalars(spec: OpSpec, canon: dict[str, Any], infos: Any) -> None:
    """Refuse a complex aclScalar in a call where nothing is complex: no real tensor can hold its value."""
    complex_scalars = [
        (p.name, s)
        for p in spec.params
        if p.kind in (Kind.SCALAR, Kind.SCALAR_LIST) and canon[p.name] is not None
        for s in (canon[p.name].scalars if p.kind is Kind.SCALAR_LIST else (canon[p.name],))
        if s.dtype.is_complex
    ]
    if not complex_scalars:
        return
    for p in spec.params:
        value = canon[p.name]
        if value is not None and any(t.dtype.is_complex for _, t in _tensors(p, value)):
            return
    if any(_is_complex_info(i) for i in infos.values()):
        return
    name, s = complex_scalars[0]
    raise invalid(
        f"{name} is a complex scalar ({s.dtype.short}), but every tensor of this call is real: "
        "a complex value needs a complex computation"
    )


def validate(spec: OpSpec, args: dict[str, Any], runtime: Runtime | None) -> Call:
    """Run every check on one call; raise :class:`AclnnError` with CANN's code on the first failure."""
    call = check_inputs(spec, args, runtime)
    canon, infos = call.args, call.plan["outputs"]
    for p in spec.outputs:
        value = canon[p.name]
        info = infos.get(p.name)
        if value is None or info is None:
            continue
        if isinstance(value, AclTensorList):
            if not isinstance(info, list) or len(info) != len(value):
                expected = len(info) if isinstance(info, list) else 1
                raise invalid(f"{p.name} holds {len(value)} tensors; expected {expected}")
            for i, (t, inf) in enumerate(zip(value.tensors, info)):
                check_out(p, t, inf, f"{p.name}[{i}]")
        else:
            assert isinstance(info, OutInfo)
            check_out(p, value, info, p.name)
    _check_overlap(spec, canon)
    return call


def _check_overlap(spec: OpSpec, canon: dict[str, Any]) -> None:
    written = [
        (lbl, t, p)
        for p in spec.params
        if p.writes and canon[p.name] is not None
        for lbl, t in _tensors(p, canon[p.name])
    ]
    every = [(lbl, t, p) for p in spec.params if canon[p.name] is not None for lbl, t in _tensors(p, canon[p.name])]
    for wl, w, wp in written:
        for ol, o, op in every:
            if ol == wl or o.numel == 0 or w.numel == 0:
                continue
            if not _overlaps(w, o):
                continue
            if spec.alias_ok and op.role is not Role.OUT and _same_view(w, o):
                continue
            if wp.role is Role.INOUT and op.role is Role.OUT and _same_view(w, o):
                continue
            raise invalid(f"{wl} overlaps {ol} in device memory, which this operator does not allow")


_PLAIN = (int, float, bool, str)


def signature(spec: OpSpec, args: dict[str, Any]) -> tuple[object, ...] | None:
    """A hashable key of everything validation depends on, or None when an argument defies one.

    Two calls with equal signatures under the same memory-map generation validate identically, so
    phase 1 can reuse the first one's result (DESIGN.md §4.2: launch metadata cached per signature).
    """
    return signature_of(spec, tuple([args.get(n) for n in spec.param_names]))


def signature_of(spec: OpSpec, values: Sequence[Any], scope: object = None) -> tuple[object, ...] | None:
    """:func:`signature` of the arguments in official order, led by ``scope``; None also for a destroyed handle.

    Each argument adds entries whose first one tells its kind (an int: a tensor's layout id, then its
    address; None; the AclScalar class, then dtype and value; a tuple for the rest), so the flat key
    of one operator's argument list never equals that of another list. A destroyed handle gets no
    key: the caller then validates, which names it.
    """
    parts: list[object] = [scope, spec.name]
    append = parts.append
    for v in values:
        kind = type(v)
        if kind is AclTensor:
            if v.destroyed:
                return None
            append(v.layout_id)
            append(v.data)
        elif kind is AclScalar:
            if v.destroyed:
                return None
            append(AclScalar)
            append(int(v.dtype))  # a plain int: an IntEnum member hashes in Python, an int in C
            append(v.value)
        elif v is None:
            append(None)
        elif kind in _PLAIN:
            append((kind, v))
        elif kind is AclTensorList:
            if v.destroyed:
                return None
            for t in v.tensors:
                if t.destroyed:
                    return None
            append(tuple([(t.layout_id, t.data) for t in v.tensors]))
        elif kind is AclIntArray or kind is AclFloatArray or kind is AclBoolArray:
            if v.destroyed:
                return None
            append((kind, v.values))
        elif kind is AclScalarList:
            if v.destroyed:
                return None
            for sc in v.scalars:
                if sc.destroyed:
                    return None
            append((kind, tuple([(int(sc.dtype), sc.value) for sc in v.scalars])))
        else:
            return None
    return tuple(parts)


Signer = Callable[[Sequence[Any], object], "tuple[object, ...] | None"]
_SIGNERS: dict[str, tuple[OpSpec, Signer]] = {}
_GUARDS = {Kind.TENSOR: "type({a}) is T and not {a}.destroyed", Kind.SCALAR: "type({a}) is S and not {a}.destroyed"}
_PARTS = {Kind.TENSOR: "{a}.layout_id, {a}.data", Kind.SCALAR: "S, int({a}.dtype), {a}.value"}
_PLAIN_KINDS = (Kind.INT, Kind.FLOAT, Kind.BOOL, Kind.STRING, Kind.DTYPE)


def signer(spec: OpSpec) -> Signer:
    """``spec``'s :func:`signature_of`, specialised for its parameter kinds (the phase-1 hot path).

    When every argument is of the kind its parameter declares (a live aclTensor, a live aclScalar, a
    plain int/float/bool/str) one generated expression builds the key; anything else (None for an
    optional tensor, lists, arrays, a destroyed handle) goes to :func:`signature_of`, whose key the
    expression equals entry for entry.
    """
    found = _SIGNERS.get(spec.name)
    if found is not None and found[0] is spec:
        return found[1]
    fn = _make_signer(spec)
    _SIGNERS[spec.name] = (spec, fn)
    return fn


def _make_signer(spec: OpSpec) -> Signer:
    kinds = [p.kind for p in spec.params]
    if not kinds or any(k not in _GUARDS and k not in _PLAIN_KINDS for k in kinds):
        return lambda values, scope: signature_of(spec, values, scope)
    names = [f"a{i}" for i in range(len(kinds))]
    guards = [_GUARDS.get(k, "type({a}) in P").format(a=a) for k, a in zip(kinds, names)]
    parts = [_PARTS.get(k, "(type({a}), {a})").format(a=a) for k, a in zip(kinds, names)]
    # only generated identifiers reach the source; the operator's name and classes come in through the namespace
    source = (
        "def signed(values, scope):\n"
        f"    {', '.join(names)}, = values\n"
        f"    if {' and '.join(guards)}:\n"
        f"        return (scope, NAME, {', '.join(parts)})\n"
        "    return generic(spec, values, scope)\n"
    )
    namespace: dict[str, Any] = {
        "T": AclTensor,
        "S": AclScalar,
        "P": _PLAIN,
        "NAME": spec.name,
        "generic": signature_of,
        "spec": spec,
    }
    exec(source, namespace)
    fn: Signer = namespace["signed"]
    return fn
