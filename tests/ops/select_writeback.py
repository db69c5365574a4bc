"""Nonzero through the C-shaped front end on any backend: out's view shape before and after synchronisation."""

from __future__ import annotations

import numpy as np

import acl_core
from acl_core import aclnn, eager
from acl_core.backend import Backend


def nonzero_writeback(
    backend: Backend, x: np.ndarray, registered: str | None = None
) -> tuple[list[int], list[int], np.ndarray]:
    """(out's view dims after phase 2, after aclrtSynchronizeStream, the written rows) of aclnnNonzero on ``x``;
    the front end reaches ``backend`` as ``registered`` (default: its name)."""
    rt = backend.runtime
    acl_core.use_backend(registered or backend.name)
    src = eager.to_device(x, backend)
    out = eager.empty((x.size, x.ndim), 9, backend)  # ACL_INT64
    stream = rt.create_stream()
    try:
        t = out.tensor()
        size, executor, ret = aclnn.aclnnNonzeroGetWorkspaceSize(src.tensor(), t)
        assert ret == 0, ret
        workspace = rt.malloc(size) if size else 0
        assert aclnn.aclnnNonzero(workspace, size, executor, stream) == 0
        before, ret = aclnn.aclGetViewShape(t)
        assert ret == 0 and before is not None
        rt.synchronize_stream(stream)
        after, ret = aclnn.aclGetViewShape(t)
        assert ret == 0 and after is not None
        if workspace:
            rt.free(workspace)
        out.follow_view()
        return before, after, out.numpy()
    finally:
        rt.destroy_stream(stream)
        src.free()
        out.free()
        acl_core.use_backend(None)
