"""How an aclnn operator is declared: its parameters in official order, rules, and conformance cases.

An :class:`OpSpec` is data. Its ``infer`` function validates the inputs and attributes of one call and
returns the shape and default dtype of each output; the shared validator
(:mod:`acl_core.spec.validate`) does every generic check (null arguments, kinds, dtypes, formats,
ranks, attribute ranges, device memory, output shapes and dtypes, aliasing) before and after it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

import numpy as np

from acl_core.dtypes import DataType
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.formats import Format
from acl_core.spec.accuracy import Accuracy


class Kind(str, Enum):
    """What a parameter carries across the C boundary."""

    TENSOR = "aclTensor*"
    TENSOR_LIST = "aclTensorList*"
    SCALAR = "aclScalar*"
    SCALAR_LIST = "aclScalarList*"
    INT_ARRAY = "aclIntArray*"
    FLOAT_ARRAY = "aclFloatArray*"
    BOOL_ARRAY = "aclBoolArray*"
    INT = "int"
    FLOAT = "double"
    BOOL = "bool"
    STRING = "char*"
    DTYPE = "aclDataType"

    @property
    def is_handle(self) -> bool:
        """True for the pointer kinds (those that may be null)."""
        return self in _HANDLE_KINDS


_HANDLE_KINDS = frozenset(
    {
        Kind.TENSOR,
        Kind.TENSOR_LIST,
        Kind.SCALAR,
        Kind.SCALAR_LIST,
        Kind.INT_ARRAY,
        Kind.FLOAT_ARRAY,
        Kind.BOOL_ARRAY,
        Kind.STRING,
    }
)


class Role(str, Enum):
    """Whether the operator reads, writes, or reads and writes a parameter."""

    IN = "in"
    OUT = "out"
    INOUT = "inout"


@dataclass(frozen=True)
class IndexOf:
    """Marks a tensor parameter whose values are positions along one dimension of another tensor.

    Only a kernel sees those values (they live in device memory), so the conformance suite generates
    the out-of-range cases from this mark: ``of`` names the indexed tensor, ``dim`` the int attribute
    choosing its dimension (None: dimension 0), ``negative`` whether negative values count from the end
    (``"wrap"``, accepted down to ``-size``), are refused (``"refuse"``) or whether -1 alone is accepted
    as a padding entry that the kernel skips (``"pad"``: paged-cache slot mappings). ``span`` counts
    the positions over that many dimensions from ``dim`` on, flattened (a slot of a
    ``[num_blocks, block_size, ...]`` cache: ``span=2``). ``each`` marks a tensor list whose entry
    ``i`` indexes dimension ``i`` of ``of`` (advanced indexing: Index, IndexPutImpl; bool entries are
    masks, not positions).
    """

    of: str
    dim: str | None = None
    negative: str = "refuse"
    each: bool = False
    span: int = 1
    axis: int = 0
    """The indexed dimension when ``dim`` is None (the class axis 1 of a loss's ``[N, C, ...]`` input)."""


@dataclass(frozen=True)
class Param:
    """One official parameter of ``aclnnXxxGetWorkspaceSize`` (workspaceSize and executor excluded)."""

    name: str
    kind: Kind
    c_type: str
    role: Role = Role.IN
    optional: bool = False
    dtypes: frozenset[DataType] | None = None
    formats: frozenset[Format] | None = None
    max_rank: int | None = None
    min_rank: int = 0
    choices: tuple[Any, ...] | None = None
    bounds: tuple[float | None, float | None] | None = None
    default: Any = None
    index_of: IndexOf | None = None
    group_list_type: str | None = None
    """For a group-list tensor: the int attribute saying its layout (0 cumulative ends, 1 per-group counts)."""

    @property
    def writes(self) -> bool:
        """True for outputs and in-out (``...Ref``) parameters."""
        return self.role is not Role.IN


# ----------------------------------------------------------------------------- parameter builders
def tensor(
    name: str,
    dtypes: Iterable[DataType] | None = None,
    *,
    optional: bool = False,
    formats: Iterable[Format] | None = None,
    max_rank: int | None = 8,
    min_rank: int = 0,
    c_type: str = "const aclTensor*",
    index_of: IndexOf | None = None,
    group_list_type: str | None = None,
) -> Param:
    """An input tensor (``index_of``: its values are positions; ``group_list_type``: it is a group list)."""
    return Param(
        name,
        Kind.TENSOR,
        c_type,
        Role.IN,
        optional,
        _fs(dtypes),
        _fs(formats),
        max_rank,
        min_rank,
        index_of=index_of,
        group_list_type=group_list_type,
    )


def out(
    name: str,
    dtypes: Iterable[DataType] | None = None,
    *,
    optional: bool = False,
    formats: Iterable[Format] | None = None,
    max_rank: int | None = 8,
    c_type: str = "aclTensor*",
) -> Param:
    """An output tensor (pre-allocated by the caller)."""
    return Param(name, Kind.TENSOR, c_type, Role.OUT, optional, _fs(dtypes), _fs(formats), max_rank)


def ref(
    name: str,
    dtypes: Iterable[DataType] | None = None,
    *,
    formats: Iterable[Format] | None = None,
    max_rank: int | None = 8,
    c_type: str = "aclTensor*",
) -> Param:
    """An in-out tensor (``selfRef``): read and written in place."""
    return Param(name, Kind.TENSOR, c_type, Role.INOUT, False, _fs(dtypes), _fs(formats), max_rank)


def tensor_list(
    name: str,
    dtypes: Iterable[DataType] | None = None,
    *,
    role: Role = Role.IN,
    optional: bool = False,
    c_type: str | None = None,
    index_of: IndexOf | None = None,
) -> Param:
    """A tensor list (input, or output when ``role`` is OUT; ``index_of``: its entries are positions)."""
    default_c = "const aclTensorList*" if role is Role.IN else "aclTensorList*"
    return replace(Param(name, Kind.TENSOR_LIST, c_type or default_c, role, optional, _fs(dtypes)), index_of=index_of)


def scalar(
    name: str, dtypes: Iterable[DataType] | None = None, *, optional: bool = False, c_type: str = "const aclScalar*"
) -> Param:
    """A host scalar (aclScalar)."""
    return Param(name, Kind.SCALAR, c_type, Role.IN, optional, _fs(dtypes))


def scalar_list(name: str, *, optional: bool = False, c_type: str = "const aclScalarList*") -> Param:
    """A host scalar list."""
    return Param(name, Kind.SCALAR_LIST, c_type, Role.IN, optional)


def int_array(name: str, *, optional: bool = False, c_type: str = "const aclIntArray*") -> Param:
    """A host int64 array."""
    return Param(name, Kind.INT_ARRAY, c_type, Role.IN, optional)


def float_array(name: str, *, optional: bool = False, c_type: str = "const aclFloatArray*") -> Param:
    """A host float array."""
    return Param(name, Kind.FLOAT_ARRAY, c_type, Role.IN, optional)


def bool_array(name: str, *, optional: bool = False, c_type: str = "const aclBoolArray*") -> Param:
    """A host bool array."""
    return Param(name, Kind.BOOL_ARRAY, c_type, Role.IN, optional)


def int_attr(
    name: str,
    *,
    c_type: str = "int64_t",
    choices: Iterable[int] | None = None,
    bounds: tuple[float | None, float | None] | None = None,
    default: int | None = None,
) -> Param:
    """An integer attribute passed by value."""
    return Param(name, Kind.INT, c_type, choices=_tup(choices), bounds=bounds, default=default)


def float_attr(
    name: str,
    *,
    c_type: str = "double",
    bounds: tuple[float | None, float | None] | None = None,
    default: float | None = None,
) -> Param:
    """A floating attribute passed by value."""
    return Param(name, Kind.FLOAT, c_type, bounds=bounds, default=default)


def bool_attr(name: str, *, default: bool | None = None, c_type: str = "bool") -> Param:
    """A bool attribute."""
    return Param(name, Kind.BOOL, c_type, default=default)


def string_attr(
    name: str,
    *,
    choices: Iterable[str] | None = None,
    optional: bool = False,
    default: str | None = None,
    c_type: str = "char*",
) -> Param:
    """A ``char*`` attribute (layouts, modes, group names)."""
    return Param(name, Kind.STRING, c_type, optional=optional, choices=_tup(choices), default=default)


def dtype_attr(name: str, *, dtypes: Iterable[DataType] | None = None, c_type: str = "aclDataType") -> Param:
    """An aclDataType attribute passed by value."""
    return Param(name, Kind.DTYPE, c_type, dtypes=_fs(dtypes))


def _fs(items: Iterable[Any] | None) -> frozenset[Any] | None:
    return None if items is None else frozenset(items)


def _tup(items: Iterable[Any] | None) -> tuple[Any, ...] | None:
    return None if items is None else tuple(items)


# ----------------------------------------------------------------------------- calls and outputs
Shape = tuple[int, ...]


@dataclass(frozen=True)
class OutInfo:
    """The output rule's answer for one output: its shape and default dtype.

    ``dtype_rule`` says which out dtypes validation accepts: ``"same"`` (exactly ``dtype``),
    ``"castable"`` (any dtype that ``dtype`` can be cast to, torch's rule) or ``"listed"`` (any dtype
    in the parameter's declared set).
    """

    shape: Shape
    dtype: DataType
    dtype_rule: str = "same"


@dataclass
class Call:
    """One operator call being validated: arguments by official name, and what checks derived."""

    spec: OpSpec
    args: dict[str, Any]
    plan: dict[str, Any] = field(default_factory=dict)
    memo: dict[str, Any] = field(default_factory=dict)
    """Backend-private launch metadata, kept as long as this validated signature is (DESIGN.md §4.2)."""
    outputs_required: bool = True
    """False in the Pythonic layer's first pass, whose outputs are not allocated yet (a null one is no error)."""

    def __getitem__(self, name: str) -> Any:
        return self.args[name]


Infos = Mapping[str, "OutInfo | list[OutInfo] | None"]
"""What an operator's output rule returns: each output's OutInfo (a list for tensor-list outputs)."""
InferFn = Callable[[Call], Infos]
WorkspaceFn = Callable[[Call], int]


@dataclass(frozen=True)
class Sample:
    """One conformance case: NumPy values for tensors, Python values for everything else.

    Missing output arguments are allocated from the output rule. ``note`` names the case in reports.
    """

    args: dict[str, Any]
    note: str = ""
    tolerance: tuple[float, float] | None = None


@dataclass(frozen=True)
class ErrorSample:
    """A call that must fail with ``code`` on every backend."""

    args: dict[str, Any]
    code: int
    note: str


SampleFn = Callable[[np.random.Generator], Iterable[Sample]]
ErrorSampleFn = Callable[[np.random.Generator], Iterable[ErrorSample]]
SampleGen = SampleFn
ErrorGen = ErrorSampleFn

NULLPTR = int(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR)
"""161001, for error samples."""
INVALID = int(AclnnStatus.ACLNN_ERR_PARAM_INVALID)
"""161002, for error samples."""
TILING = int(AclnnStatus.ACLNN_ERR_INNER_TILING_ERROR)
"""561002: the code CANN's docs give for some ops' shape-relationship errors."""


def _no_workspace(call: Call) -> int:
    return 0


@dataclass(frozen=True)
class OpSpec:
    """One aclnn operator, declared once.

    ``name`` has no ``aclnn`` prefix. ``infer`` validates inputs and attributes (raising
    :class:`AclnnError`) and returns each output's :class:`OutInfo`; it also stores what kernels need
    in ``call.plan``. ``alias_ok`` names outputs that may be the very same view as an input
    (elementwise ops computing in place); any other overlap between an output and another argument
    is refused. ``base`` is set on generated in-place twins: the twin's call is turned into a call of
    the base op, whose kernel does the work. ``accuracy`` is the op's accuracy class
    (:mod:`acl_core.spec.accuracy`); None takes the base's or the family's default. ``writeback`` names
    outputs whose real size the op writes back into their view shape.
    """

    name: str
    family: str
    params: tuple[Param, ...]
    infer: InferFn
    workspace: WorkspaceFn = _no_workspace
    alias_ok: bool = False
    samples: SampleFn | None = None
    error_samples: ErrorSampleFn | None = None
    base: str | None = None
    base_args: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    summary: str = ""
    accuracy: Accuracy | None = None
    writeback: tuple[str, ...] = ()
    """Outputs whose view shape the op writes back at completion (the caller allocates the maximal size;
    :mod:`acl_core.runtime.view_writeback`). Such an op refuses stream capture."""

    @functools.cached_property
    def param_names(self) -> tuple[str, ...]:
        """Official parameter names in order."""
        return tuple(p.name for p in self.params)

    @property
    def inputs(self) -> tuple[Param, ...]:
        """Parameters the operator reads (in-out included)."""
        return tuple(p for p in self.params if p.role is not Role.OUT)

    @property
    def outputs(self) -> tuple[Param, ...]:
        """Parameters the operator writes."""
        return tuple(p for p in self.params if p.writes)

    def param(self, name: str) -> Param:
        """The parameter called ``name``."""
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"{self.name} has no parameter {name!r}")

    @property
    def kernel_name(self) -> str:
        """The operator whose kernel runs this spec (itself, or the base of an in-place twin)."""
        return self.base or self.name


