"""Command line of ``acl-core bench``."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import acl_core
from acl_core.backend import Backend
from acl_core.capabilities import Platform
from acl_core.errors import AclCoreError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="acl-core bench", description="Benchmarks beside NumPy (CPU) or PyTorch (GPU).")
    p.add_argument("--backend", default=None, help="backend to measure (default: ACL_BACKEND or the best available)")
    p.add_argument("--out", type=Path, default=None, help="JSON file to write (default: reports/bench-<backend>.json)")
    p.add_argument("--max-bytes", type=int, default=1 << 28, help="largest message or Add size of the sweep")
    p.add_argument(
        "--suite",
        choices=("host", "ops"),
        default="host",
        help="host: two-phase overhead and Add beside NumPy; ops: operators through aclnn beside PyTorch on the "
        "same device (host overhead, D2D copy, Add/Mul/Silu, Softmax/LayerNorm/RmsNorm, Matmul, FlashAttentionScore)",
    )
    p.add_argument(
        "--sizes",
        choices=("small", "full"),
        default="small",
        help="ops suite shapes: small (seconds on a CPU) or full (issue 4's: 256 MiB elementwise, 8192^3 Matmul, "
        "B=4 N=32 S=4096 D=128 attention; GPU only, refused on a CPU backend such as the reference)",
    )
    p.add_argument("--plot", type=Path, default=None, help="ops suite: PNG of acl/torch ratios (default: beside --out)")
    p.add_argument("--only", default=None, help="ops suite: comma-separated ops to run (Add, Copy, Matmul, ...)")
    p.add_argument(
        "--collectives",
        type=int,
        metavar="RANKS",
        default=None,
        help="instead: HCCL collective bandwidth on RANKS MPI processes (nccl-tests' columns)",
    )
    return p


def _collectives(args: argparse.Namespace) -> int:
    """Launch the collective benchmark, one process per rank, and return its status.

    The reference engine moves data over MPI, so its ranks start under mpiexec; a GPU engine (NCCL)
    needs no MPI, so its ranks are spawned by acl_tools.launch, one per device.
    """
    try:
        engine = acl_core.get_backend(args.backend).collectives
    except AclCoreError as exc:
        print(f"acl-core bench --collectives: {exc}", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "acl_tools.launch", "-n", str(args.collectives)]
    if engine is not None and engine.name == "mpi":
        mpiexec = shutil.which(
            "mpiexec", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        )
        if mpiexec is None:
            print("acl-core bench --collectives: mpiexec not found; pip install 'acl-core[mpi]'", file=sys.stderr)
            return 2
        command.append("--mpiexec")
    out = args.out or Path("reports") / f"bench-hccl-{args.collectives}ranks.json"
    command += ["--", sys.executable, "-m", "acl_tools.bench.collectives"]
    command += ["--max-bytes", str(min(args.max_bytes, 1 << 26)), "--out", str(out)]
    env = dict(os.environ)
    if args.backend:
        env["ACL_BACKEND"] = args.backend
    return subprocess.run(command, env=env, check=False).returncode


def _ops(args: argparse.Namespace, backend: Backend, argv: Sequence[str] | None) -> int:
    """Run the ops suite beside PyTorch, write its JSON and PNG, and return the exit status."""
    from acl_tools.bench import ops, plot, startup

    caps = backend.capabilities()
    if args.sizes == "full" and caps.platform is Platform.CPU:
        print(
            f"acl-core bench: --sizes full is for a GPU; {backend.name} computes on the CPU "
            "(8192^3 Matmuls and S=4096 attention would take hours): use --sizes small",
            file=sys.stderr,
        )
        return 2
    print(f"acl-core bench: backend {backend.name} ({caps.device_name}); ops suite ({args.sizes}) beside PyTorch")
    only = set(args.only.split(",")) if args.only else None
    body = ops.run(backend, args.sizes, only=only)
    cache = getattr(backend, "cache", None)
    stats = getattr(cache, "stats", None)
    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "acl-core bench " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "backend": backend.name,
        "device": caps.device_name,
        "platform": caps.platform.value,
        "sizes": args.sizes,
        "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count()},
        **body,
        "startup": startup.measure_startup(),
        "kernel_cache": vars(stats) if stats is not None and hasattr(stats, "__dict__") else None,
    }
    out = args.out or Path("reports") / f"bench-ops-{backend.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    try:
        png = plot.plot(report, args.plot or out.with_suffix(".png"))
    except ImportError as exc:  # a device machine without matplotlib still gets its JSON
        print(f"written to {out}; no plot ({exc}: pip install 'acl-core[tools]')")
        return 0
    print(f"written to {out} and {png}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks of the chosen backend and write them to a JSON file."""
    args = _parser().parse_args(argv)
    if args.collectives is not None:
        return _collectives(args)
    try:
        backend = acl_core.get_backend(args.backend)
    except AclCoreError as exc:
        print(f"acl-core bench: {exc}", file=sys.stderr)
        return 2
    from acl_tools.bench import host, startup

    backend.runtime.ensure_device()
    caps = backend.capabilities()
    if args.suite == "ops":
        return _ops(args, backend, argv)
    sizes = tuple(s for s in host.SIZES if s <= args.max_bytes)
    print(f"acl-core bench: backend {backend.name} ({caps.device_name}); Add float32 beside NumPy")
    results = host.run(backend, sizes)
    start = startup.measure_startup()
    print(
        f"import acl_core + list_backends(): {start['import_and_list_ms']:.0f} ms "
        f"(vendor modules imported: {start['vendor_modules'] or 'none'})"
    )
    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "acl-core bench " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "backend": backend.name,
        "device": caps.device_name,
        "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count()},
        "host": results,
        "startup": start,
    }
    out = args.out or Path("reports") / f"bench-{backend.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    o = results["overhead"]
    print(
        f"two-phase overhead at {o['bytes']} B: {o['two_phase_us']:.1f} us vs NumPy {o['numpy_us']:.1f} us "
        f"(+{o['two_phase_minus_numpy_us']:.1f} us; phase 2 alone {o['phase2_repeatable_us']:.1f} us)"
    )
    print(f"written to {out}")
    return 0
