"""GPU time of InplaceNormal's packed float32 fill under each ``ACL_RANDOM_NORMAL`` transform, and where it goes.

Each row launches one kernel over a ``--mib`` float32 buffer ``REPS`` times back to back between two events (a
fill takes hundreds of µs: launch gaps are noise) and prints GPU µs per fill and the bytes written per second:

* ``split``, ``sincos``, ``float32``, ``float32p``: the runner's own fill kernels (a ``+ilpN`` suffix: float32p
  with N Philox blocks a thread instead of its 16-byte default);
* ``philox``: float32p's grid and stores, each block's words xor-folded into two (w0^w1, w2^w3), no transform:
  the Philox cost with the same bytes written;
* ``hash``: float32p's transform and stores on words from a two-multiply hash instead of Philox: the transform's
  cost;
* ``store``: float32p's grid storing a constant: the memory floor;
* ``torch``: ``torch.Tensor.normal_`` on the same device, when torch is importable (the issue 16 bar).

The fills' first 2^16 values are checked against the reference (the class's tolerance, loosely: 2^-18·(|z|+1)).
Usage: python scripts/random_fill_bench.py [--mib 256] [--variants split,float32,float32p,...] [--out FILE]
(``--emulate``: the CPU kernel emulator with a tiny buffer, to check the script).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.random import LAYOUT_ENV
from acl_rocm.driver import handle
from acl_rocm.kernels.random import FLOAT32P, NORMAL_TRIG, PHILOX_RK, Fill, _meta, _source
from acl_rocm.launch import KernelArgs
from acl_rocm.ops.random import stream_args, stream_keys
from acl_rocm.ops.sort import address

REPS = 50
SEED, OFFSET = 1234, 5
PROBES = ("philox", "hash", "store")
_PROBE_BODY = {
    "philox": [
        "unsigned int w[4];",
        "acl_rnd_block_rk(g, (unsigned long long)(j * 2 + h), w);",
        "x.v[2 * h] = __uint_as_float(w[0] ^ w[1]);",
        "x.v[2 * h + 1] = __uint_as_float(w[2] ^ w[3]);",
    ],
    "hash": [
        "unsigned int w[4];",
        "for (int i = 0; i < 4; ++i) {",
        "  unsigned int k = (unsigned int)((j * 2 + h) * 4 + i) ^ g.k[0];",
        "  k *= 0x9E3779B1u; k ^= k >> 15; k *= 0x85EBCA77u; w[i] = k ^ (k >> 13);",
        "}",
        "float z0, z1;",
        "acl_rnd_normal_f32p(w, z0, z1);",
        "x.v[2 * h] = fmaf((float)b, z0, (float)a);",
        "x.v[2 * h + 1] = fmaf((float)b, z1, (float)a);",
    ],
    "store": ["x.v[2 * h] = (float)a;", "x.v[2 * h + 1] = (float)b;"],
}


def probe_source(kind: str) -> tuple[str, str]:
    """(source, name) of a diagnostic kernel: float32p's grid (2 blocks, 16 bytes a thread) and ``kind``'s body."""
    name = f"acl_rnd_probe_{kind}"
    params = ["const Meta m", "float* out", f"const {'AclRnd' if kind == 'store' else 'AclRndKeys'} g"]
    params += ["const double a", "const double b"]
    body = [
        "const long long step = (long long)gridDim.x * blockDim.x;",
        "for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < m.n / 4; j += step) {",
        "  AclVec<float, 4> x;",
        "  for (int h = 0; h < 2; ++h) {",
        *("    " + line for line in _PROBE_BODY[kind]),
        "  }",
        "  *reinterpret_cast<AclVec<float, 4>*>(out + j * 4) = x;",
        "}",
    ]
    extra = PHILOX_RK + (FLOAT32P if kind == "hash" else "")
    return _source(f"bench probe: {kind}", _meta(1, 1), name, params, body, extra), name


def _device(emulate: bool) -> Any:
    if emulate:
        import tempfile

        from tests.rocm.kernel_emulator import EmulatedProvider, emulated_backend

        return emulated_backend(Path(tempfile.mkdtemp()), EmulatedProvider())
    import acl_core

    backend = acl_core.get_backend("rocm")
    backend.runtime.ensure_device(0)
    return backend


def _kernel(backend: Any, variant: str, n: int) -> tuple[object, Any, bool]:
    """(loaded function, launch config, whether it takes AclRndKeys) of a variant."""
    trig, _, ilp = variant.partition("+ilp")
    if trig in PROBES:
        source, name = probe_source(trig)
        per_thread, keyed = 4, trig != "store"
    else:
        fill = Fill("normal", D.ACL_FLOAT, 1, "packed", trig, int(ilp or 0))
        source, name, per_thread, keyed = fill.source(), fill.kernel_name, fill.per_thread, fill.keyed
    return backend.function(source, name), backend.elementwise_config(-(-n // per_thread), 1), keyed


def time_variant(backend: Any, variant: str, out: Any, n: int, reps: int) -> float:
    """GPU µs per fill of ``out`` (n float32) by ``variant``, over ``reps`` back-to-back launches after a warm-up."""
    function, cfg, keyed = _kernel(backend, variant, n)
    meta = KernelArgs.index_array([n, n, 1], "long long")
    g = stream_keys(SEED, OFFSET) if keyed else stream_args(SEED, OFFSET)
    values: list[object] = [meta, KernelArgs.pointer(address(out.tensor())), g]
    args = KernelArgs([*values, ctypes.c_double(0.0), ctypes.c_double(1.0)])
    rt = backend.runtime
    s = rt.create_stream()
    stream = handle(rt.stream(s))
    events = (rt.create_event(), rt.create_event())
    try:
        backend.provider.launch(function, cfg.grid, cfg.block, 0, stream, args.address)  # warm-up
        rt.record_event(events[0], s)
        for _ in range(reps):
            backend.provider.launch(function, cfg.grid, cfg.block, 0, stream, args.address)
        rt.record_event(events[1], s)
        rt.synchronize_event(events[1])
        return float(rt.event_elapsed_time(events[0], events[1]) * 1e3 / reps)
    finally:
        rt.synchronize_stream(s)
        for e in events:
            rt.destroy_event(e)
        rt.destroy_stream(s)


def time_torch(n: int, reps: int) -> float | None:
    """GPU µs per ``normal_`` of n float32 on cuda:0, or None without torch / a GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    x = torch.empty(n, dtype=torch.float32, device="cuda")
    x.normal_()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        x.normal_()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end) * 1e3 / reps)


