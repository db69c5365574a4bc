"""The kernel cache: keys sensitive to everything that changes a code object, and nothing recompiled twice."""

from __future__ import annotations

from pathlib import Path

from acl_rocm.compiler import ENV_CACHE, KernelCache, cache_dir, cache_key

BASE = ("src", ("-O3",), "sm_90", "nvrtc 13.0", "nvidia")


def test_key_is_stable_and_sensitive_to_every_input() -> None:
    key = cache_key(*BASE)
    assert key == cache_key(*BASE) and len(key) == 64
    variants = [
        ("src ", ("-O3",), "sm_90", "nvrtc 13.0", "nvidia"),
        ("src", ("-O2",), "sm_90", "nvrtc 13.0", "nvidia"),
        ("src", ("-O3", "-DX=1"), "sm_90", "nvrtc 13.0", "nvidia"),
        ("src", ("-O3",), "sm_89", "nvrtc 13.0", "nvidia"),
        ("src", ("-O3",), "sm_90", "nvrtc 13.1", "nvidia"),
        ("src", ("-O3",), "sm_90", "nvrtc 13.0", "amd"),
    ]
    keys = {cache_key(*v) for v in variants}
    assert len(keys) == len(variants) and key not in keys
    assert cache_key("ab", ("c",), "x", "y") != cache_key("a", ("bc",), "x", "y")  # no ambiguity at boundaries


def _counting() -> tuple[list[str], object]:
    calls: list[str] = []

    def compile_fn(source: str, name: str, options: tuple[str, ...], arch: str) -> bytes:
        calls.append(name)
        return f"{arch}|{' '.join(options)}|{source}".encode()

    return calls, compile_fn


def test_memory_then_disk_then_compiler(tmp_path: Path) -> None:
    calls, fn = _counting()
    cache = KernelCache(fn, "sm_90", "nvrtc 13.0", "nvidia", tmp_path)  # type: ignore[arg-type]
    key, image = cache.image("kernel A", "a", ("-O3",))
    assert image == b"sm_90|-O3|kernel A" and calls == ["a"]
    assert cache.image("kernel A", "a", ("-O3",)) == (key, image)
    assert calls == ["a"] and cache.stats.memory_hits == 1
    stored = cache.path(key)
    assert stored is not None and stored.read_bytes() == image
    assert not [p for p in stored.parent.iterdir() if p.name.startswith(".tmp-")]
    fresh = KernelCache(fn, "sm_90", "nvrtc 13.0", "nvidia", tmp_path)  # type: ignore[arg-type]
    assert fresh.image("kernel A", "a", ("-O3",)) == (key, image)
    assert calls == ["a"] and fresh.stats.disk_hits == 1 and fresh.stats.compiles == 0
    other_compiler = KernelCache(fn, "sm_90", "nvrtc 13.1", "nvidia", tmp_path)  # type: ignore[arg-type]
    other_compiler.image("kernel A", "a", ("-O3",))
    assert calls == ["a", "a"] and other_compiler.stats.compiles == 1


def test_without_a_directory_only_memory_is_used() -> None:
    calls, fn = _counting()
    cache = KernelCache(fn, "gfx942", "hiprtc 6.4", "amd", None)  # type: ignore[arg-type]
    key, _ = cache.image("k", "k", ())
    assert cache.path(key) is None
    cache.image("k", "k", ())
    assert calls == ["k"]


def test_an_unwritable_cache_is_not_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    _, fn = _counting()
    cache = KernelCache(fn, "sm_90", "nvrtc 13.0", "nvidia", blocker)  # type: ignore[arg-type]
    assert cache.image("k", "k", ())[1].endswith(b"k")


def test_cache_location() -> None:
    assert cache_dir({ENV_CACHE: "/x/y"}) == Path("/x/y")
    assert cache_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/acl-core/kernels")
    assert cache_dir({}).parts[-3:] == (".cache", "acl-core", "kernels")