def inplace_twin(
    base: OpSpec,
    name: str | None = None,
    *,
    self_name: str = "self",
    ref_name: str = "selfRef",
    out_name: str = "out",
    samples: SampleFn | None = None,
) -> OpSpec:
    """The ``aclnnInplaceXxx`` twin of a base op: ``self`` becomes ``selfRef`` and ``out`` disappears."""
    params: list[Param] = []
    for p in base.params:
        if p.name == out_name:
            continue
        if p.name == self_name:
            params.append(replace(p, name=ref_name, role=Role.INOUT, c_type="aclTensor*", optional=False))
        elif p.index_of is not None and p.index_of.of == self_name:  # an index into self indexes selfRef
            params.append(replace(p, index_of=replace(p.index_of, of=ref_name)))
        else:
            params.append(p)

    def to_base(args: dict[str, Any]) -> dict[str, Any]:
        mapped = {k: v for k, v in args.items() if k != ref_name}
        mapped[self_name] = args[ref_name]
        mapped[out_name] = args[ref_name]
        return mapped

    def infer(call: Call) -> Mapping[str, OutInfo | list[OutInfo] | None]:
        base_call = Call(base, to_base(call.args))
        infos = base.infer(base_call)
        call.plan.update(base_call.plan)
        info = infos[out_name]
        assert isinstance(info, OutInfo)
        return {ref_name: OutInfo(info.shape, info.dtype, "castable" if info.dtype_rule != "same" else "same")}

    def twin_samples(rng: np.random.Generator) -> Iterable[Sample]:
        for s in base.samples(rng) if base.samples else ():
            arrays = [v for v in s.args.values() if isinstance(v, np.ndarray)]
            target = s.args.get(self_name)
            if not isinstance(target, np.ndarray) or target.dtype.kind not in "fV":
                continue  # an in-place result must fit selfRef's dtype; float targets always can
            if np.broadcast_shapes(*(a.shape for a in arrays)) == target.shape:
                args = {k: v for k, v in s.args.items() if k not in (self_name, out_name)}
                args[ref_name] = s.args[self_name]
                yield replace(s, args=args)

    return OpSpec(
        name=name or f"Inplace{base.name}",
        family=base.family,
        params=tuple(params),
        infer=infer,
        workspace=base.workspace,
        alias_ok=True,
        samples=samples or twin_samples,
        base=base.name,
        base_args=to_base,
        summary=f"in-place {base.name}: {ref_name} is both input and output",
    )


# ----------------------------------------------------------------------------- errors for rules
def invalid(message: str) -> AclnnError:
    """A 161002 error (dtype, shape, format or value not supported)."""
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, message)


def nullptr(message: str) -> AclnnError:
    """A 161001 error (a required argument is null)."""
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, message)