def _check(variant: str, got: np.ndarray) -> bool:
    """The first values: a fill's against the reference's N(0, 1), the philox probe's against the reference's words,
    the store probe's constants, the hash probe's finite."""
    from acl_reference.kernels.random import block_words, normal_values

    kind = variant.partition("+")[0]
    if kind == "philox":
        w0, w1, w2, w3 = block_words(SEED, OFFSET, np.arange(got.size // 2, dtype=np.uint64))
        want = np.stack([w0 ^ w1, w2 ^ w3], axis=1).reshape(-1).astype(np.uint32)
        return bool(np.array_equal(got.view(np.uint32), want))
    if kind == "store":
        return bool(np.array_equal(got, np.tile(np.array([0.0, 1.0], np.float32), got.size // 2)))
    if kind == "hash":
        return bool(np.isfinite(got).all())
    want = normal_values(SEED, OFFSET, got.size, 0.0, 1.0)
    return bool(np.all(np.abs(got.astype(np.float64) - want) <= 2.0**-18 * (np.abs(want) + 1)))


def main(argv: list[str]) -> int:
    """Time every variant (and torch); print JSON lines and a table; exit 1 if a fill disagrees with the reference."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = ",".join([*NORMAL_TRIG, "float32p+ilp1", "float32p+ilp4", *PROBES])
    p.add_argument("--variants", default=default, help="comma-separated transforms (ACL_RANDOM_NORMAL) and probes")
    p.add_argument("--mib", type=float, default=256.0, help="float32 buffer size in MiB")
    p.add_argument("--out", type=Path, default=None, help="JSON file of all rows")
    p.add_argument("--emulate", action="store_true", help="CPU kernel emulator, a tiny buffer (checks the script)")
    args = p.parse_args(argv)
    os.environ[LAYOUT_ENV] = "packed"  # the kernels timed are the packed layout's: the reference checks that one
    backend = _device(args.emulate)
    n = 4096 if args.emulate else int(args.mib * (1 << 20)) // 4 // 4 * 4
    reps = 1 if args.emulate else REPS
    name = backend.provider.device_properties(0).name if hasattr(backend.provider, "device_properties") else "?"
    out = eager.empty((n,), D.ACL_FLOAT, backend)
    rows: list[dict[str, Any]] = []
    torch_us = None if args.emulate else time_torch(n, reps)
    if torch_us is not None:
        rows.append(
            {"variant": "torch", "n": n, "gpu_us": round(torch_us, 2), "gb_s": round(4 * n / torch_us / 1e3, 1)}
        )
        print(json.dumps(rows[-1]), flush=True)
    bad = 0
    for variant in args.variants.split(","):
        t0 = time.perf_counter()
        us = time_variant(backend, variant, out, n, reps)
        ok = _check(variant, out.numpy()[: 1 << 16])
        bad += not ok
        row = {"variant": variant, "n": n, "gpu_us": round(us, 2), "gb_s": round(4 * n / us / 1e3, 1), "ok": ok}
        if torch_us is not None:
            row["vs_torch"] = round(us / torch_us, 3)
        row["wall_s"] = round(time.perf_counter() - t0, 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out.free()
    print(f"device: {name}")
    for r in rows:
        vs = f"  {r['vs_torch']:.3f}x torch" if "vs_torch" in r else ""
        wrong = "" if r.get("ok", True) else "  WRONG"
        print(f"{r['variant']:16s} {r['gpu_us']:9.2f} us {r['gb_s']:7.1f} GB/s{vs}{wrong}")
    if args.out:
        args.out.write_text(json.dumps({"device": name, "rows": rows}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
