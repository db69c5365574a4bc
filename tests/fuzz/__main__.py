"""``python -m tests.fuzz``: run the fuzzer, print the summary, exit 1 when any case failed.

``--seed S --calls N`` runs cases 0..N-1 of seed S; ``--case I`` replays case I alone (verbose).
``--memory-limit`` caps the address space (GiB), so a call that tries to allocate without bound
fails with MemoryError instead of exhausting the machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import warnings
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("ACL_FUZZ_SEED", "0")))
    parser.add_argument("--calls", type=int, default=int(os.environ.get("ACL_FUZZ_CALLS", "2000")))
    parser.add_argument("--case", type=int, default=None, help="replay this case index alone")
    parser.add_argument("--deadline", type=float, default=None, help="seconds one call may take")
    parser.add_argument("--budget", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    parser.add_argument("--progress", type=Path, default=None, help="file holding the case now running")
    parser.add_argument("--backend", default="reference", help="backend to fuzz (fuzz-plant-*: a planted defect)")
    parser.add_argument("--ops", default=None, help="comma-separated operators to restrict the cases to")
    parser.add_argument("--prove", action="store_true", help="check each planted defect is caught, then exit")
    parser.add_argument("--memory-limit", type=float, default=8.0, help="address-space cap in GiB (0: none)")
    args = parser.parse_args(argv)
    if args.memory_limit:
        cap = int(args.memory_limit * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    os.environ["ACL_BACKEND"] = "reference"
    warnings.simplefilter("ignore", RuntimeWarning)  # NaN/Inf arithmetic of corrupted values is expected
    if args.backend.startswith("fuzz-plant-"):
        from .planted import register

        register()

    from .run import DEFAULT_DEADLINE, fuzz, prepare, run_case, write

    if args.prove:
        return prove(args.seed)
    limit = args.deadline or DEFAULT_DEADLINE
    ops = args.ops.split(",") if args.ops else None
    if args.case is not None:
        out = run_case(args.seed, args.case, prepare(args.backend), limit, ops)
        print(f"{out.area}:{out.subject} ({out.mutation}) -> {out.verdict.value} {out.code or ''} {out.step}")
        print(f"  {out.message}\n  repro: {out.repro}\n  notes: {out.notes}")
        return 1 if out.verdict.failed else 0
    report = fuzz(
        args.seed, args.calls, limit=limit, progress=args.progress, budget=args.budget, backend=args.backend, ops=ops
    )
    print(report.summary())
    if args.report is not None:
        write(report, args.report)
    return 1 if report.failures else 0


def prove(seed: int, calls: int = 40) -> int:
    """Fuzz each planted-defect backend on its one operator: every defect must show as its failure class."""
    from .planted import DEFECTS, PLANTED_OP, register
    from .run import fuzz

    register()
    missed = []
    for defect, (_, verdict) in DEFECTS.items():
        report = fuzz(seed, calls, limit=1.0, backend=f"fuzz-plant-{defect}", ops=[PLANTED_OP])
        caught = [
            o
            for o in report.failures
            if o.subject == PLANTED_OP and o.verdict.value == verdict and (defect != "crash" or "planted" in o.message)
        ]
        print(f"planted {defect}: {len(caught)} of {len(report.outcomes)} cases report {verdict}")
        if not caught:
            missed.append(defect)
    if missed:
        print(f"NOT CAUGHT: {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
