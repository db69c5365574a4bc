"""GPU time per launch of the nk GEMV kernel under each ``ACL_GEMV_CONFIG`` choice, on Qwen3-0.6B's decode weights.

Eager timings of a 5 µs kernel measure the host; this captures ``CHAIN`` launches of one planned GEMV (the
runner's own plan and launch, the weight [N, K] bf16 used transposed, cycling through copies of it whose
total exceeds L2 as decode's 28 layers do) into a graph, replays it ``REPLAYS``
times between two events and reports GPU µs per launch and the weight bytes per second it implies (the
activation and output are a rounding error beside the weight). Each config's result is also checked
against the ``legacy`` choice's within bf16 rounding. One JSON line per (config, shape, M), then a table.

Usage: python scripts/gemv_config_bench.py [--configs legacy,w16,deep] [--rows 1,8] [--shapes down,o] [--out FILE]
(``--emulate --cold-mib 0.1``: the CPU kernel emulator with a tiny shape and 3 weight copies, to check the script).
"""

from __future__ import annotations

import argparse
import json
import math
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

SHAPES = {
    "gate_up": (1024, 6144),
    "qkv": (1024, 4096),
    "down": (3072, 1024),
    "o": (2048, 1024),
    "lm_head": (1024, 151_936),
}
"""Qwen3-0.6B's layer weights [N, K] and its vocabulary head as (K, N)."""
CHAIN, REPLAYS = 50, 20
COLD_MIB = 256
"""Weight copies per shape cycled through the chain: well above an H100's 50 MB / H200's L2, so launches read HBM."""


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
    backend: RocmBackend, a: Any, weights: list[Any], out: Any, chain: int, replays: int
) -> tuple[float, np.ndarray, str]:
    """(GPU µs per launch, output, kernel shape) of the planned nk GEMV of ``a`` by each weight copy in turn."""
    rt, driver = backend.runtime, backend.driver
    s = rt.create_stream()
    stream = rt.stream(s)
    events = (rt.create_event(), rt.create_event())
    graph = None
    try:
        plan = {"compute": D.ACL_BF16, "precision": None}
        calls = []
        for w in weights:
            tensors = {"self": a.tensor(), "mat2": w.tensor(), "out": out.tensor()}
            call = backend.matmul._gemv(Launch(get_spec("Mm"), tensors, plan, 0, 0, stream))
            if call is None:
                raise RuntimeError(f"{a.shape} x {w.shape}: the GEMV path was not taken")
            calls.append(call)
        backend.matmul._gemv_launch(calls[0], handle(stream))
        rt.synchronize_stream(s)
        result = out.numpy()
        launches = max(chain, len(calls))
        driver.capture_begin(stream, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
        try:
            for i in range(launches):  # weight copies in turn: their total exceeds L2, so each launch reads HBM
                backend.matmul._gemv_launch(calls[i % len(calls)], handle(stream))
        finally:
            graph = driver.capture_end(stream)
        driver.graph_launch(graph, stream)  # warm-up
        rt.record_event(events[0], s)
        for _ in range(replays):
            driver.graph_launch(graph, stream)
        rt.record_event(events[1], s)
        rt.synchronize_event(events[1])
        us = rt.event_elapsed_time(events[0], events[1]) * 1e3 / (launches * replays)
    finally:
        rt.synchronize_stream(s)
        if graph is not None:
            driver.graph_destroy(graph)
        for e in events:
            rt.destroy_event(e)
        rt.destroy_stream(s)
    kern = calls[0].kernel
    shape = f"{calls[0].policy}: tile={kern.tile} ksplit={kern.ksplit} unroll={kern.unroll}"
    shape += f" block={kern.block}"
    shape += f" grid={calls[0].grid} pdl={kern.pdl or 'off'}"
    return us, np.asarray(result), shape


def main(argv: list[str]) -> int:
    """Time every (config, shape, M); print JSON lines and a table; exit 1 if a config disagrees with legacy."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default=",".join(PRESETS), help="ACL_GEMV_CONFIG settings, ';'-separated (or ',')")
    p.add_argument("--rows", default="1,8", help="activation rows M, comma-separated")
    p.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    p.add_argument("--cold-mib", type=float, default=COLD_MIB, help="weight copies cycled per shape (MiB, > L2)")
    p.add_argument("--out", type=Path, default=None, help="JSON file of all rows")
    p.add_argument("--emulate", action="store_true", help="CPU kernel emulator, tiny shapes (checks the script)")
    args = p.parse_args(argv)
    configs = args.configs.split(";") if ";" in args.configs else args.configs.split(",")
    configs = ["legacy", *[c for c in configs if c != "legacy"]]
    device = _device(args.emulate)
    shapes = {"tiny": (1040, 24)} if args.emulate else {s: SHAPES[s] for s in args.shapes.split(",")}
    chain, replays = (2, 2) if args.emulate else (CHAIN, REPLAYS)
    name = device.provider.device_properties(0).name if hasattr(device.provider, "device_properties") else "?"
    backends = {}
    for config in configs:
        backends[config] = RocmBackend(device.provider, {**os.environ, "ACL_GEMV": "1", "ACL_GEMV_CONFIG": config})
        backends[config].runtime.ensure_device(0)
    rows: list[dict[str, Any]] = []
    bad = 0
    for shape, (k, n) in shapes.items():
        rng = np.random.default_rng(k + n)
        wh = rng.uniform(-1, 1, (k, n)).astype(ml_dtypes.bfloat16)
        copies = max(1, math.ceil(args.cold_mib * (1 << 20) / (2 * k * n)))
        weights = [eager.to_device(wh, device, layout="transposed") for _ in range(copies)]
        for m in (int(r) for r in args.rows.split(",")):
            x = rng.uniform(-1, 1, (m, k)).astype(ml_dtypes.bfloat16)
            exact = x.astype(np.float64) @ wh.astype(np.float64)
            scale = float(np.max(np.abs(exact))) or 1.0
            a, out = eager.to_device(x, device), eager.empty((m, n), D.ACL_BF16, device)
            ref = None
            for config in configs:
                us, got, kshape = time_one(backends[config], a, weights, out, chain, replays)
                ref = got if ref is None else ref
                diff = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
                err = float(np.max(np.abs(got.astype(np.float64) - exact)))
                ok = diff <= scale * 2.0**-6 and err <= scale * 2.0**-6  # a few bf16 ulps of the largest output
                bad += not ok
                row = {"config": config, "shape": shape, "m": m, "k": k, "n": n, "kernel": kshape}
                row |= {"gpu_us": round(us, 3), "weight_tb_s": round(2 * k * n / us / 1e6, 3), "copies": copies}
                row |= {"max_diff_vs_legacy": diff, "max_err": err, "ok": ok}
                rows.append(row)
                print(json.dumps(row), flush=True)
            a.free()
            out.free()
        for w in weights:
            w.free()
    print(f"device: {name}")
    for r in sorted(rows, key=lambda r: (r["shape"], r["m"], r["gpu_us"])):
        line = f"{r['shape']:8s} M{r['m']:<3d} {r['config']:20s} {r['gpu_us']:8.2f} us {r['weight_tb_s']:6.2f} TB/s"
        print(f"{line}  {r['kernel']}{'' if r['ok'] else '  WRONG'}")
    if args.out:
        args.out.write_text(json.dumps({"device": name, "rows": rows}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
