"""Valid phase-1 calls of every declared operator, and a deadline to run adversarial variants under.

A sweep takes each operator's first conformance sample that validates, turns it into aclnn handles
on the reference backend (outputs allocated from the output rule), then swaps one argument for an
adversarial value and runs phase 1 through the C front end. :func:`bounded` fails a call that runs
past its deadline instead of letting it spin (an alarm that raises a BaseException, which the front
end's ``except Exception`` cannot swallow), and :func:`memory_cap` turns an allocation of tens of
GiB into a MemoryError instead of a machine brought to its knees.
"""

from __future__ import annotations

import contextlib
import itertools
import resource
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from acl_core import aclnn, eager
from acl_core.aclnn import get_workspace_size
from acl_core.backend import Backend
from acl_core.errors import AclnnStatus
from acl_core.spec.opspec import OpSpec
from acl_core.tensor import AclTensor, AclTensorList

INTERNAL = (int(AclnnStatus.ACLNN_ERR_INNER), 500000)
"""The codes a defect of the library shows as (ACLNN_ERR_INNER, ACL_ERROR_INTERNAL_ERROR)."""


class Overrun(BaseException):
    """A call ran past its deadline (a BaseException, so no ``except Exception`` can hide it)."""


@dataclass
class Baseline:
    """A valid phase-1 call: handles by official name, and the device arrays they lie in."""

    spec: OpSpec
    args: dict[str, Any]
    arrays: list[eager.DeviceArray] = field(default_factory=list)

    def tensors(self) -> Iterator[tuple[str, Any, int | None, AclTensor]]:
        """(label, param, index in its list or None, tensor) for every tensor argument."""
        for p in self.spec.params:
            value = self.args[p.name]
            if isinstance(value, AclTensor):
                yield p.name, p, None, value
            elif isinstance(value, AclTensorList):
                for i, t in enumerate(value.tensors):
                    yield f"{p.name}[{i}]", p, i, t

    def with_tensor(self, name: str, index: int | None, tensor: AclTensor) -> dict[str, Any]:
        """The arguments with one tensor (or one member of a tensor list) replaced."""
        args = dict(self.args)
        if index is None:
            args[name] = tensor
        else:
            members = list(self.args[name].tensors)
            members[index] = tensor
            args[name] = AclTensorList.create(members)
        return args


def _allocate_outputs(spec: OpSpec, args: dict[str, Any], backend: Backend, arrays: list[eager.DeviceArray]) -> None:
    for item in eager.allocate_outputs(spec, args, backend).values():
        arrays.extend(item if isinstance(item, list) else [item])


def _free(arrays: list[eager.DeviceArray]) -> None:
    for da in arrays:
        da.free()


def baseline(spec: OpSpec, backend: Backend, tries: int = 6) -> Baseline | None:
    """A call of ``spec`` from its first ``tries`` samples whose phase 1 succeeds, as handles (None if none does).

    The first one whose every tensor holds two elements or more is taken (a 0-d or empty tensor
    hides overlap), else the first valid one.
    """
    if spec.samples is None:
        return None
    fallback: Baseline | None = None
    for sample in itertools.islice(spec.samples(np.random.default_rng(0)), tries):
        conv = eager._Arguments(backend, "contiguous")
        arrays: list[eager.DeviceArray] = []
        try:
            args = conv.convert(spec, sample.args)
            _allocate_outputs(spec, args, backend, arrays)
            get_workspace_size(spec, [], args, backend=backend)
        except Exception:
            conv.free()
            _free(arrays)
            continue
        for item in conv.arrays.values():
            arrays.extend(item if isinstance(item, list) else [item])
        found = Baseline(spec, args, arrays)
        if all(t.numel > 1 for _, _, _, t in found.tensors()):
            if fallback is not None:
                _free(fallback.arrays)
            return found
        if fallback is None:
            fallback = found
        else:
            _free(arrays)
    return fallback


def view(t: AclTensor, dims: list[int], strides: list[int]) -> AclTensor:
    """Another view over ``t``'s storage (same dtype, offset, format, storage, address)."""
    return AclTensor.create(dims, t.dtype, strides, t.offset, t.format, t.storage_dims, t.data)


def bounded(fn: Any, *args: Any, seconds: float = 1.0, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, raising :class:`Overrun` when it runs longer than ``seconds``."""

    def expire(signum: int, frame: Any) -> None:
        raise Overrun(f"{getattr(fn, '__name__', fn)} ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn(*args, **kwargs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def phase1(spec: OpSpec, args: dict[str, Any], seconds: float = 1.0) -> tuple[int, str]:
    """(status, message) of ``aclnnXxxGetWorkspaceSize(**args)`` under a deadline."""
    fn = getattr(aclnn, f"aclnn{spec.name}GetWorkspaceSize")
    _, _, ret = bounded(fn, seconds=seconds, **args)
    return ret, aclnn.aclGetRecentErrMsg() if ret else ""


DEADLINE = 2.0
"""Seconds one adversarial phase-1 call may take; a valid one takes milliseconds."""


def run_phase1(base: Baseline, args: dict[str, Any]) -> tuple[int | str, str]:
    """(status, message) of phase 1 on ``base``'s op with ``args``; status ``"overrun"`` past the deadline."""
    try:
        return phase1(base.spec, args, DEADLINE)
    except Overrun as exc:
        return "overrun", str(exc)


def _vm_size() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


@contextlib.contextmanager
def memory_cap(extra_bytes: int = 4 << 30) -> Iterator[None]:
    """Cap this process's address space at its current size plus ``extra_bytes`` while the block runs."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _vm_size() + extra_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
