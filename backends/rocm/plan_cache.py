"""Library plans kept on disk beside the kernel cache: a warm process asks no heuristic it asked before.

A *plan* is what a vendor library chooses for one call signature and would choose again in every
process: cuBLASLt's heuristic algorithm for a GEMM shape, a built cuDNN graph's execution plan. Each
entry is one file, ``<dir>/<kind>/<key[:2]>/<key>.plan``, whose key is the SHA-256 of everything that
makes the plan valid (the caller's fields: device name and architecture, library versions, the call's
full signature) together with this module's format version. A file holds::

    MAGIC | header length (u32 LE) | header (JSON: format, kind, canonical key, meta, size, sha256) | payload

and is written to a temporary name and renamed, so concurrent processes never read half a file.
Whatever does not read back exactly (another format version, a foreign or truncated file, a digest or
key mismatch, an unreadable directory) is ignored with a debug line on ``acl_rocm.plan_cache`` and
counted; the caller then plans afresh and overwrites it. The store is bounded: past ``max_entries``
files or ``max_bytes`` the least recently used (by modification time, refreshed on every read) are
removed, checked at a process's first store and every :data:`PRUNE_EVERY` stores after.

Location: ``$ACL_PLAN_CACHE``, else ``plans/`` inside the kernel cache (``$ACL_KERNEL_CACHE`` or
``~/.cache/acl-core/kernels``); ``ACL_PLAN_CACHE=off`` keeps plans in memory only. Removing the
directory clears it. The callers validate a loaded plan with the library before using it
(``cublasLtMatmulAlgoCheck``, cuDNN's deserialisation) and count what they made in :attr:`stats`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from acl_rocm.compiler import cache_dir, store_atomically

LOG = logging.getLogger("acl_rocm.plan_cache")

ENV_PLAN_CACHE: Final = "ACL_PLAN_CACHE"
FORMAT: Final = "acl-rocm-plan-v1"
"""Bumped whenever the file layout or a caller's recipe changes: older entries are then never read."""
MAGIC: Final = b"ACLPLAN\x01"
SUFFIX: Final = ".plan"
OFF: Final = frozenset({"0", "off", "none", "false", "no"})
MAX_ENTRIES: Final = 8192
MAX_BYTES: Final = 256 << 20
PRUNE_EVERY: Final = 32
STALE_TEMP_SECONDS: Final = 3600.0
_LEN = struct.Struct("<I")


def plan_cache_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """``$ACL_PLAN_CACHE``, else ``plans/`` in the kernel cache; None when ``ACL_PLAN_CACHE=off``."""
    env = os.environ if environ is None else environ
    configured = env.get(ENV_PLAN_CACHE)
    if configured is not None and configured.strip().lower() in OFF:
        return None
    if configured:
        return Path(configured)
    return cache_dir(env) / "plans"


def canonical(kind: str, fields: Mapping[str, Any]) -> str:
    """The exact text a key is hashed from (format version, kind, fields; sorted, no spaces)."""
    return json.dumps({"format": FORMAT, "kind": kind, "fields": fields}, sort_keys=True, separators=(",", ":"))


def plan_key(kind: str, fields: Mapping[str, Any]) -> str:
    """The hex key of one plan: it changes with the kind, any field, or the format version."""
    return hashlib.sha256(canonical(kind, fields).encode()).hexdigest()


@dataclass(frozen=True)
class PlanEntry:
    """One plan read back: the library's opaque bytes and the caller's small JSON side data."""

    payload: bytes
    meta: dict[str, Any]


@dataclass
class PlanStats:
    """Per-kind counters (for tests and the startup benchmark): what was planned, reused, refused."""

    made: dict[str, int] = field(default_factory=dict)
    """Plans made afresh (a heuristic query, a graph build)."""
    loaded: dict[str, int] = field(default_factory=dict)
    """Entries read back intact from disk."""
    refused: dict[str, int] = field(default_factory=dict)
    """Loaded entries the library refused (then made afresh, and counted in ``made`` too)."""
    stored: dict[str, int] = field(default_factory=dict)
    """Entries written."""
    ignored: dict[str, int] = field(default_factory=dict)
    """Files present but unreadable: corrupt, foreign, another format version, a key mismatch."""

    def as_dict(self) -> dict[str, dict[str, int]]:
        """Plain dictionaries, with totals under ``"all"``."""
        out: dict[str, dict[str, int]] = {}
        for name in ("made", "loaded", "refused", "stored", "ignored"):
            counts = dict(getattr(self, name))
            counts["all"] = sum(counts.values())
            out[name] = counts
        return out


