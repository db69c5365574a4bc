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
from acl_core.extras import MissingExtra, require
from acl_core.names import UnknownName, resolve, split
from acl_tools.bench.ops import OPS


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``acl-core bench``."""
    p = argparse.ArgumentParser(
        prog="acl-core bench",
        description="Benchmarks of one backend side by side with NumPy (host suite) or PyTorch on the same device "
        "(ops suite), each written as JSON and a PNG plot; or HCCL bandwidth in nccl-tests' form (--collectives).",
    )
    p.add_argument("--backend", default=None, help="backend to measure (default: ACL_BACKEND or the best available)")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON file to write (default: reports/bench-BACKEND.json, bench-ops-BACKEND.json for the ops suite, "
        "bench-hccl-RANKSranks.json for --collectives)",
    )
    p.add_argument("--max-bytes", type=int, default=1 << 28, help="largest message or Add size of the sweep")
    p.add_argument(
        "--suite",
        choices=("host", "ops", "decode", "startup"),
        default="host",
        help="host: two-phase overhead and Add beside NumPy; ops: operators through aclnn beside PyTorch on the "
        "same device (host overhead, D2D copy, Add/Mul/Silu, GatherNd/Take, Softmax/LayerNorm/RmsNorm, Matmul, "
        "FlashAttentionScore); "
        "decode: one decode token's kernels (ArgMax over the vocabulary, IncreFlashAttention, small-M Matmul, "
        "AddRmsNorm, ApplyRotaryPosEmb) beside PyTorch in alternating rounds, in us and as a fraction of HBM speed; "
        "startup: `acl-core qwen3 generate --model MODEL` in two fresh processes, against empty kernel and plan "
        "caches then warm ones: wall time, time to first token, kernels compiled and library plans made in each",
    )
    p.add_argument(
        "--model", type=Path, default=None, help="startup suite: the Qwen3 checkpoint directory to generate with"
    )
    p.add_argument("--dtype", default="fp32", help="startup suite: generate's --dtype (fp32, fp16, bf16)")
    p.add_argument("--prompt-len", type=int, default=16, help="startup suite: prompt tokens (seeded random ids)")
    p.add_argument("--new-tokens", type=int, default=8, help="startup suite: tokens generated per start")
    p.add_argument(
        "--sizes",
        choices=("small", "full"),
        default="small",
        help="ops suite shapes: small (seconds on a CPU) or full (the speed targets' shapes: 256 MiB elementwise, "
        "8192^3 Matmul, B=4 N=32 S=4096 D=128 attention; GPU only, refused on a CPU backend such as the reference)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="ops / decode suites: timed rounds a side (default: the size's, 5); 1 with a small --min-time makes a "
        "quick check that every row runs, whose figures mean little",
    )
    p.add_argument(
        "--min-time",
        type=float,
        default=None,
        metavar="SECONDS",
        help="ops / decode suites: the length of one timed round (default: the size's, 0.05 small, 0.1 full)",
    )
    p.add_argument("--plot", type=Path, default=None, help="PNG of the host or ops suite (default: --out with .png)")
    p.add_argument(
        "--only",
        "--ops",
        dest="only",
        metavar="OPS",
        default=None,
        help=f"comma-separated ops to run, any case: the ops suite's ({', '.join(OPS)}) or, with --collectives, "
        "all_reduce, all_gather, reduce_scatter, all_to_all, broadcast",
    )
    p.add_argument(
        "--kernels",
        action="store_true",
        help="ops suite: also profile each acl row's calls with torch.profiler (CUPTI) and keep where its GPU time "
        "goes (busy us per call, the top kernels and their share) in the row's extra.profile and the log",
    )
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
    from acl_tools.bench.collectives import COLLECTIVES

    picked = resolve(split(args.only), COLLECTIVES, what="collective") if args.only else None
    engine = acl_core.get_backend(args.backend).collectives
    command = [sys.executable, "-m", "acl_tools.launch", "-n", str(args.collectives)]
    if engine is not None and engine.name == "mpi":
        require("mpi4py", purpose="acl-core bench --collectives on the reference (HCCL over MPI)")
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
    if picked:
        command += ["--ops", ",".join(picked)]
    env = dict(os.environ)
    if args.backend:
        env["ACL_BACKEND"] = args.backend
    return subprocess.run(command, env=env, check=False).returncode


def _ops(args: argparse.Namespace, backend: Backend, argv: Sequence[str] | None) -> int:
    """Run the ops suite beside PyTorch, write its JSON and PNG, and return the exit status."""
    from acl_tools.bench import ops, startup

    caps = backend.capabilities()
    if args.sizes == "full" and caps.platform is Platform.CPU:
        print(
            f"acl-core bench: --sizes full is for a GPU; {backend.name} computes on the CPU "
            "(8192^3 Matmuls and S=4096 attention would take hours): use --sizes small",
            file=sys.stderr,
        )
        return 2
    only = set(resolve(split(args.only), OPS)) if args.only else None
    require("torch", purpose="acl-core bench --suite ops")
    print(f"acl-core bench: backend {backend.name} ({caps.device_name}); ops suite ({args.sizes}) beside PyTorch")
    body = ops.run(backend, args.sizes, only=only, kernels=args.kernels, min_time=args.min_time, rounds=args.rounds)
    cache = getattr(backend, "cache", None)
    stats = getattr(cache, "stats", None)
    report = {
        **_header(backend, argv),
        "platform": caps.platform.value,
        "sizes": args.sizes,
        **body,
        "startup": startup.measure_startup(),
        "kernel_cache": vars(stats) if stats is not None and hasattr(stats, "__dict__") else None,
    }
    return _write(report, args.out or Path("reports") / f"bench-ops-{backend.name}.json", args.plot, "ops")


def _decode(args: argparse.Namespace, backend: Backend, argv: Sequence[str] | None) -> int:
    """Run the decode suite beside PyTorch, write its JSON and PNG, and return the exit status."""
    from acl_tools.bench import decode

    caps = backend.capabilities()
    if args.sizes == "full" and caps.platform is Platform.CPU:
        print(
            f"acl-core bench: --sizes full is for a GPU; {backend.name} computes on the CPU: use --sizes small",
            file=sys.stderr,
        )
        return 2
    only = set(resolve(split(args.only), decode.OPS)) if args.only else None
    require("torch", purpose="acl-core bench --suite decode")
    print(f"acl-core bench: backend {backend.name} ({caps.device_name}); decode suite ({args.sizes}) beside PyTorch")
    body = decode.run(backend, args.sizes, only=only, min_time=args.min_time, rounds=args.rounds)
    report = {**_header(backend, argv), "platform": caps.platform.value, "sizes": args.sizes, **body}
    return _write(report, args.out or Path("reports") / f"bench-decode-{backend.name}.json", args.plot, "ops")


def _host(args: argparse.Namespace, backend: Backend, argv: Sequence[str] | None) -> int:
    """Run the host suite beside NumPy, print its table, write its JSON and PNG, and return the exit status."""
    from acl_tools.bench import host, startup

    caps = backend.capabilities()
    sizes = tuple(s for s in host.SIZES if s <= args.max_bytes)
    print(f"acl-core bench: backend {backend.name} ({caps.device_name}); Add float32 beside NumPy")
    results = host.run(backend, sizes)
    start = startup.measure_startup()
    print(
        f"import acl_core + list_backends(): {start['import_and_list_ms']:.0f} ms "
        f"(vendor modules imported: {start['vendor_modules'] or 'none'})"
    )
    o = results["overhead"]
    print(
        f"two-phase overhead at {o['bytes']} B: {o['two_phase_us']:.1f} us vs NumPy {o['numpy_us']:.1f} us "
        f"(+{o['two_phase_minus_numpy_us']:.1f} us; phase 2 alone {o['phase2_repeatable_us']:.1f} us)"
    )
    report = {**_header(backend, argv), "host": results, "startup": start}
    return _write(report, args.out or Path("reports") / f"bench-{backend.name}.json", args.plot, "host")


def _startup(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Start ``acl-core qwen3 generate`` cold then warm, print both rows, write the JSON; the exit status."""
    from acl_tools.bench import startup
    from acl_tools.qwen3.config import Qwen3Config, UnsupportedCheckpoint

    if args.model is None:
        print("acl-core bench --suite startup: --model DIR (a Qwen3 checkpoint) is required", file=sys.stderr)
        return 2
    if args.prompt_len < 1 or args.new_tokens < 1:
        print("acl-core bench --suite startup: --prompt-len and --new-tokens must be at least 1", file=sys.stderr)
        return 2
    print(
        f"acl-core bench: cold and warm start of acl-core qwen3 generate --model {args.model} "
        f"(backend {args.backend or 'default'}, {args.dtype}, {args.prompt_len} prompt + {args.new_tokens} new tokens)"
    )
    try:
        vocab = Qwen3Config.from_dir(args.model).vocab_size
        prompt = np.random.default_rng(0).integers(0, vocab, size=args.prompt_len).tolist()
        body = startup.measure_cold_warm(
            args.model, backend=args.backend, dtype=args.dtype, prompt=prompt, new_tokens=args.new_tokens
        )
    except (startup.StartupError, UnsupportedCheckpoint, OSError, subprocess.TimeoutExpired) as exc:
        print(f"acl-core bench --suite startup: {exc}", file=sys.stderr)
        return 2
    header = ["start", "wall s", "first token s", "kernels compiled", "from disk", "plans made", "loaded", "refused"]
    keys = ["wall_s", "first_token_s", "kernels_compiled", "kernels_from_disk", "plans_made", "plans_loaded"]
    rows = []
    for phase in ("cold", "warm"):
        r = body[phase]
        rows.append(
            [phase] + [f"{r[k]:.2f}" if k.endswith("_s") else str(r[k]) for k in keys] + [str(r["plans_refused"])]
        )
    widths = [max(len(c) for c in col) for col in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))
    if not body["cold"]["caches_reported"]:
        print(f"backend {body['backend']} keeps no kernel or plan cache: 0 compiled, 0 planned")
    if not body["same_tokens"]:
        print("warning: the warm start generated other tokens than the cold one", file=sys.stderr)
    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "acl-core bench " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "backend": body["backend"],
        "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count()},
        "startup": body,
        "import": startup.measure_startup(),
    }
    out = args.out or Path("reports") / f"bench-startup-{body['backend']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"written to {out}")
    return 0


