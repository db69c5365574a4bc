"""The capability model: frozen, JSON-schema'd, and what ``acl-core caps --json`` prints."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pydantic
import pytest

import acl_core
from acl_core.capabilities import Capabilities, capabilities_json_schema
from acl_core.dtypes import DataType
from acl_core.spec.ops import all_specs


def test_reference_capabilities_are_frozen_and_honest() -> None:
    caps = acl_core.get_backend("reference").capabilities()
    assert isinstance(caps, Capabilities)
    with pytest.raises(pydantic.ValidationError):
        caps.backend = "other"  # type: ignore[misc]
    assert caps.platform.value == "cpu" and caps.warp_size == 1
    assert not caps.mx_use_hw and not caps.fp8_matmul_hw and not caps.tf32_enabled
    assert caps.supports_op("Add") and caps.supports_dtype(DataType.ACL_BF16)
    # HiFloat8 has no NumPy type, but the reference reads and writes it (lowp_io): its ops claim it
    assert caps.supports_dtype(DataType.ACL_HIFLOAT8) and DataType.ACL_HIFLOAT8 in caps.op_claim("Cast")
    assert DataType.ACL_HIFLOAT8 not in caps.op_claim("Add")  # per-op claims: Add does not declare it
    assert not caps.supports_dtype(DataType.ACL_UINT1)
    backend = acl_core.get_backend("reference")
    specs = all_specs()
    # The oracle computes every declared operator, and each claim is backed by a kernel (an expectation
    # independent of how capabilities() derives the list, which is the same filter over the kernel table).
    assert set(caps.ops) == set(specs)
    assert all(specs[op].kernel_name in backend.kernels for op in caps.ops)


def test_caps_json_validates_against_the_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "acl_core", "caps", "reference", "--json"], capture_output=True, text=True, check=True
    ).stdout
    data = json.loads(out)
    jsonschema.validate(data, capabilities_json_schema())
    assert data["backend"] == "reference" and "ACL_BF16" in data["dtypes"]


def test_schema_rejects_a_wrong_record() -> None:
    data = acl_core.get_backend("reference").capabilities().to_jsonable()
    data["warp_size"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, capabilities_json_schema())
    data["warp_size"] = 1
    data["dtypes"] = ["ACL_NOT_A_TYPE"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, capabilities_json_schema())
