"""Host cost of the Qwen3 runner's prefill on the rocm backend, without a GPU (issue 15).

The rocm backend runs on the fake provider of tests/rocm (kernels recorded, not run; GEMMs recorded, not
computed; large stream-ordered temporaries handed out from one kept block), so what a prefill costs here
is acl-core's host path: aclnn's two phases, the rocm ops' planning and launch packing, plus the fake
provider's own bookkeeping (its rows are named ``fake_provider.py`` in the profile: not acl-core's).
It writes a random bf16 checkpoint of ``--layers`` layers (0.6B's head geometry, a small hidden size)
once, warms the shape up, times ``--repeat`` prefills (``generate(prompt, 1)``), counts the Python
garbage-collector pauses during them, and prints a cProfile of one more::

    .venv/bin/python scripts/profile_prefill.py --layers 28 --prompt-len 64
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import acl_core
from acl_core.backend import BackendRegistration
from acl_core.plugin import hookimpl
from acl_rocm.backend import RocmBackend
from tests.rocm.fake_provider import FakeProvider

NAME = "rocm-fake-profile"


class HostOnlyProvider(FakeProvider):
    """The fake provider with GEMMs recorded only and big temporaries (the 32 MiB GEMM workspace) kept."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._kept: dict[int, int] = {}

    def malloc_async(self, nbytes: int, stream: int) -> int:
        """A kept block for temporaries of 1 MiB or more (allocating them dominates otherwise), else a fresh one."""
        if nbytes >= 1 << 20:
            if nbytes not in self._kept:
                self._kept[nbytes] = self.malloc(nbytes)
            return self._kept[nbytes]
        return self.malloc(nbytes)

    def free_async(self, address: int, stream: int) -> None:
        """Keep the kept blocks; free the rest."""
        if address not in self._kept.values():
            super().free_async(address, stream)

    def _gemm_now(self, call: Any) -> None:
        self.gemms.append(call)


class Plugin:
    """A plugin whose one backend, registered as ``name``, is the given (host-only) one."""

    def __init__(self, backend: RocmBackend, name: str = NAME) -> None:
        self.backend, self.name = backend, name

    @hookimpl
    def acl_core_backends(self) -> list[BackendRegistration]:
        """The backend under ``name``."""
        return [BackendRegistration(self.name, lambda: self.backend, priority=-100)]


def main(argv: list[str] | None = None) -> int:
    """Time and profile prefills; print the numbers."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--top", type=int, default=40, help="profile rows printed")
    p.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "acl-qwen3-profile"))
    args = p.parse_args(argv)

    from acl_tools.qwen3 import hf
    from acl_tools.qwen3.model import Qwen3Runner

    ckpt = Path(args.dir) / f"layers{args.layers}"
    if not (ckpt / "config.json").exists():
        shape = {"num_hidden_layers": args.layers, "head_dim": 128, "num_attention_heads": 4, "num_key_value_heads": 2}
        hf.make_checkpoint(ckpt, preset="tiny", seed=0, dtype="bfloat16", overrides=shape)
    provider = HostOnlyProvider(blas=True, memory=1 << 33)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(Path(args.dir) / "kernels")})
    backend.runtime.ensure_device(0)
    acl_core.register_plugin(Plugin(backend))
    prompts = [[(7 * i + 13 * s) % 250 + 3 for i in range(args.prompt_len)] for s in range(args.batch)]
    with Qwen3Runner(ckpt, backend=NAME, dtype="bf16") as runner:
        runner.generate(prompts, 1)  # warm-up: the shape's decode state, prefill plan and kernels
        pauses: list[tuple[int, float]] = []
        started = [0.0]

        def watch(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                pauses.append((info["generation"], time.perf_counter() - started[0]))

        gc.callbacks.append(watch)
        try:
            runs = [runner.generate(prompts, 1) for _ in range(args.repeat)]
        finally:
            gc.callbacks.remove(watch)
        ms = sorted(g.prefill_seconds * 1e3 for g in runs)
        label = f"{args.layers} layers, batch {args.batch}, {args.prompt_len} tokens"
        print(f"{label}: prefill ms {[round(m, 1) for m in ms]}, median {ms[len(ms) // 2]:.1f}")
        calls = [getattr(g, "prefill_validations", "?") for g in runs]
        print(f"  phase-1 calls per prefill {calls}")
        paused = sum(t for _, t in pauses) * 1e3
        print(f"  gc pauses {len(pauses)} ({paused:.1f} ms in all), generations {[g for g, _ in pauses]}")
        profile = cProfile.Profile()
        profile.enable()
        runner.generate(prompts, 1)
        profile.disable()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
