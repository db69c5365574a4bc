"""Reference kernels of the construction and index movement ops (acl_core/spec/ops/index_ops.py), in NumPy.

Index values are checked before anything is written (161002 naming the first bad value).
"""

from __future__ import annotations

import numpy as np

from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.movement import arange, checked_index

Array = np.ndarray

kernel("Range")(arange)  # start + i * step; only the length (fixed by infer) differs from Arange


@kernel("Linspace")
def linspace(k: RefCall) -> None:
    """torch's symmetric linspace in double: the first half counts up from start, the second down from end."""
    n = k["out"].shape[0]
    start, end = float(k.value("start")), float(k.value("end"))
    if n == 1:
        k.write("out", np.array([start]))
        return
    step = (end - start) / (n - 1)
    i = np.arange(n, dtype=np.float64)
    k.write("out", np.where(i < n // 2, start + i * step, end - (n - 1 - i) * step))


@kernel("Eye")
def eye(k: RefCall) -> None:
    """Ones on the main diagonal of an n × m matrix."""
    k.write("out", np.eye(k.value("n"), k.value("m")))


@kernel("Diag", "DiagFlat")
def diag(k: RefCall) -> None:
    """np.diag (DiagFlat: of self flattened)."""
    x = k.read("self")
    if k.launch.spec.name == "DiagFlat":
        x = x.reshape(-1)
    k.write("out", np.diag(x, k.value("diagonal")))


@kernel("OneHot")
def one_hot(k: RefCall) -> None:
    """out = onValue where self equals the class along the new axis, offValue elsewhere (first elements)."""
    x = k.read("self").astype(np.int64)
    on, off = k.read("onValue").reshape(-1)[0], k.read("offValue").reshape(-1)[0]
    classes = np.arange(k.value("numClasses"), dtype=np.int64)
    hit = x[..., None] == classes  # classes last, then moved to axis
    k.write("out", np.moveaxis(np.where(hit, on, off), -1, k.plan["dim"]))


@kernel("Roll")
def roll(k: RefCall) -> None:
    """np.roll by the normalised shifts (dim -1: the flattened tensor)."""
    x = k.read("x")
    for dim, shift in k.plan["shifts"]:
        x = np.roll(x.reshape(-1), shift).reshape(x.shape) if dim == -1 else np.roll(x, shift, axis=dim)
    k.write("out", x)


@kernel("Take")
def take(k: RefCall) -> None:
    """out = self.flat[index] (C order; negatives from the end)."""
    x = k.read("self").reshape(-1)
    k.write("out", x[checked_index(k.read("index"), x.size, "index", negative=True)])


@kernel("GatherNd")
def gather_nd(k: RefCall) -> None:
    """out[b] = self[indices[b, 0], ..., indices[b, k-1]] (whole trailing slices)."""
    x = k.read("self")
    idx = k.read("indices")
    wrap = bool(k.value("negativeIndexSupport"))
    parts = [checked_index(idx[..., j], x.shape[j], f"indices[..., {j}]", negative=wrap) for j in range(idx.shape[-1])]
    k.write("out", x[tuple(parts)])


@kernel("GatherV3")
def gather_v3(k: RefCall) -> None:
    """Batched gather: for each of the first batchDims positions, np.take along dim of that batch."""
    x = k.read("self")
    dim: int = k.plan["dim"]
    b = int(k.value("batchDims"))
    idx = checked_index(k.read("index"), x.shape[dim], "index")
    xs = x.reshape(-1, *x.shape[b:])
    ids = idx.reshape(-1, *idx.shape[b:])
    parts = [np.take(xs[i], ids[i], axis=dim - b) for i in range(xs.shape[0])]
    shape = (*x.shape[:dim], *idx.shape[b:], *x.shape[dim + 1 :])
    k.write("out", np.stack(parts).reshape(shape) if parts else np.zeros(shape, x.dtype))
