"""DLPack between the rocm backend and torch / CuPy on the GPU: no copies, lifetimes honoured."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from acl_core import aclnn, dlpack
from acl_core.aclnn import execute, get_workspace_size
from acl_core.backend import Backend
from acl_core.eager import to_device
from acl_core.spec.ops import get_spec

pytestmark = pytest.mark.gpu


def _add(backend: Backend, a: object, b: object, out: object) -> None:
    spec = get_spec("Add")
    args = [a.tensor(), b.tensor(), aclnn.aclCreateScalar(1.0, 0), out.tensor()]  # type: ignore[attr-defined]
    size, ex = get_workspace_size(spec, args, backend=backend)
    execute(spec, None, size, ex, None)
    backend.runtime.synchronize_device()


def test_torch_reads_an_acl_array_in_place(rocm: Backend) -> None:
    torch = pytest.importorskip("torch")
    values = np.arange(1024, dtype=np.float32)
    arr = to_device(values, rocm)
    t = torch.from_dlpack(arr)
    assert t.is_cuda and t.data_ptr() == arr.address  # no copy
    np.testing.assert_array_equal(t.cpu().numpy(), values)
    t.mul_(3)  # torch writes, acl-core reads
    torch.cuda.synchronize()
    np.testing.assert_array_equal(arr.numpy(), 3 * values)


def test_torch_outlives_the_acl_array(rocm: Backend) -> None:
    torch = pytest.importorskip("torch")
    arr = to_device(np.full(4096, 7, np.float32), rocm)
    address = arr.address
    t = torch.from_dlpack(arr)
    arr.free()
    del arr
    gc.collect()
    assert rocm.runtime.memory.exact(address) is not None  # still allocated: torch holds it
    assert float(t.sum().item()) == 7 * 4096
    del t
    gc.collect()
    assert rocm.runtime.memory.exact(address) is None


def test_a_torch_tensor_is_an_acl_operand_without_a_copy(rocm: Backend) -> None:
    torch = pytest.importorskip("torch")
    a = torch.arange(2048, dtype=torch.float32, device="cuda")
    b = torch.full((2048,), 0.5, dtype=torch.float32, device="cuda")
    out = torch.full_like(a, float("nan"))  # not empty_like: torch's cache could hand back a + b already
    da, db, dout = (dlpack.from_dlpack(x, rocm) for x in (a, b, out))
    assert (da.address, db.address, dout.address) == (a.data_ptr(), b.data_ptr(), out.data_ptr())
    _add(rocm, da, db, dout)
    torch.testing.assert_close(out, a + b)
    for x in (da, db, dout):
        x.free()


def test_an_imported_torch_view_keeps_its_strides(rocm: Backend) -> None:
    torch = pytest.importorskip("torch")
    base = torch.arange(64, dtype=torch.float32, device="cuda").reshape(8, 8)
    view = base.t()[1:5]  # strided, with an offset
    arr = dlpack.from_dlpack(view, rocm)
    np.testing.assert_array_equal(arr.numpy(), view.cpu().numpy())
    del base, view
    gc.collect()
    # torch's caching allocator keeps a freed block's bytes until it hands the block out again: claim a
    # block of the same size, so a released base would now read -1
    scratch = torch.full((8, 8), -1.0, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    np.testing.assert_array_equal(arr.numpy()[0], np.arange(1, 64, 8, dtype=np.float32))  # memory kept alive
    del scratch
    arr.free()


def test_cupy_round_trip(rocm: Backend) -> None:
    cp = pytest.importorskip("cupy")
    values = np.linspace(-1, 1, 512, dtype=np.float32)
    arr = to_device(values, rocm)
    c = cp.from_dlpack(arr)
    assert c.data.ptr == arr.address
    np.testing.assert_array_equal(cp.asnumpy(c), values)
    x = cp.arange(512, dtype=cp.float32)
    dx = dlpack.from_dlpack(x, rocm)
    assert dx.address == x.data.ptr
    out = to_device(np.zeros(512, np.float32), rocm)
    _add(rocm, dx, arr, out)
    np.testing.assert_allclose(out.numpy(), np.arange(512, dtype=np.float32) + values)
    dx.free()
