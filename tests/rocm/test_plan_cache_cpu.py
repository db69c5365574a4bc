"""The on-disk plan store: round trip, key sensitivity, damaged and foreign files, concurrent writers, bounds."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest

from acl_rocm import plan_cache
from acl_rocm.plan_cache import MAGIC, PlanCache, plan_cache_dir, plan_key

FIELDS: dict[str, Any] = {
    "device": {"name": "NVIDIA H200", "arch": "sm_90", "platform": "nvidia"},
    "cublasLt": 130100,
    "recipe": 1,
    "operands": [[1, 64, 64, 64, 0, False, 256], [1, 64, 64, 64, 0, True, 256], [1, 64, 64, 64, 0, False, 256]],
    "workspace": 1 << 22,
}


def test_a_stored_plan_reads_back_in_another_cache_object(tmp_path: Path) -> None:
    writer = PlanCache(tmp_path)
    writer.store("cublaslt", FIELDS, b"\x01" * 64, {"uids": {"q": 1}})
    assert writer.stats.stored == {"cublaslt": 1}
    reader = PlanCache(tmp_path)  # another process, as far as the store can tell
    entry = reader.load("cublaslt", dict(reversed(list(FIELDS.items()))))  # field order does not matter
    assert entry is not None and entry.payload == b"\x01" * 64 and entry.meta == {"uids": {"q": 1}}
    assert reader.stats.loaded == {"cublaslt": 1} and not reader.stats.ignored
    assert reader.load("cudnn_sdpa", FIELDS) is None  # another kind is another key
    assert reader.stats.as_dict()["loaded"] == {"cublaslt": 1, "all": 1}


@pytest.mark.parametrize(
    "change",
    [
        {"device": {"name": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "platform": "nvidia"}},
        {"device": {"name": "NVIDIA H200", "arch": "sm_100", "platform": "nvidia"}},
        {"cublasLt": 130101},
        {"recipe": 2},
        {"workspace": 1 << 21},
        {"operands": [[1, 64, 64, 64, 0, False, 128], *FIELDS["operands"][1:]]},  # one alignment
        {"operands": [[1, 64, 64, 64, 0, True, 256], *FIELDS["operands"][1:]]},  # one transpose
        {"extra": None},
    ],
)
def test_every_field_is_part_of_the_key(tmp_path: Path, change: dict[str, Any]) -> None:
    cache = PlanCache(tmp_path)
    cache.store("cublaslt", FIELDS, b"\x02" * 64)
    other = {**FIELDS, **change}
    assert plan_key("cublaslt", other) != plan_key("cublaslt", FIELDS)
    assert cache.load("cublaslt", other) is None and not cache.stats.ignored  # a miss, not a damaged file
    assert cache.load("cublaslt", FIELDS) is not None


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[:-10])
    elif how == "flipped":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    elif how == "garbage":
        path.write_bytes(b"not a plan at all")
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "header":
        path.write_bytes(MAGIC + (1000).to_bytes(4, "little") + b"{")
    elif how == "json":
        head = b"[1, 2]"
        path.write_bytes(MAGIC + len(head).to_bytes(4, "little") + head)


@pytest.mark.parametrize("how", ["truncated", "flipped", "garbage", "empty", "header", "json"])
def test_a_damaged_file_is_ignored_with_a_debug_line(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache = PlanCache(tmp_path)
    cache.store("cublaslt", FIELDS, b"\x03" * 64)
    path = cache.path("cublaslt", FIELDS)
    assert path is not None and path.is_file()
    _damage(path, how)
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.plan_cache"):
        assert cache.load("cublaslt", FIELDS) is None
    assert cache.stats.ignored == {"cublaslt": 1} and "ignoring" in caplog.text
    cache.store("cublaslt", FIELDS, b"\x04" * 64)  # planning afresh overwrites it
    entry = cache.load("cublaslt", FIELDS)
    assert entry is not None and entry.payload == b"\x04" * 64


def test_a_file_written_for_another_key_or_kind_is_ignored(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path)
    other = {**FIELDS, "workspace": 0}
    cache.store("cublaslt", other, b"\x05" * 64)
    src, dst = cache.path("cublaslt", other), cache.path("cublaslt", FIELDS)
    assert src is not None and dst is not None
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(src.read_bytes())  # a foreign file under this key's name
    assert cache.load("cublaslt", FIELDS) is None and cache.stats.ignored == {"cublaslt": 1}


def test_another_format_version_is_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = PlanCache(tmp_path)
    cache.store("cublaslt", FIELDS, b"\x06" * 64)
    path = cache.path("cublaslt", FIELDS)
    assert path is not None
    # the same name holding another version's header (a downgrade writing where this one reads)
    data = path.read_bytes()
    length = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 4], "little")
    start = len(MAGIC) + 4
    header = json.loads(data[start : start + length])
    header["format"] = "acl-rocm-plan-v0"
    head = json.dumps(header).encode()
    path.write_bytes(MAGIC + len(head).to_bytes(4, "little") + head + data[start + length :])
    assert cache.load("cublaslt", FIELDS) is None and cache.stats.ignored == {"cublaslt": 1}
    # a newer version keys its plans apart: this version's files are not even looked at
    monkeypatch.setattr(plan_cache, "FORMAT", "acl-rocm-plan-v99")
    assert cache.path("cublaslt", FIELDS) != path
    assert cache.load("cublaslt", FIELDS) is None and cache.stats.ignored == {"cublaslt": 1}


def test_the_store_is_bounded_and_keeps_the_recently_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan_cache, "PRUNE_EVERY", 1)
    cache = PlanCache(tmp_path, max_entries=4)
    for i in range(4):
        cache.store("cublaslt", {**FIELDS, "i": i}, bytes([i]) * 64)
    now = time.time()
    for i in range(4):  # distinct ages, oldest first, whatever the file system's time resolution
        path = cache.path("cublaslt", {**FIELDS, "i": i})
        assert path is not None
        os.utime(path, (now - 100 + i, now - 100 + i))
    assert cache.load("cublaslt", {**FIELDS, "i": 0}) is not None  # a read makes entry 0 the newest
    cache.store("cublaslt", {**FIELDS, "i": 4}, b"\x09" * 64)
    left = sorted(i for i in range(5) if cache.load("cublaslt", {**FIELDS, "i": i}) is not None)
    assert left == [0, 2, 3, 4]  # entry 1, the least recently used, went
    assert len(list(tmp_path.rglob("*.plan"))) == 4
    small = PlanCache(tmp_path / "bytes", max_bytes=3 * 700)
    for i in range(6):
        small.store("cudnn_sdpa", {**FIELDS, "i": i}, bytes(500))
    total = sum(p.stat().st_size for p in (tmp_path / "bytes").rglob("*.plan"))
    assert 0 < total <= 3 * 700


def test_prune_removes_stale_temporaries_only(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path)
    cache.store("cublaslt", FIELDS, b"\x07" * 64)
    folder = tmp_path / "cublaslt" / "00"
    folder.mkdir(parents=True, exist_ok=True)
    stale, fresh = folder / ".tmp-dead.plan", folder / ".tmp-writing.plan"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    old = time.time() - 2 * plan_cache.STALE_TEMP_SECONDS
    os.utime(stale, (old, old))
    assert cache.prune() == 1
    assert not stale.exists() and fresh.exists() and cache.load("cublaslt", FIELDS) is not None


def test_an_unwritable_directory_is_not_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory would be")
    cache = PlanCache(blocker / "plans")
    cache.store("cublaslt", FIELDS, b"\x08" * 64)  # mkdir fails: logged, not raised
    assert not cache.stats.stored
    assert cache.load("cublaslt", FIELDS) is None and cache.stats.ignored == {"cublaslt": 1}  # unreadable, logged
    memory = PlanCache(None)  # ACL_PLAN_CACHE=off: counts, stores nothing
    memory.store("cublaslt", FIELDS, b"\x08" * 64)
    memory.made("cublaslt")
    assert memory.load("cublaslt", FIELDS) is None and memory.stats.made == {"cublaslt": 1}


def test_the_directory_follows_the_environment(tmp_path: Path) -> None:
    assert plan_cache_dir({"ACL_KERNEL_CACHE": str(tmp_path)}) == tmp_path / "plans"
    assert plan_cache_dir({"ACL_KERNEL_CACHE": str(tmp_path), "ACL_PLAN_CACHE": "/x/plans"}) == Path("/x/plans")
    assert plan_cache_dir({"ACL_PLAN_CACHE": "off"}) is None and plan_cache_dir({"ACL_PLAN_CACHE": "0"}) is None
    assert plan_cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "acl-core" / "kernels" / "plans"


def _writer(directory: str, worker: int, rounds: int) -> list[str]:
    """Store shared and own keys while reading them back; the problems found (none expected)."""
    cache = PlanCache(Path(directory))
    problems = []
    for r in range(rounds):
        shared = {**FIELDS, "shared": r % 5}
        cache.store("cublaslt", shared, bytes([worker]) * 4096, {"worker": worker})
        cache.store("cublaslt", {**FIELDS, "worker": worker, "r": r}, bytes([r % 256]) * 64)
        entry = cache.load("cublaslt", shared)
        if entry is None:
            problems.append(f"worker {worker} round {r}: shared entry missing")
        elif entry.payload != bytes([entry.meta["worker"]]) * 4096:
            problems.append(f"worker {worker} round {r}: torn entry")
    if cache.stats.ignored:
        problems.append(f"worker {worker}: {cache.stats.ignored} damaged reads")
    return problems


def test_concurrent_writers_never_leave_a_torn_or_temporary_file(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(4) as pool:
        results = pool.starmap(_writer, [(str(tmp_path), w, 40) for w in range(4)])
    assert [p for r in results for p in r] == []
    cache = PlanCache(tmp_path)
    for r in range(5):
        entry = cache.load("cublaslt", {**FIELDS, "shared": r})
        assert entry is not None and entry.payload == bytes([entry.meta["worker"]]) * 4096
    assert not list(tmp_path.rglob(".tmp-*"))
    assert len(list(tmp_path.rglob("*.plan"))) == 5 + 4 * 40