class PlanCache:
    """Opaque plan bytes by (kind, fields): on disk when a directory is given, counted in any case."""

    def __init__(self, directory: Path | None, *, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self.directory = directory
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.stats = PlanStats()
        self._lock = threading.Lock()
        self._stores = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PlanCache:
        """The cache at :func:`plan_cache_dir` (in memory only when it is off)."""
        return cls(plan_cache_dir(environ))

    def _count(self, name: str, kind: str) -> None:
        with self._lock:
            counts: dict[str, int] = getattr(self.stats, name)
            counts[kind] = counts.get(kind, 0) + 1

    def made(self, kind: str) -> None:
        """Count a plan made afresh."""
        self._count("made", kind)

    def refused(self, kind: str, why: str) -> None:
        """Count (and log) a loaded plan the library refused; the caller makes one afresh."""
        LOG.debug("plan cache: the library refused a stored %s plan (%s); planning afresh", kind, why)
        self._count("refused", kind)

    def path(self, kind: str, fields: Mapping[str, Any]) -> Path | None:
        """Where the plan of ``fields`` is kept (None when the cache is in memory only)."""
        if self.directory is None:
            return None
        key = plan_key(kind, fields)
        return self.directory / kind / key[:2] / f"{key}{SUFFIX}"

    def load(self, kind: str, fields: Mapping[str, Any]) -> PlanEntry | None:
        """The stored plan of ``fields``, or None (absent, or ignored with a debug line when not intact)."""
        path = self.path(kind, fields)
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._ignore(kind, path, f"unreadable ({exc})")
            return None
        try:
            entry = _decode(data, kind, canonical(kind, fields))
        except (ValueError, KeyError, TypeError) as exc:  # json.JSONDecodeError and UnicodeDecodeError too
            self._ignore(kind, path, str(exc))
            return None
        try:
            os.utime(path)  # recently used: pruning removes the oldest first
        except OSError:
            pass
        self._count("loaded", kind)
        return entry

    def _ignore(self, kind: str, path: Path, why: str) -> None:
        LOG.debug("plan cache: ignoring %s (%s)", path, why)
        self._count("ignored", kind)

    def store(
        self, kind: str, fields: Mapping[str, Any], payload: bytes, meta: Mapping[str, Any] | None = None
    ) -> None:
        """Write the plan of ``fields`` atomically; a read-only or full disk is logged, never raised."""
        path = self.path(kind, fields)
        if path is None:
            return
        data = _encode(kind, canonical(kind, fields), bytes(payload), dict(meta or {}))
        error = store_atomically(path, data)
        if error is not None:
            LOG.debug("plan cache: could not store %s (%s)", path, error)
            return
        self._count("stored", kind)
        with self._lock:
            self._stores += 1
            due = self._stores % PRUNE_EVERY == 1 or PRUNE_EVERY == 1
        if due:
            self.prune()

    def prune(self) -> int:
        """Remove the least recently used entries past the bounds (and stale temporaries); how many went."""
        if self.directory is None or not self.directory.is_dir():
            return 0
        now = time.time()
        entries: list[tuple[float, int, str]] = []
        removed = 0
        for root, _dirs, files in os.walk(self.directory):
            for name in files:
                full = os.path.join(root, name)
                try:
                    st = os.stat(full)
                except OSError:
                    continue
                if name.startswith(".tmp-"):
                    if now - st.st_mtime > STALE_TEMP_SECONDS:  # a writer that died before its rename
                        removed += _unlink(full)
                elif name.endswith(SUFFIX):
                    entries.append((st.st_mtime, st.st_size, full))
        total = sum(size for _, size, _ in entries)
        entries.sort()
        count = len(entries)
        for _mtime, size, full in entries:
            if count <= self.max_entries and total <= self.max_bytes:
                break
            if _unlink(full):
                removed += 1
            count -= 1
            total -= size
        if removed:
            LOG.debug("plan cache: pruned %d files from %s", removed, self.directory)
        return removed


def _unlink(path: str) -> int:
    try:
        os.unlink(path)
    except OSError:  # another process pruned it first
        return 0
    return 1


def _encode(kind: str, key_text: str, payload: bytes, meta: dict[str, Any]) -> bytes:
    header = {
        "format": FORMAT,
        "kind": kind,
        "key": key_text,
        "meta": meta,
        "size": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return MAGIC + _LEN.pack(len(head)) + head + payload


def _decode(data: bytes, kind: str, key_text: str) -> PlanEntry:
    """The entry in ``data`` if it is intact and is the plan of ``key_text`` (ValueError saying why not)."""
    if not data.startswith(MAGIC):
        raise ValueError("not a plan file (magic)")
    start = len(MAGIC) + _LEN.size
    if len(data) < start:
        raise ValueError("truncated header length")
    (length,) = _LEN.unpack_from(data, len(MAGIC))
    if len(data) < start + length:
        raise ValueError("truncated header")
    header = json.loads(data[start : start + length].decode())
    if not isinstance(header, dict):
        raise ValueError("header is not an object")
    if header.get("format") != FORMAT:
        raise ValueError(f"format {header.get('format')!r}, not {FORMAT!r}")
    if header.get("kind") != kind or header.get("key") != key_text:
        raise ValueError("written for another key")
    payload = data[start + length :]
    if len(payload) != header["size"] or hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise ValueError("payload size or digest mismatch")
    meta = header.get("meta")
    if not isinstance(meta, dict):
        raise ValueError("meta is not an object")
    return PlanEntry(payload, meta)
