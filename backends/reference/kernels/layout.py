"""Reference kernels of the private-format family: ND <-> FRACTAL_NZ by the index formula of :mod:`acl_core.nz`."""

from __future__ import annotations

import math

import numpy as np

from acl_core import nz
from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.tensor import AclTensor
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.matmul import reduce_precision
from acl_reference.lowp_io import bits_view, storage_values, write_storage


def _tensor(k: RefCall, name: str) -> AclTensor:
    t = k[name]
    assert isinstance(t, AclTensor)
    return t


def _read_view(k: RefCall, name: str) -> np.ndarray:
    """An ND tensor's view in its own type (HiFloat8 as uint8 codes), copied."""
    t = _tensor(k, name)
    if t.dtype == D.ACL_HIFLOAT8:
        return bits_view(k.driver, t).copy()
    return np.array(k.read(name))


def _write_view(k: RefCall, name: str, values: np.ndarray) -> None:
    t = _tensor(k, name)
    if t.dtype == D.ACL_HIFLOAT8:
        np.copyto(bits_view(k.driver, t), values)
        return
    k.write(name, values)


def read_nz(k: RefCall, name: str) -> np.ndarray:
    """The ND array an NZ tensor holds (its view's logical matrix; a transposed view is transposed back)."""
    return nz_values(k, _tensor(k, name))


def nz_values(k: RefCall, t: AclTensor) -> np.ndarray:
    """The ND array NZ tensor ``t`` holds (a tensor argument or a member of a tensor list)."""
    stored = storage_values(k.driver, t).reshape(t.storage_dims)
    if nz.nz_transposed(t):
        shape = (*t.view_dims[:-2], t.view_dims[-1], t.view_dims[-2])
        return np.swapaxes(nz.nz_to_nd(stored, shape), -1, -2)
    return nz.nz_to_nd(stored, t.view_dims)


@kernel("NpuFormatCast")
def npu_format_cast(k: RefCall) -> None:
    """ND -> FRACTAL_NZ (zero padding) or FRACTAL_NZ -> ND (padding dropped)."""
    if k.plan["direction"] == "to_nz":
        dst = _tensor(k, "dstTensor")
        tiles = nz.nd_to_nz(_read_view(k, "srcTensor"), nz.c0_for(dst.dtype, dst.format))
        write_storage(k, "dstTensor", tiles)
    else:
        _write_view(k, "dstTensor", read_nz(k, "srcTensor"))


@kernel("MatmulWeightNz")
def matmul_weight_nz(k: RefCall) -> None:
    """out = self @ mat2, mat2 read from its FRACTAL_NZ storage."""
    precision = k.plan.get("precision")
    a = reduce_precision(k.read("self"), precision)
    b = reduce_precision(read_nz(k, "mat2"), precision)
    with np.errstate(all="ignore"):
        k.write("out", a @ b)


@kernel("TransMatmulWeight")
def trans_matmul_weight(k: RefCall) -> None:
    """Rewrite mmWeightRef's storage as FRACTAL_NZ and mark the tensor so (format, storage dims)."""
    t = _tensor(k, "mmWeightRef")
    if t.numel == 0:
        return
    tiles = nz.nd_to_nz(_read_view(k, "mmWeightRef"), k.plan["c0"])
    write_storage(k, "mmWeightRef", tiles)
    # CANN updates the aclTensor itself (aclnn_trans_matmul_weight.cpp: SetStorageShape / SetStorageFormat).
    t.storage_dims = tuple(k.plan["nz_shape"])
    t.format = Format.ACL_FORMAT_FRACTAL_NZ
    t.__dict__.pop("layout", None)  # the cached layout key describes the old ND storage
    assert math.prod(t.storage_dims) == tiles.size