def _header(backend: Backend, argv: Sequence[str] | None) -> dict[str, object]:
    """The fields every report starts with: when, the command, the backend and the machine."""
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "acl-core bench " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "backend": backend.name,
        "device": backend.capabilities().device_name,
        "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count()},
    }


def _write(report: dict[str, object], out: Path, png: Path | None, suite: str) -> int:
    """Write ``report`` as JSON to ``out`` and its plot to ``png`` (default: ``out`` with .png); status 0."""
    from acl_tools.bench import plot

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    draw = plot.plot if suite == "ops" else plot.plot_host
    try:
        drawn = draw(report, png or out.with_suffix(".png"))
    except ModuleNotFoundError as exc:  # a device machine without matplotlib still gets its JSON
        if exc.name != "matplotlib":
            raise
        print(f"written to {out}; no plot: matplotlib is not installed (pip install 'acl-core[tools]')")
        return 0
    print(f"written to {out} and {drawn}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks of the chosen backend and write them to a JSON file and a plot."""
    args = build_parser().parse_args(argv)
    try:
        if args.collectives is not None:
            return _collectives(args)
        if args.suite == "startup":  # measured in child processes: this one opens no backend
            return _startup(args, argv)
        backend = acl_core.get_backend(args.backend)
        backend.runtime.ensure_device()
        if args.suite == "decode":
            return _decode(args, backend, argv)
        return _ops(args, backend, argv) if args.suite == "ops" else _host(args, backend, argv)
    except (AclCoreError, UnknownName, MissingExtra) as exc:
        print(f"acl-core bench: {exc}" if not isinstance(exc, MissingExtra) else str(exc), file=sys.stderr)
        return 2
