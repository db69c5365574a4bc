"""Launch metadata is reused per validated signature, and never carries a stale address."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from acl_core import aclnn
from acl_core.aclnn import execute, get_workspace_size
from acl_core.eager import to_device
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from tests.rocm.fake_provider import FakeProvider


def _pointers(launch_args: list[bytes]) -> set[int]:
    return {struct.unpack("<Q", a)[0] for a in launch_args if len(a) == 8}


def test_repeated_launches_reuse_the_plan_and_follow_a_repointed_output(tmp_path: Path) -> None:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    a, b, out, other = (to_device(np.ones(64, np.float32), backend) for _ in range(4))
    spec = get_spec("Add")
    alpha = aclnn.aclCreateScalar(1.0, 0)
    size, executor = get_workspace_size(spec, [a.tensor(), b.tensor(), alpha, out.tensor()], backend=backend)
    assert aclnn.aclSetAclOpExecutorRepeatable(executor) == 0
    execute(spec, None, size, executor, None)
    execute(spec, None, size, executor, None)
    first, second = provider.launches[-2:]
    assert first.args == second.args and out.address in _pointers(second.args)
    memo = executor.call.memo
    assert memo, "the backend keeps its plan for the signature"
    assert aclnn.aclSetRawTensorAddr(out.tensor(), other.address) == 0
    execute(spec, None, size, executor, None)
    assert other.address in _pointers(provider.launches[-1].args)
    assert out.address not in _pointers(provider.launches[-1].args)
    assert executor.call.memo is not memo  # the shared cached plan keeps the original address
    _, again = get_workspace_size(spec, [a.tensor(), b.tensor(), alpha, out.tensor()], backend=backend)
    assert again.call.memo is not memo  # a new signature (the new address) starts a new plan
