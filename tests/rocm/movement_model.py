"""A host model of the generated movement kernels, executing their launches on the fake provider.

The same index arithmetic as each kernel, written again in Python over the packed launch arguments: a launch of
a modelled kernel (Copy, Check, Take, Scatter, ScatterUpdate, Arange) reads and writes host memory as the kernel
would, bad indices included (they set the call's device-check flag). Launches of elementwise kernels (pad fill,
dtype conversion) raise :class:`Unmodelled`. The ``movement_model`` fixture (conftest.py) is a rocm backend on
:class:`ModelProvider` (:func:`model_backend`).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from acl_core.dtypes import DataType as D
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels import movement as mk
from acl_rocm.ops import movement as mv
from tests.rocm.fake_provider import FakeProvider


class Unmodelled(Exception):
    """A launch of a kernel the model does not execute (an elementwise helper)."""


def _read(address: int, dtype: np.dtype) -> Any:
    return np.frombuffer(ctypes.string_at(address, dtype.itemsize), dtype)[0]


def _write(address: int, value: Any, dtype: np.dtype) -> None:
    data = np.asarray(value).astype(dtype).tobytes()
    ctypes.memmove(address, data, len(data))


def _ptr(raw: bytes) -> int:
    return int.from_bytes(raw, "little")


def _ll(raw: bytes) -> int:
    return int(np.frombuffer(raw, np.int64)[0])


def _np(dtype: D) -> np.dtype:
    assert dtype.numpy is not None
    return np.dtype(dtype.numpy)


def _wide(value: Any, dtype: D) -> Any:
    kind = mk.wide(dtype)
    return {"double": np.float64, "long long": np.int64, "unsigned long long": np.uint64, "bool": np.bool_}[kind](value)


def _elements(kernel: Any, args: list[bytes], rows: int, ndim: int) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Each element's coordinates, and its offsets per row (the kernel's unravel and dot products)."""
    meta = np.frombuffer(args[0], np.int32 if kernel.index_type == "int" else np.int64).astype(np.int64)
    n, shape = int(meta[0]), tuple(int(s) for s in meta[1 : 1 + ndim])
    strides = meta[1 + ndim : 1 + ndim + rows * ndim].reshape(rows, ndim)
    coords = [tuple(int(x) for x in np.unravel_index(i, shape)) for i in range(n)]
    offsets = np.array([strides @ np.array(c) for c in coords]).reshape(n, rows)
    return coords, offsets


def _blocked(kernel: Any, args: list[bytes], flag_at: int) -> bool:
    """The flag guard of a kernel that takes it: True when set, after running the kernel's inline checks
    (args after the flag: per check pointer, count, stride, low, high), which set it on a bad value."""
    flag = _ptr(args[flag_at])
    checks = getattr(kernel, "checks", None)
    for j, dtype in enumerate(checks.dtypes if checks is not None else ()):
        base = flag_at + 1 + 5 * j
        pointer, count, stride, low, high = _ptr(args[base]), *(_ll(a) for a in args[base + 1 : base + 5])
        dt = _np(dtype)
        if any(not low <= int(_read(pointer + q * stride * dt.itemsize, dt)) < high for q in range(count)):
            _write(flag, 1, np.dtype(np.int32))
    return bool(_read(flag, np.dtype(np.int32)))


