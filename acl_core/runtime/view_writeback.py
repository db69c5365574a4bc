"""Out tensors whose view shape an operator writes back when its work completes (docs/RUNTIME.md).

Operators whose output size comes from the data (Nonzero, MaskedSelect) take an ``out`` of the largest size
it can need and report the real size through the tensor itself: after the host synchronises with the stream,
``aclGetViewShape(out)`` reads the written size. Strides and offset stay as given, so the written elements are
the leading part of each shrunk dim. Before that synchronisation the view shape reads as the caller created it
(the maximal shape); CANN leaves it unspecified.

A backend that runs its work at synchronisation (the reference) sets the shape in the task itself
(:func:`set_view_dims`). A GPU backend has its kernel write the size to device memory and registers a reader
here (:meth:`ViewWriteback.defer`); the runtime applies every reader of a stream after
``aclrtSynchronizeStream`` / ``aclrtDestroyStream`` on it, and of every stream of the device after
``aclrtSynchronizeDevice``. An event synchronisation or a stream query does not apply them. Operators that
write back a view shape refuse stream capture (a replay could not write back a host-side shape).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from acl_core.tensor import AclTensor

DimsReader = Callable[[], Sequence[int]]
"""Reads the written-back view dims once the stream's work has completed (a device-to-host copy is fine)."""

_CACHED = ("layout", "layout_id", "numel", "overlaps_itself")
"""AclTensor's cached properties that depend on the view dims."""


def set_view_dims(tensor: AclTensor, dims: Sequence[int]) -> None:
    """Give ``tensor`` the view dims ``dims`` (same rank), strides and offset kept.

    The operator keeps them within the maximal dims phase 1 validated (a repeatable executor may run again
    on an out its last run shrank, and grow it back up to those).
    """
    new = tuple(int(d) for d in dims)
    if len(new) != len(tensor.view_dims) or any(n < 0 for n in new):
        raise ValueError(f"written-back view dims {list(new)} do not fit a rank-{len(tensor.view_dims)} view")
    tensor.view_dims = new
    for name in _CACHED:
        tensor.__dict__.pop(name, None)


class ViewWriteback:
    """Pending view-shape write-backs, per driver stream, applied when the runtime completes that stream."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[object, list[tuple[AclTensor, DimsReader, Callable[[], None]]]] = {}

    def defer(
        self, stream: object, tensor: AclTensor, read: DimsReader, release: Callable[[], None] = lambda: None
    ) -> None:
        """At ``stream``'s next completion, set ``tensor``'s view dims to ``read()``; ``release`` then frees what
        ``read`` used (also when the stream is dropped without being read)."""
        with self._lock:
            self._pending.setdefault(stream, []).append((tensor, read, release))

    def pending(self, stream: object) -> int:
        """How many write-backs wait for ``stream``."""
        with self._lock:
            return len(self._pending.get(stream, ()))

    def complete(self, stream: object) -> None:
        """Apply the write-backs of ``stream``, whose work the caller has waited for, in enqueue order."""
        with self._lock:
            entries = self._pending.pop(stream, [])
        for tensor, read, release in entries:
            try:
                set_view_dims(tensor, read())
            finally:
                release()

    def complete_all(self, streams: Callable[[object], bool] = lambda _: True) -> None:
        """Apply the write-backs of every stream ``streams`` accepts (the caller has synchronised them)."""
        with self._lock:
            keys = [s for s in self._pending if streams(s)]
        for stream in keys:
            self.complete(stream)
