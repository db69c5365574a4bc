"""What every stand-in for the cuDNN frontend module shares (the CPU tests of rocm's cuDNN paths).

Each test file subclasses it with the graph surface its path builds (``pygraph`` and the enums it reads).
"""

from __future__ import annotations

from types import SimpleNamespace


class FakeFrontend:
    """The frontend's version, handle and stream calls, with the streams set recorded."""

    __version__ = "1.32.0"
    heur_mode = SimpleNamespace(A="A", FALLBACK="FALLBACK")

    def __init__(self) -> None:
        self.streams: list[int] = []

    def backend_version(self) -> int:
        return 91900

    def backend_version_string(self) -> str:
        return "9.19.0"

    def create_handle(self) -> object:
        return object()

    def set_stream(self, handle: object, stream: int) -> None:
        self.streams.append(stream)
