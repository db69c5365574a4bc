"""``--only DecodeSplit``: the split path's opt-in settings become rows beside the default, the masked long cache."""

from __future__ import annotations

import pytest

from acl_tools.bench import decode


def _stand_in(monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    """The reference backend with a stand-in rocm attention runner recording the setting each launch ran under."""
    from acl_core import get_backend

    class Decode:
        def __init__(self) -> None:
            self.setting: str | None = None
            self.seen: set[str | None] = set()

        def use_config(self, setting: str | None) -> None:
            self.setting = setting

    class Runner:
        def __init__(self) -> None:
            self.decode = Decode()

    backend = get_backend("reference")
    runner = Runner()
    monkeypatch.setattr(backend, "runners", {"attention": runner}, raising=False)
    real = backend.launch

    def launch(*args: object, **kwargs: object) -> object:
        runner.decode.seen.add(runner.decode.setting)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "launch", launch)
    backend.runtime.ensure_device()  # what the bench's command line does before a suite
    return backend, runner


def test_split_settings_become_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row per length and setting (the default first), then the masked cache's default and pskip rows."""
    pytest.importorskip("torch")
    backend, runner = _stand_in(monkeypatch)
    body = decode.run(backend, "small", progress=lambda _line: None, only={"DecodeSplit"})  # type: ignore[arg-type]
    rows = [(c["op"], c["shape"]) for c in body["cases"]]
    skv = decode.SMALL_SHAPES["config_lengths"][0]
    plain = f"Skv{skv} N16/8 D128"
    expected = [("IncreFlashAttention split", plain)] + [
        (f"IncreFlashAttention split {s}", plain) for s in decode.SPLIT_OPT_CONFIGS
    ]
    masked = f"Skv{skv // 4}/{skv} N16/8 D128 masked"
    expected += [("IncreFlashAttention split", masked)]
    expected += [(f"IncreFlashAttention split {s}", masked) for s in decode.MASKED_SPLIT_CONFIGS]
    assert rows == expected
    assert all(c["status"] == "ok" for c in body["cases"])
    seen = runner.decode.seen  # type: ignore[attr-defined]
    assert seen >= set(decode.SPLIT_OPT_CONFIGS) | set(decode.MASKED_SPLIT_CONFIGS) | {None}
    assert runner.decode.setting is None  # type: ignore[attr-defined]


def test_the_environment_replaces_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("ACL_BENCH_DECODE_SPLIT", " two,pipe,pcomb ; fused,pipe ;")
    backend, _ = _stand_in(monkeypatch)
    body = decode.run(backend, "small", progress=lambda _line: None, only={"DecodeSplit"})  # type: ignore[arg-type]
    ops = [c["op"] for c in body["cases"] if "masked" not in c["shape"]]
    assert ops == ["IncreFlashAttention split", "IncreFlashAttention split two,pipe,pcomb",
                   "IncreFlashAttention split fused,pipe"]  # fmt: skip
