"""The decode step as a model running instance: captured once on the session's stream, replayed per token.

Through ``acl.mdl`` only (aclmdlRICaptureBegin / End, aclmdlRIExecuteAsync, aclmdlRIDestroy); the
module is imported when a capture is made, so a tree whose backends cannot capture never needs it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from acl_core.spec.runtime import CaptureMode
from acl_tools.qwen3.device import DeviceError, Session, check_acl


def _mdl() -> Any:
    return importlib.import_module("acl_core.acl.mdl")


def can_capture(session: Session) -> bool:
    """Whether the session's backend says it captures streams (``Capabilities.stream_capture``)."""
    return bool(session.backend.capabilities().stream_capture)


def refused(session: Session, ops: Iterable[str]) -> list[str]:
    """The operators among ``ops`` that the backend refuses to capture (``Capabilities.capture_refused_ops``)."""
    no = set(session.backend.capabilities().capture_refused_ops)
    return sorted({op for op in ops if op in no})


class CapturedStep:
    """What ``enqueue()`` puts on the session's stream, recorded once; :meth:`replay` enqueues it again."""

    def __init__(self, session: Session, enqueue: Callable[[], None]) -> None:
        if not can_capture(session):
            raise DeviceError(f"backend {session.backend.name} cannot capture a stream (pass --eager)")
        mdl = _mdl()
        self.session, self.mdl = session, mdl
        check_acl(
            mdl.ri_capture_begin(session.stream, int(CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)),
            "aclmdlRICaptureBegin",
        )
        try:
            enqueue()
        finally:
            model, ret = mdl.ri_capture_end(session.stream)
        check_acl(ret, "aclmdlRICaptureEnd")
        self.model: int | None = model
        self.replays = 0

    def replay(self) -> None:
        """aclmdlRIExecuteAsync on the session's stream."""
        assert self.model is not None, "replay after destroy"
        check_acl(self.mdl.ri_execute_async(self.model, self.session.stream), "aclmdlRIExecuteAsync")
        self.replays += 1

    def destroy(self) -> None:
        """aclmdlRIDestroy (replays already enqueued still complete)."""
        if self.model is not None:
            check_acl(self.mdl.ri_destroy(self.model), "aclmdlRIDestroy")
            self.model = None
