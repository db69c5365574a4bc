"""rocm's Gelu and GeluV2 (erf form) are within Gelu's ulp class for negative x too (erfc, not 1 + erf)."""

from __future__ import annotations

import numpy as np
import pytest

from acl_conformance.compare import ulp_distance
from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.accuracy import accuracy_of
from acl_core.spec.ops import get_spec

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype, acl", [(np.float32, D.ACL_FLOAT), (np.float64, D.ACL_DOUBLE)])
def test_gelu_is_within_its_class_for_negative_x(rocm: Backend, reference: Backend, dtype: type, acl: D) -> None:
    accuracy = accuracy_of(get_spec("Gelu"))
    assert accuracy is not None
    allowed = accuracy.bound_ulps(acl) + 0.5  # against the reference, itself rounded
    x = np.linspace(-14.0, 6.0, 4001).astype(dtype)
    want = eager.run("Gelu", reference, self=x)["out"]
    calls = [("Gelu", {"self": x}, "out")]
    if acl != D.ACL_DOUBLE:  # GeluV2 has no float64
        calls.append(("GeluV2", {"x": x, "approximate": 0}, "y"))
    for op, args, name in calls:
        got = eager.run(op, rocm, **args)[name]
        worst = int(ulp_distance(np.asarray(got), np.asarray(want)).max())
        assert worst <= allowed, f"{op} {np.dtype(dtype).name}: {worst} ulp"
