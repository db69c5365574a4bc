"""The capability model: what a backend's device can do, measured at run time."""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from acl_core.dtypes import DataType
from acl_core.formats import PLAIN_FORMATS, Format

if TYPE_CHECKING:
    from acl_core.spec.opspec import OpSpec


class Platform(str, Enum):
    """Where a backend computes."""

    CPU = "cpu"
    AMD = "amd"
    NVIDIA = "nvidia"
    OTHER = "other"


class Capabilities(BaseModel):
    """A frozen record of one backend's device, derived from the device when the backend starts.

    The conformance suite decides what to run from these fields, never from the backend's name.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    backend: str = Field(description="backend name as registered under acl_core.backends")
    backend_version: str = Field(description="version of the distribution that provides the backend")
    platform: Platform
    device_name: str = Field(description="the device's marketing or driver name")
    architecture: str = Field(description="gfx…, sm_…, or the host CPU architecture")
    device_count: int = Field(ge=0)
    compute_units: int = Field(ge=0, description="CUs, SMs or CPU cores")
    memory_bytes: int = Field(ge=0, description="device memory the runtime reports as total")
    warp_size: int = Field(ge=1, description="wavefront or warp width; 1 on a CPU")
    unified_memory: bool = Field(description="host and device share one address space")
    dtypes: tuple[DataType, ...] = Field(description="element types the backend computes with")
    formats: tuple[Format, ...] = Field(description="tensor formats the backend accepts")
    ops: tuple[str, ...] = Field(description="aclnn operators implemented (names without the aclnn prefix)")
    op_dtypes: dict[str, tuple[DataType, ...]] = Field(
        default_factory=dict,
        description="per operator, the tensor dtypes it computes with (within 'dtypes'); an op absent here claims "
        "every dtype of 'dtypes'. Phase 1 refuses any other dtype (161002); conformance proves every claimed pair",
    )
    mx_use_hw: bool = Field(description="native microscaling (MX) GEMM in hardware is used")
    fp8_matmul_hw: bool = Field(description="fp8 GEMM runs on fp8 matrix hardware")
    tf32_hw: bool = Field(description="the hardware has a TF32-class fp32 GEMM mode")
    tf32_enabled: bool = Field(description="TF32 is used for fp32 GEMM (CANN_FAST_TF32=1 and tf32_hw)")
    stream_capture: bool = Field(
        default=False, description="the driver records and replays streams (aclmdlRICapture*, aclmdlRIExecuteAsync)"
    )
    capture_refused_ops: tuple[str, ...] = Field(
        default=(),
        description="operators whose phase 2 needs the host, or that write back a view shape, so refuse capture",
    )
    attention_path: str = Field(description="how FlashAttentionScore runs, e.g. 'fused', 'blas', 'numpy'")
    nz_fidelity: Literal["none", "structural", "bit-exact"] = Field(
        description="how faithfully FRACTAL_NZ storage is reproduced"
    )
    collective_engine: str | None = Field(description="engine under HCCL (mpi, nccl, rccl) or None")
    collective_max_ranks: int = Field(ge=0, description="largest communicator the engine supports here")
    notes: dict[str, str] = Field(default_factory=dict, description="free-form facts, one line each")
    nominal: dict[str, str] = Field(
        default_factory=dict,
        description="fields whose value is a configured figure rather than one measured on hardware, and why",
    )

    @model_validator(mode="after")
    def _nominal_names_fields(self) -> Capabilities:
        unknown = sorted(set(self.nominal) - set(type(self).model_fields))
        if unknown:
            raise ValueError(f"nominal names no capability field: {', '.join(unknown)}")
        return self

    def supports_op(self, op: str) -> bool:
        """True when ``op`` (e.g. ``"Add"``) is implemented."""
        return op in self.ops

    def supports_dtype(self, dtype: DataType) -> bool:
        """True when the backend computes with ``dtype``."""
        return dtype in self.dtypes

    def op_claim(self, op: str) -> frozenset[DataType]:
        """The tensor dtypes ``op`` claims: its ``op_dtypes`` entry (else every dtype) within ``dtypes``."""
        found = self.op_dtypes.get(op)
        return frozenset(self.dtypes if found is None else set(found) & set(self.dtypes))

    def to_json(self) -> str:
        """JSON with enum members written by name (the form ``acl-core caps --json`` prints)."""
        return json.dumps(self.to_jsonable(), indent=2, sort_keys=True)

    def to_jsonable(self) -> dict[str, Any]:
        """A plain dict of JSON types, enums by name."""
        data = self.model_dump(mode="json")
        data["dtypes"] = [DataType(d).name for d in self.dtypes]
        data["formats"] = [Format(f).name for f in self.formats]
        data["op_dtypes"] = {op: [DataType(d).name for d in ds] for op, ds in self.op_dtypes.items()}
        return data


def declared_dtypes(spec: OpSpec) -> frozenset[DataType] | None:
    """Every dtype a tensor parameter or dtype attribute of ``spec`` declares; None when a tensor declares no set."""
    from acl_core.spec.opspec import Kind

    found: set[DataType] = set()
    for p in spec.params:
        if p.kind in (Kind.TENSOR, Kind.TENSOR_LIST):
            if p.dtypes is None:
                return None
            found |= p.dtypes
        elif p.kind is Kind.DTYPE and p.dtypes is not None:  # DropoutGenMaskV2's probDataType
            found |= p.dtypes
    return frozenset(found)


def derive_op_dtypes(specs: Iterable[OpSpec], computes: Iterable[DataType]) -> dict[str, tuple[DataType, ...]]:
    """Per-op claims for a backend whose kernels compute every declared dtype among ``computes``."""
    have = frozenset(computes)
    claims: dict[str, tuple[DataType, ...]] = {}
    for spec in specs:
        declared = declared_dtypes(spec)
        claims[spec.name] = tuple(sorted(have if declared is None else declared & have))
    return claims


def declared_formats(specs: Iterable[OpSpec]) -> tuple[Format, ...]:
    """The plain formats plus every private format a parameter of ``specs`` declares (FRACTAL_NZ...)."""
    found = set(PLAIN_FORMATS)
    for spec in specs:
        for p in spec.params:
            if p.formats is not None:
                found |= p.formats
    return tuple(sorted(found))


def capabilities_json_schema() -> dict[str, Any]:
    """The JSON schema that ``acl-core caps NAME --json`` output validates against."""
    schema = Capabilities.model_json_schema()
    props = schema["properties"]
    props["dtypes"] = {"type": "array", "items": {"enum": [d.name for d in DataType]}}
    props["formats"] = {"type": "array", "items": {"enum": [f.name for f in Format]}}
    props["op_dtypes"] = {
        "type": "object",
        "additionalProperties": {"type": "array", "items": {"enum": [d.name for d in DataType]}},
    }
    schema.pop("$defs", None)
    props["platform"] = {"enum": [p.value for p in Platform]}
    return schema
