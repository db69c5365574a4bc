"""Runtime compilation with an on-disk cache: a warm process never recompiles a kernel.

A code object is cached under a key hashed from the source, the options, the architecture and the
compiler version (and the platform), so changing any of them compiles afresh and nothing else does.
The cache lives in ``$ACL_KERNEL_CACHE`` or ``~/.cache/acl-core/kernels``; files are written to a
temporary name and renamed, so concurrent processes share it safely. Loaded kernels are kept per
device in memory.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

ENV_CACHE: Final = "ACL_KERNEL_CACHE"
CACHE_FORMAT: Final = "acl-rocm-kernel-v1"


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$ACL_KERNEL_CACHE``, else ``~/.cache/acl-core/kernels``."""
    env = os.environ if environ is None else environ
    configured = env.get(ENV_CACHE)
    if configured:
        return Path(configured)
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "acl-core" / "kernels"


def cache_key(source: str, options: tuple[str, ...], arch: str, compiler_version: str, platform: str = "") -> str:
    """The hex key of one compilation: it changes with the source, options, architecture or compiler."""
    h = hashlib.sha256()
    for part in (CACHE_FORMAT, platform, compiler_version, arch, "\x1f".join(options), source):
        data = part.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


CompileFn = Callable[[str, str, tuple[str, ...], str], bytes]


@dataclass
class CacheStats:
    """How requests were served (for tests and benchmarks)."""

    memory_hits: int = 0
    disk_hits: int = 0
    compiles: int = 0


@dataclass
class KernelCache:
    """Code objects by key: memory first, then disk, then the compiler."""

    compile_fn: CompileFn
    arch: str
    compiler_version: str
    platform: str
    directory: Path | None = None
    stats: CacheStats = field(default_factory=CacheStats)

    def __post_init__(self) -> None:
        self._images: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def path(self, key: str) -> Path | None:
        """Where the code object of ``key`` is kept on disk (None when disk caching is off)."""
        if self.directory is None:
            return None
        return self.directory / key[:2] / f"{key}.bin"

    def key(self, source: str, options: tuple[str, ...], arch: str | None = None) -> str:
        """The cache key of ``source`` compiled with ``options`` here (for ``arch`` where given)."""
        return cache_key(source, options, arch or self.arch, self.compiler_version, self.platform)

    def image(self, source: str, name: str, options: tuple[str, ...], arch: str | None = None) -> tuple[str, bytes]:
        """(key, code object) of ``source``: from memory, from disk, or compiled and stored.

        ``arch``: a target other than the device's own (an arch-specific one such as ``sm_90a``, for a kernel
        whose instructions only it has); None: the device's."""
        target = arch or self.arch
        key = self.key(source, options, target)
        with self._lock:
            cached = self._images.get(key)
            if cached is not None:
                self.stats.memory_hits += 1
                return key, cached
        path = self.path(key)
        if path is not None:
            try:
                data = path.read_bytes()
            except OSError:
                data = b""
            if data:
                with self._lock:
                    self._images[key] = data
                    self.stats.disk_hits += 1
                return key, data
        data = self.compile_fn(source, name, options, target)
        with self._lock:
            self._images[key] = data
            self.stats.compiles += 1
        if path is not None:
            store_atomically(path, data)
        return key, data


def store_atomically(path: Path, data: bytes) -> OSError | None:
    """Write ``data`` to ``path`` atomically (temporary file, then rename); the OSError of a read-only or full disk
    is returned, not raised (a cache that cannot be written is not an error)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix or ".bin")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        return exc
    return None
