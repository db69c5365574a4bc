"""What a reference kernel sees: the validated call, with tensors readable and writable as NumPy."""

from __future__ import annotations

from typing import Any

import numpy as np

from acl_core.backend import Launch
from acl_core.dtypes import DataType
from acl_core.spec.kernel_args import Scalar
from acl_core.tensor import AclTensor
from acl_reference import tensor_io
from acl_reference.driver import ReferenceDriver


class RefCall:
    """One operator call on the reference backend."""

    __slots__ = ("args", "driver", "launch", "plan")

    def __init__(self, launch: Launch, driver: ReferenceDriver) -> None:
        self.launch = launch
        self.args = launch.args
        self.plan = launch.plan
        self.driver = driver

    def __getitem__(self, name: str) -> Any:
        """The argument ``name`` as the validator left it (tensors stay aclTensor objects)."""
        return self.args[name]

    def value(self, name: str) -> Any:
        """A host argument's Python value (a scalar's value; arrays and scalar lists as tuples; None if absent)."""
        arg = self.args[name]
        if type(arg) is Scalar:
            return arg.value
        if type(arg) is tuple and arg and type(arg[0]) is Scalar:
            return tuple([s.value for s in arg])
        return arg

    def read(self, name: str, dtype: np.dtype | type | None = None) -> np.ndarray:
        """Tensor ``name`` as a NumPy array (optionally converted to ``dtype``, e.g. float64)."""
        t = self.args[name]
        arr = self.driver.views.get((t.data, t.layout))  # the common case, without a function call
        if arr is None:
            assert isinstance(t, AclTensor), f"{name} is not a tensor"
            arr = tensor_io.read(self.driver, t)
        return arr if dtype is None else arr.astype(dtype)

    def read_list(self, name: str, dtype: np.dtype | type | None = None) -> list[np.ndarray]:
        """Every tensor of list ``name`` as NumPy arrays."""
        tl = self.args[name]
        assert isinstance(tl, tuple), f"{name} is not a tensor list"
        arrays = [tensor_io.read(self.driver, t) for t in tl]
        return arrays if dtype is None else [a.astype(dtype) for a in arrays]

    def write(self, name: str, value: np.ndarray | float | int | bool) -> None:
        """Store ``value`` into output ``name`` (cast to its dtype; skipped when the output is absent)."""
        t = self.args[name]
        if t is None:
            return
        assert isinstance(t, AclTensor), f"{name} is not a tensor"
        tensor_io.write(self.driver, t, np.asarray(value).copy() if isinstance(value, np.ndarray) else value)

    def write_computed(self, name: str, value: np.ndarray | float | int | bool) -> None:
        """Store a wide result into output ``name`` as CANN does: rounded to the computation dtype, then cast.

        The reference computes in float64 / int64; CANN's kernel computes in ``plan["compute"]`` (a
        float result of an integer computation in float32) and a wider output only widens that
        result, so a float32 sum written to a float64 output keeps its float32 rounding (and an
        int32 sum its wrap-around).
        """
        target = computed_dtype(self.plan.get("compute"), np.asarray(value))
        t = self.args[name]
        if target is not None and isinstance(t, AclTensor) and target != t.dtype:
            value = tensor_io.cast(np.asarray(value), target)
        RefCall.write(self, name, value)

    def write_list(self, name: str, values: list[np.ndarray]) -> None:
        """Store one array into each tensor of output list ``name``."""
        tl = self.args[name]
        assert isinstance(tl, tuple), f"{name} is not a tensor list"
        for t, v in zip(tl, values):
            tensor_io.write(self.driver, t, np.asarray(v).copy())

    def dtype(self, name: str) -> DataType:
        """The aclDataType of tensor ``name``."""
        dtype: DataType = self.args[name].dtype
        return dtype


class ComputedCall(RefCall):
    """A call whose every write goes through :meth:`RefCall.write_computed` (a family's kernels that compute wide)."""

    __slots__ = ()

    def write(self, name: str, value: np.ndarray | float | int | bool) -> None:
        """Store ``value`` rounded to the computation dtype first (see :meth:`RefCall.write_computed`)."""
        self.write_computed(name, value)


def computed_dtype(compute: DataType | None, value: np.ndarray) -> DataType | None:
    """The dtype a CANN kernel computing in ``compute`` produces ``value`` in (None: no rounding applies).

    A float (or complex) value of a float computation is in ``compute``; of an integer or bool
    computation in float32 (``float_result``); an integer value of an integer computation in
    ``compute``; bool values and calls without a computation dtype are left alone.
    """
    if compute is None or value.dtype.kind == "b":
        return None
    if value.dtype.kind in "fcV":
        return compute if compute.is_float or compute.is_complex else DataType.ACL_FLOAT
    if value.dtype.kind in "iu" and compute.is_integer:
        return compute
    return None
