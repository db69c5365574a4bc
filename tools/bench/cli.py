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
from acl_core.errors import AclCoreError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="acl-core bench", description="Benchmarks beside NumPy (CPU) or PyTorch (GPU).")
    p.add_argument("--backend", default=None, help="backend to measure (default: ACL_BACKEND or the best available)")
    p.add_argument("--out", type=Path, default=None, help="JSON file to write (default: reports/bench-<backend>.json)")
    p.add_argument("--max-bytes", type=int, default=1 << 28, help="largest message or Add size of the sweep")
    p.add_argument(
        "--collectives",
        type=int,
        metavar="RANKS",
        default=None,
        help="instead: HCCL collective bandwidth on RANKS MPI processes (nccl-tests' columns)",
    )
    return p


def _collectives(args: argparse.Namespace) -> int:
    """Launch the collective benchmark under mpiexec, one process per rank, and return its status."""
    mpiexec = shutil.which(
        "mpiexec", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    )
    if mpiexec is None:
        print("acl-core bench --collectives: mpiexec not found; pip install 'acl-core[mpi]'", file=sys.stderr)
        return 2
    out = args.out or Path("reports") / f"bench-hccl-{args.collectives}ranks.json"
    command = [mpiexec, "-n", str(args.collectives), sys.executable, "-m", "acl_tools.bench.collectives"]
    command += ["--max-bytes", str(min(args.max_bytes, 1 << 26)), "--out", str(out)]
    env = dict(os.environ)
    if args.backend:
        env["ACL_BACKEND"] = args.backend
    return subprocess.run(command, env=env, check=False).returncode


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
