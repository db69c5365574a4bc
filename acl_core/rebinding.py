"""Executor address rebinding (opbase ``aclSet*TensorAddr``): point a repeatable executor's tensor at new memory.

The tensor keeps its shape, dtype and layout; only its device address changes, so no new phase 1
is needed. The new address must be 32-byte aligned and the tensor's bytes at it must lie in live
device memory (the runtime's memory map). Re-pointing a tensor makes the executor's next phase 2
check the call again against the memory as it is then and hand the backend a fresh
:attr:`acl_core.backend.Launch.memo`, so nothing a backend memoised for the old addresses (launch
plans, packed kernel arguments, a bound RELAUNCH) is reused (docs/PLUGINS.md, "Executor rebinding").

Indices, as CANN counts them: ``index`` counts the operator's plain tensor parameters that are
inputs (role in or inout), outputs (out or inout), or all of them (aclSetTensorAddr), in prototype
order; ``irIndex`` counts the parameters of that role, tensors and tensor lists alike, and must name
a tensor list, whose member ``relativeIndex`` is re-pointed.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from acl_core.errors import AclError, AclnnError, AclnnStatus
from acl_core.spec.opspec import Kind, Param, Role
from acl_core.tensor import AclTensor, AclTensorList

if TYPE_CHECKING:
    from acl_core.aclnn import AclOpExecutor

ADDRESS_ALIGN = 32
"""CANN: addresses given to aclSet*TensorAddr are 32-byte aligned."""

_ROLES = {"input": (Role.IN, Role.INOUT), "output": (Role.OUT, Role.INOUT), "any": tuple(Role)}


def _invalid(message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, message)


def _index(value: object, what: str) -> int:
    if isinstance(value, bool):
        raise _invalid(f"{what} must be an integer, not bool")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise _invalid(f"{what} must be an integer, not {type(value).__name__}") from None
    if number < 0:
        raise _invalid(f"{what}={number} is negative")
    return number


def _usable(executor: object) -> AclOpExecutor:
    from acl_core.aclnn import AclOpExecutor

    if not isinstance(executor, AclOpExecutor):
        raise AclnnError(AclnnStatus.ACLNN_ERR_INNER_NULLPTR, "executor is null")
    if executor.destroyed:
        raise _invalid("executor was destroyed")
    if not executor.repeatable:
        raise _invalid("address rebinding needs a repeatable executor (aclSetAclOpExecutorRepeatable)")
    return executor


def _params(executor: AclOpExecutor, role: str, kinds: tuple[Kind, ...]) -> list[Param]:
    return [p for p in executor.spec.params if p.kind in kinds and p.role in _ROLES[role]]


def _point(executor: AclOpExecutor, current: AclTensor, tensor: object, address: object, where: str) -> None:
    """Check ``tensor`` is the executor's tensor at ``where`` and that ``address`` can hold it; re-point it."""
    if not isinstance(tensor, AclTensor):
        raise AclnnError(AclnnStatus.ACLNN_ERR_INNER_NULLPTR, f"{where}: tensor is null")
    if tensor is not current:
        raise _invalid(f"{where}: the tensor passed is not the one the executor holds there")
    if address is None or address == 0:
        raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, f"{where}: addr is null")
    addr = _index(address, "addr")
    if addr >= 2**64:
        raise _invalid(f"addr={addr:#x} is not a 64-bit pointer")
    if addr % ADDRESS_ALIGN:
        raise _invalid(f"{where}: addr {addr:#x} is not {ADDRESS_ALIGN}-byte aligned")
    start, end = tensor.byte_span()
    shift = addr - tensor.data
    if end > start:
        try:
            executor.backend.runtime.device_range(start + shift, end - start, f"{where} at the new address")
        except AclError as exc:
            raise _invalid(exc.message) from None
    tensor.data = addr  # the executor's next phase 2 sees the change (still_valid) and revalidates


def set_tensor_addr(executor: object, role: str, index: object, tensor: object, address: object) -> int:
    """aclSetInputTensorAddr / aclSetOutputTensorAddr / aclSetTensorAddr (``role``: input, output, any)."""
    ex = _usable(executor)
    i = _index(index, "index")
    params = _params(ex, role, (Kind.TENSOR,))
    if i >= len(params):
        raise _invalid(f"index {i}: aclnn{ex.spec.name} has {len(params)} {role} tensor(s)")
    current: Any = ex.call.args.get(params[i].name)
    if not isinstance(current, AclTensor):
        raise _invalid(f"{role} tensor {i} ({params[i].name}) was null in phase 1")
    _point(ex, current, tensor, address, f"{params[i].name}")
    return 0


def set_dynamic_tensor_addr(
    executor: object, role: str, ir_index: object, relative_index: object, tensors: object, address: object
) -> int:
    """aclSetDynamic{Input,Output,}TensorAddr: re-point member ``relative_index`` of tensor list ``ir_index``."""
    ex = _usable(executor)
    i = _index(ir_index, "irIndex")
    j = _index(relative_index, "relativeIndex")
    params = _params(ex, role, (Kind.TENSOR, Kind.TENSOR_LIST))
    if i >= len(params) or params[i].kind is not Kind.TENSOR_LIST:
        raise _invalid(f"irIndex {i} names no {role} tensor list of aclnn{ex.spec.name}")
    current: Any = ex.call.args.get(params[i].name)
    if not isinstance(tensors, AclTensorList):
        raise AclnnError(AclnnStatus.ACLNN_ERR_INNER_NULLPTR, "tensors is null")
    if not isinstance(current, AclTensorList):
        raise _invalid(f"tensor list {params[i].name} was null in phase 1")
    if tensors is not current:
        raise _invalid(f"{params[i].name}: the list passed is not the one the executor holds")
    if j >= len(current.tensors):
        raise _invalid(f"relativeIndex {j}: {params[i].name} holds {len(current.tensors)} tensors")
    _point(ex, current.tensors[j], current.tensors[j], address, f"{params[i].name}[{j}]")
    return 0
