"""Fixtures of the Qwen3 tests: one tiny random checkpoint per session, transformers models, runners."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import transformers  # noqa: F401 - the Qwen3 tests compare with transformers (a dev dependency: never skipped)

import acl_core
from acl_tools.qwen3 import hf
from acl_tools.qwen3.model import Qwen3Runner
from acl_tools.qwen3.parity import default_prompt


@pytest.fixture(scope="session")
def reference_backend() -> Iterator[str]:
    """Select the reference backend for the front ends while these tests run; restore the default after."""
    acl_core.use_backend("reference")
    yield "reference"
    acl_core.use_backend(None)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen3 checkpoint (2 layers, hidden 64, 4/2 heads, head dim 16, vocab 256, tied)."""
    return hf.make_checkpoint(tmp_path_factory.mktemp("qwen3") / "tiny", preset="tiny", seed=0)


@pytest.fixture(scope="session")
def prompt() -> list[int]:
    """The parity command's default prompt for the tiny vocabulary."""
    return default_prompt(256)


@pytest.fixture(scope="session")
def hf_model(tiny_dir: Path) -> Callable[[str], Any]:
    """``hf_model(dtype)``: transformers' model of the tiny checkpoint (loaded once per dtype)."""
    models: dict[str, Any] = {}

    def get(dtype: str) -> Any:
        if dtype not in models:
            models[dtype] = hf.load_model(tiny_dir, dtype)
        return models[dtype]

    return get


@pytest.fixture(scope="session")
def runner(tiny_dir: Path, reference_backend: str) -> Iterator[Callable[..., Qwen3Runner]]:
    """``runner(dtype, **options)``: the tiny checkpoint on the reference backend (made once per setting)."""
    made: dict[tuple[Any, ...], Qwen3Runner] = {}

    def get(dtype: str = "fp32", **options: Any) -> Qwen3Runner:
        key = (dtype, *sorted(options.items()))
        if key not in made:
            made[key] = Qwen3Runner(tiny_dir, backend=reference_backend, dtype=dtype, **options)
        return made[key]

    yield get
    for r in made.values():
        r.close()