def run_model(kernel: Any, args: list[bytes]) -> None:
    """Execute one movement kernel launch on host memory."""
    if isinstance(kernel, mk.Copy):
        coords, offs = _elements(kernel, args, 2, kernel.ndim)
        src, dst, size = _ptr(args[1]), _ptr(args[2]), kernel.itemsize
        diagonal = _ll(args[3]) if kernel.mode != "copy" else 0
        for c, (o0, o1) in zip(coords, offs):
            keep = True
            if kernel.mode != "copy":
                delta = c[-1] - c[-2]
                keep = delta <= diagonal if kernel.mode == "tril" else delta >= diagonal
            data = ctypes.string_at(src + int(o0) * size, size) if keep else bytes(size)
            ctypes.memmove(dst + int(o1) * size, data, size)
    elif isinstance(kernel, mk.Check):
        _, offs = _elements(kernel, args, 1, kernel.ndim)
        index, low, high, flag = _ptr(args[1]), _ll(args[2]), _ll(args[3]), _ptr(args[4])
        dt = _np(kernel.index)
        for (o0,) in offs:
            v = int(_read(index + int(o0) * dt.itemsize, dt))
            if v < low or v >= high:
                _write(flag, 1, np.dtype(np.int32))
    elif isinstance(kernel, mk.Take):
        k = len(kernel.indices)
        if _blocked(kernel, args, 3 + 3 * k):
            return
        _, offs = _elements(kernel, args, 2 + k, kernel.ndim)
        src, dst, size = _ptr(args[1]), _ptr(args[2]), kernel.itemsize
        pointers = [_ptr(a) for a in args[3 : 3 + k]]
        extra = [(_ll(args[3 + k + 2 * j]), _ll(args[4 + k + 2 * j])) for j in range(k)]
        for row in offs:
            at, ok = int(row[0]), True
            for j, (pointer, dt_acl) in enumerate(zip(pointers, kernel.indices)):
                dt = _np(dt_acl)
                v = int(_read(pointer + int(row[2 + j]) * dt.itemsize, dt))
                stride, n = extra[j]
                if kernel.wrap and v < 0:
                    v += n
                ok = ok and 0 <= v < n
                at += v * stride
            if ok:
                ctypes.memmove(dst + int(row[1]) * size, ctypes.string_at(src + at * size, size), size)
    elif isinstance(kernel, mk.Scatter):
        if _blocked(kernel, args, 5):
            return
        meta = np.frombuffer(args[0], np.int32 if kernel.index_type == "int" else np.int64).astype(np.int64)
        nd = kernel.ndim
        extents = meta[1 + nd + 4 * nd : 1 + nd + 5 * nd]
        coords, offs = _elements(kernel, args, 5, nd)
        strides = meta[1 + nd : 1 + nd + 5 * nd].reshape(5, nd)
        dt, it = _np(kernel.dtype), _np(kernel.index)
        self_p, out_p, index_p = _ptr(args[1]), _ptr(args[2]), _ptr(args[3])
        dim = kernel.dim
        for c, row in zip(coords, offs):
            acc = _wide(_read(self_p + int(row[0]) * dt.itemsize, dt), kernel.dtype)
            if all(c[d] < extents[d] for d in range(nd) if d != dim):
                for j in range(int(extents[dim])):
                    at_index = int(row[2]) + (j - c[dim]) * int(strides[2][dim])
                    if int(_read(index_p + at_index * it.itemsize, it)) != c[dim]:
                        continue
                    if kernel.with_value:
                        kind = mk.wide(kernel.dtype)
                        raw = args[4][: 1 if kind == "bool" else 8]
                        value = np.frombuffer(
                            raw,
                            {"double": np.float64, "long long": np.int64, "unsigned long long": np.uint64}.get(
                                kind, np.bool_
                            ),
                        )[0]
                    else:
                        at_src = int(row[3]) + (j - c[dim]) * int(strides[3][dim])
                        value = _wide(_read(_ptr(args[4]) + at_src * dt.itemsize, dt), kernel.dtype)
                    if kernel.reduce == 0:
                        acc = value
                    elif kernel.reduce == 1:
                        acc = (acc or value) if isinstance(acc, np.bool_) else acc + value
                    else:
                        acc = (acc and value) if isinstance(acc, np.bool_) else acc * value
            _write(out_p + int(row[1]) * dt.itemsize, acc, dt)
    elif isinstance(kernel, mk.ScatterUpdate):  # pushed per updates element (row 0 updates, row 1 data)
        if _blocked(kernel, args, 8):
            return
        coords, offs = _elements(kernel, args, 2, kernel.ndim)
        meta = np.frombuffer(args[0], np.int32 if kernel.index_type == "int" else np.int64).astype(np.int64)
        nd = kernel.ndim
        dstrides = meta[1 + nd + nd : 1 + nd + 2 * nd]
        data, updates, indices = _ptr(args[1]), _ptr(args[2]), _ptr(args[3])
        batches, row_stride, column_stride, length = (_ll(a) for a in args[4:8])
        it, size, axis = _np(kernel.index), kernel.itemsize, kernel.axis

        def target(b: int) -> tuple[int, int]:
            first = int(_read(indices + b * row_stride * it.itemsize, it))
            if not kernel.two_columns:
                return b, first
            return first, int(_read(indices + (b * row_stride + column_stride) * it.itemsize, it))

        for c, (o0, o1) in zip(coords, offs):
            batch, offset = target(c[0])
            at = offset + c[axis]
            later = (target(j) for j in range(c[0] + 1, batches))
            if any(b == batch and start <= at < start + length for b, start in later):
                continue  # a later batch writes this element: the last one wins
            to = int(o1) + (batch - c[0]) * int(dstrides[0]) + offset * int(dstrides[axis])
            ctypes.memmove(data + to * size, ctypes.string_at(updates + int(o0) * size, size), size)
    elif isinstance(kernel, mk.Arange):
        _, offs = _elements(kernel, args, 1, 1)
        out, dt = _ptr(args[1]), _np(kernel.dtype)
        for i, (o0,) in enumerate(offs):
            if kernel.int64:
                value: Any = np.int64(_ll(args[2]) + i * _ll(args[3]))
            else:
                start, step = (float(np.frombuffer(a, np.float64)[0]) for a in args[2:4])
                value = np.float64(start) + np.float64(i) * np.float64(step)
                if dt.kind in "iu":
                    info = np.iinfo(dt)
                    value = np.clip(np.trunc(value), info.min, info.max)
            _write(out + int(o0) * dt.itemsize, value, dt)
    else:
        raise Unmodelled(type(kernel).__name__)


class ModelProvider(FakeProvider):
    """The fake provider, executing movement kernels with the host model as they are launched."""

    kernels: dict[str, Any] = {}

    def launch(self, function: object, grid: Any, block: Any, shared_bytes: int, stream: int, params: int) -> None:
        super().launch(function, grid, block, shared_bytes, stream, params)
        launched = self.launches[-1]
        kernel = self.kernels.get(launched.name)
        if kernel is None:
            raise Unmodelled(launched.name)
        run_model(kernel, launched.args)


def model_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RocmBackend:
    """A rocm backend on :class:`ModelProvider`, its kernel cache under ``tmp_path``; every movement kernel it
    generates (while ``monkeypatch`` is active) is recorded for the model."""
    kernels: dict[str, Any] = {}
    original = mv._source

    def recording(kernel: Any) -> str:
        kernels[kernel.kernel_name] = kernel
        return original(kernel)

    monkeypatch.setattr(mv, "_source", recording)
    provider = ModelProvider()
    provider.kernels = kernels
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    return backend
