"""``acl.mdl``: stream capture into model running instances (aclmdlRI*), in pyACL's shape.

Out-parameters first, the aclError code last (``model_ri, ret = acl.mdl.ri_capture_end(stream)``);
the runtime converts every argument to its C type and keeps every capture rule
(:mod:`acl_core.runtime.capture`), so every backend answers misuse alike.
"""

from __future__ import annotations

from acl_core.acl._call import call_status, call_value, runtime


def ri_capture_begin(stream: int, mode: int) -> int:
    """aclmdlRICaptureBegin."""
    return call_status(lambda: runtime().ri_capture_begin(stream, mode))


def ri_capture_get_info(stream: int) -> tuple[int, int, int]:
    """aclmdlRICaptureGetInfo: (status, model_ri, ret)."""
    (status, model), ret = call_value(lambda: runtime().ri_capture_get_info(stream), (0, 0))
    return int(status), model, ret


def ri_capture_end(stream: int) -> tuple[int, int]:
    """aclmdlRICaptureEnd: (model_ri, ret)."""
    return call_value(lambda: runtime().ri_capture_end(stream))


def ri_capture_thread_exchange_mode(mode: int) -> tuple[int, int]:
    """aclmdlRICaptureThreadExchangeMode: (previous mode, ret)."""
    previous, ret = call_value(lambda: runtime().ri_capture_thread_exchange_mode(mode), -1)
    return int(previous), ret


def ri_capture_task_grp_begin(stream: int) -> int:
    """aclmdlRICaptureTaskGrpBegin."""
    return call_status(lambda: runtime().ri_capture_task_grp_begin(stream))


def ri_capture_task_grp_end(stream: int) -> tuple[int, int]:
    """aclmdlRICaptureTaskGrpEnd: (task group handle, ret)."""
    return call_value(lambda: runtime().ri_capture_task_grp_end(stream))


def ri_capture_task_update_begin(stream: int, handle: int) -> int:
    """aclmdlRICaptureTaskUpdateBegin."""
    return call_status(lambda: runtime().ri_capture_task_update_begin(stream, handle))


def ri_capture_task_update_end(stream: int) -> int:
    """aclmdlRICaptureTaskUpdateEnd."""
    return call_status(lambda: runtime().ri_capture_task_update_end(stream))


def ri_execute_async(model_ri: int, stream: int) -> int:
    """aclmdlRIExecuteAsync."""
    return call_status(lambda: runtime().ri_execute_async(model_ri, stream))


def ri_execute(model_ri: int, timeout: int) -> int:
    """aclmdlRIExecute: synchronous; ``timeout`` in ms, -1 waits forever."""
    return call_status(lambda: runtime().ri_execute(model_ri, timeout))


def ri_destroy(model_ri: int) -> int:
    """aclmdlRIDestroy."""
    return call_status(lambda: runtime().ri_destroy(model_ri))


def ri_debug_print(model_ri: int) -> int:
    """aclmdlRIDebugPrint: prints the model's task log to stdout."""
    return call_status(lambda: runtime().ri_debug_print(model_ri))
