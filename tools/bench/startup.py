"""Start-up costs: ``import acl_core`` plus ``list_backends()`` in a fresh interpreter, and what it imports;
``acl-core qwen3 generate`` started cold (empty kernel and plan caches) and warm (``acl-core bench --suite startup``).
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_PROBE = """
import json, sys, time
t = time.perf_counter()
import acl_core
acl_core.list_backends()
elapsed = time.perf_counter() - t
vendor = sorted({m.split('.')[0] for m in sys.modules} & {'hip', 'cuda', 'cupy', 'torch', 'nvmath', 'nccl', 'mpi4py'})
print(json.dumps({"seconds": elapsed, "vendor": vendor}))
"""


def measure_startup(runs: int = 5) -> dict[str, Any]:
    """Median over ``runs`` fresh interpreters of import + listing time, and the vendor modules they loaded."""
    listing: list[float] = []
    vendor: set[str] = set()
    for _ in range(runs):
        out = json.loads(
            subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True).stdout
        )
        listing.append(out["seconds"])
        vendor.update(out["vendor"])
    return {
        "import_and_list_ms": statistics.median(listing) * 1e3,
        "runs": runs,
        "vendor_modules": sorted(vendor),
    }


class StartupError(RuntimeError):
    """A measured ``acl-core qwen3 generate`` process failed (its exit status and the tail of its stderr)."""


def generate_command(
    model: Path, out: Path, *, backend: str | None, dtype: str, prompt: Sequence[int], new_tokens: int
) -> list[str]:
    """The measured command: ``acl-core qwen3 generate`` writing its JSON (timings, cache counters) to ``out``."""
    command = [sys.executable, "-m", "acl_core", "qwen3", "generate", "--model", str(model), "--dtype", dtype]
    command += ["--prompt-ids", ",".join(str(t) for t in prompt), "--max-new-tokens", str(new_tokens)]
    command += ["--ignore-eos", "--quiet", "--json", str(out)]
    return command + (["--backend", backend] if backend else [])


def cache_env(kernel_cache: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a measured process: kernels in ``kernel_cache``, plans beside them (plans/)."""
    env = dict(os.environ if environ is None else environ)
    env["ACL_KERNEL_CACHE"] = str(kernel_cache)
    env.pop("ACL_PLAN_CACHE", None)  # the plan cache follows the kernel cache: both start empty, both warm up
    return env


def summarise(report: Mapping[str, Any], started: float, ended: float) -> dict[str, Any]:
    """One row of the startup table from a generate JSON report and the parent's clock around the process."""
    caches = report.get("caches") or {}
    kernels = caches.get("kernels") or {}
    plans = caches.get("plans") or {}

    def total(name: str) -> int:
        return int((plans.get(name) or {}).get("all", 0))

    return {
        "wall_s": ended - started,
        "first_token_s": float(report["first_token_clock"]) - started,
        "prefill_s": report["prefill_s"],
        "decode_s": report["decode_s"],
        "kernels_compiled": int(kernels.get("compiles", 0)),
        "kernels_from_disk": int(kernels.get("disk_hits", 0)),
        "plans_made": total("made"),
        "plans_loaded": total("loaded"),
        "plans_refused": total("refused"),
        "plans_ignored": total("ignored"),
        "plans_made_by_kind": {k: v for k, v in (plans.get("made") or {}).items() if k != "all"},
        "caches_reported": bool(caches),
        "tokens": report["tokens"],
    }


def measure_cold_warm(
    model: Path,
    *,
    backend: str | None = None,
    dtype: str = "fp32",
    prompt: Sequence[int] = (1, 2, 3, 4, 5, 6, 7, 8),
    new_tokens: int = 8,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """``acl-core qwen3 generate`` in two fresh processes: against an empty kernel and plan cache, then warm.

    The caches live in a new temporary directory (removed afterwards), so the user's own caches are
    neither read nor emptied. Each row has the wall time of the process, the time from its start to
    its first token, and what it compiled and planned (the backend's own counters, written by generate
    into its JSON report: 0 on a backend with no compiler or library plans, such as the reference).
    """
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="acl-startup-") as tmp:
        env = cache_env(Path(tmp) / "kernels")
        for phase in ("cold", "warm"):
            out = Path(tmp) / f"{phase}.json"
            command = generate_command(model, out, backend=backend, dtype=dtype, prompt=prompt, new_tokens=new_tokens)
            started = time.monotonic()
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
            ended = time.monotonic()
            if done.returncode != 0:
                raise StartupError(
                    f"{phase} start: {shlex.join(command)} exited {done.returncode}: {done.stderr.strip()[-2000:]}"
                )
            report = json.loads(out.read_text())
            rows[phase] = summarise(report, started, ended)
            rows.setdefault("backend", report["backend"])
            rows.setdefault("attention", report["attention"])
    cold, warm = rows["cold"], rows["warm"]
    return {
        "model": str(model),
        "backend": rows["backend"],
        "dtype": dtype,
        "attention": rows["attention"],
        "prompt_tokens": len(prompt),
        "new_tokens": new_tokens,
        "cold": cold,
        "warm": warm,
        "same_tokens": cold["tokens"] == warm["tokens"],
        "warm_first_token_saving_s": cold["first_token_s"] - warm["first_token_s"],
        "warm_wall_saving_s": cold["wall_s"] - warm["wall_s"],
    }
