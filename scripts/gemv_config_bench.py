"""GPU time per launch of the nk GEMV kernel under each ``ACL_GEMV_CONFIG`` choice, on Qwen3-0.6B's decode weights.

Eager timings of a 5 µs kernel measure the host; this captures ``CHAIN`` launches of one planned GEMV (the
runner's own plan and launch, the weight [N, K] bf16 used transposed) into a graph, replays it ``REPLAYS``
times between two events and reports GPU µs per launch and the weight bytes per second it implies (the
activation and output are a rounding error beside the weight). Each config's result is also checked
against the ``legacy`` choice's within bf16 rounding. One JSON line per (config, shape, M), then a table.

Usage: python scripts/gemv_config_bench.py [--configs legacy,w16,deep] [--rows 1,8] [--out FILE]
(``--emulate``: the CPU kernel emulator with tiny shapes, to check the script itself).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acl_core import eager
from acl_core.backend import Launch
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_core.spec.runtime import CaptureMode
from acl_rocm.backend import RocmBackend
from acl_rocm.driver import handle
from acl_rocm.ops.gemv_config import PRESETS

SHAPES = {"gate_up": (1024, 6144), "qkv": (1024, 4096), "down": (3072, 1024), "o": (2048, 1024)}
"""Qwen3-0.6B's layer weights [N, K] as (K, N)."""
CHAIN, REPLAYS = 50, 20


def _device(emulate: bool) -> Any:
    if emulate:
        import tempfile

        from tests.rocm.kernel_emulator import EmulatedProvider, emulated_backend

        return emulated_backend(Path(tempfile.mkdtemp()), EmulatedProvider(blas=True))
    import acl_core

    backend = acl_core.get_backend("rocm")
    backend.runtime.ensure_device(0)
    return backend


def time_one(
    backend: RocmBackend, m: int, k: int, n: int, chain: int, replays: int
) -> tuple[float, np.ndarray, np.ndarray, str]:
    """(GPU µs per launch, output, float64 product, kernel shape) of the planned nk GEMV for ``m`` × [N, K]."""
    rng = np.random.default_rng(m * 31 + k + n)
    x = rng.uniform(-1, 1, (m, k)).astype(ml_dtypes.bfloat16)
    a = eager.to_device(x, backend)
    wh = rng.uniform(-1, 1, (k, n)).astype(ml_dtypes.bfloat16)
    w = eager.to_device(wh, backend, layout="transposed")
    out = eager.empty((m, n), D.ACL_BF16, backend)
    rt, driver = backend.runtime, backend.driver
    s = rt.create_stream()
    stream = rt.stream(s)
    events = (rt.create_event(), rt.create_event())
    graph = None
    try:
        plan = {"compute": D.ACL_BF16, "precision": None}
        launch = Launch(
            get_spec("Mm"), {"self": a.tensor(), "mat2": w.tensor(), "out": out.tensor()}, plan, 0, 0, stream
        )
        call = backend.matmul._gemv(launch)
        if call is None:
            raise RuntimeError(f"M{m} K{k} N{n}: the GEMV path was not taken")
        backend.matmul._gemv_launch(call, handle(stream))
        rt.synchronize_stream(s)
        result = out.numpy()
        driver.capture_begin(stream, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
        try:
            for _ in range(chain):
                backend.matmul._gemv_launch(call, handle(stream))
        finally:
            graph = driver.capture_end(stream)
        driver.graph_launch(graph, stream)  # warm-up
        rt.record_event(events[0], s)
        for _ in range(replays):
            driver.graph_launch(graph, stream)
        rt.record_event(events[1], s)
        rt.synchronize_event(events[1])
        us = rt.event_elapsed_time(events[0], events[1]) * 1e3 / (chain * replays)
    finally:
        rt.synchronize_stream(s)
        if graph is not None:
            driver.graph_destroy(graph)
        for e in events:
            rt.destroy_event(e)
        rt.destroy_stream(s)
        for arr in (a, w, out):
            arr.free()
    kern = call.kernel
    shape = f"tile={kern.tile} ksplit={kern.ksplit} unroll={kern.unroll} block={kern.block} grid={call.grid}"
    return us, np.asarray(result), x.astype(np.float64) @ wh.astype(np.float64), shape


def main(argv: list[str]) -> int:
    """Time every (config, shape, M); print JSON lines and a table; exit 1 if a config disagrees with legacy."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default=",".join(PRESETS), help="';'-separated ACL_GEMV_CONFIG settings")
    p.add_argument("--rows", default="1,8", help="activation rows M, comma-separated")
    p.add_argument("--out", type=Path, default=None, help="JSON file of all rows")
    p.add_argument("--emulate", action="store_true", help="CPU kernel emulator, tiny shapes (checks the script)")
    args = p.parse_args(argv)
    configs = args.configs.split(";") if ";" in args.configs else args.configs.split(",")
    device = _device(args.emulate)
    shapes = {"tiny": (1040, 24)} if args.emulate else SHAPES
    chain, replays = (2, 2) if args.emulate else (CHAIN, REPLAYS)
    name = device.provider.device_properties(0).name if hasattr(device.provider, "device_properties") else "?"
    rows: list[dict[str, Any]] = []
    bad = 0
    baseline: dict[tuple[str, int], np.ndarray] = {}
    for config in ["legacy", *[c for c in configs if c != "legacy"]]:
        env = {**os.environ, "ACL_GEMV": "1", "ACL_GEMV_CONFIG": config}
        backend = RocmBackend(device.provider, env)
        backend.runtime.ensure_device(0)
        for shape, (k, n) in shapes.items():
            for m in (int(r) for r in args.rows.split(",")):
                us, got, exact, kshape = time_one(backend, m, k, n, chain, replays)
                ref = baseline.setdefault((shape, m), got)
                diff = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
                scale = float(np.max(np.abs(ref.astype(np.float64)))) or 1.0
                err = float(np.max(np.abs(got.astype(np.float64) - exact)))
                ok = diff <= scale * 2.0**-6 and err <= scale * 2.0**-6  # a few bf16 ulps of the largest output
                bad += not ok
                row = {
                    "config": config,
                    "shape": shape,
                    "m": m,
                    "k": k,
                    "n": n,
                    "kernel": kshape,
                    "gpu_us": round(us, 3),
                }
                row |= {
                    "weight_tb_s": round(2 * k * n / us / 1e6, 3),
                    "max_diff_vs_legacy": diff,
                    "max_err": err,
                    "ok": ok,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"device: {name}")
    for r in rows:
        line = f"{r['config']:20s} {r['shape']:8s} M{r['m']:<3d} {r['gpu_us']:8.2f} us {r['weight_tb_s']:6.2f} TB/s"
        print(f"{line}  {r['kernel']}{'' if r['ok'] else '  WRONG'}")
    if args.out:
        args.out.write_text(json.dumps({"device": name, "rows": rows}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
