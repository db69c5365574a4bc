#!/usr/bin/env bash
# One device call on a machine with 2+ GPUs (issue 8): one process per GPU, acl-core's multi-rank HCCL
# conformance (every collective x dtype x reduce op, and the MC2 operators) on the rocm backend over
# NCCL, then the collective bandwidth benchmark of acl-core beside torch.distributed's NCCL with the
# same sizes, data and process layout, joined into one JSON with the all-reduce ratio at 256 MiB.
# Usage (repository root, on the GPU machine): bash scripts/multi_gpu_run.sh
# The ranks are started by `python -m acl_tools.launch` (no MPI needed: the root info and the test's
# own cross-checks go through a shared directory; LAUNCH_MODE=mpiexec uses mpiexec instead). Every rank
# sees every GPU and sets device = its rank. NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0.
# Knobs (environment): RANKS (default: the GPU count), ACL_BACKEND (rocm), TORCH_BACKEND (nccl),
# MIN_BYTES / MAX_BYTES / FACTOR / ITERS (1 KiB .. 256 MiB, x4, 20 calls), OPS, *_TIMEOUT seconds,
# WHEELS=0 (do not install the carried .whl/ wheels, e.g. on this CPU machine, whose Python is not 3.12).
# The same script runs on a CPU as a dry run of the harness (what tests/hccl/test_launch.py does):
#   WHEELS=0 RANKS=2 ACL_BACKEND=reference LAUNCH_MODE=mpiexec TORCH_BACKEND=gloo MAX_BYTES=512 ITERS=2 bash scripts/multi_gpu_run.sh
# What comes back (at most 8 files): multi_gpu_run.log, conformance_multi.json (every rank's checks and
# failures), bench_acl.json, bench_torch.json, bench_collectives.json (both sides per op and size, and
# the 256 MiB all-reduce ratio) and more.tar.gz (per-step logs).
set -uo pipefail
OUT="${OUT:-$(pwd)/reports/multi-gpu}"
WORK="$OUT/work"
mkdir -p "$WORK"
exec > >(tee -a "$OUT/multi_gpu_run.log") 2>&1
export PYTHONUNBUFFERED=1
export ACL_KERNEL_CACHE="${ACL_KERNEL_CACHE:-/tmp/acl-kernel-cache}"
export NCCL_NVLS_ENABLE=0
export ACL_BACKEND="${ACL_BACKEND:-rocm}"
export HCCL_CONNECT_TIMEOUT="${HCCL_CONNECT_TIMEOUT:-120}" HCCL_EXEC_TIMEOUT="${HCCL_EXEC_TIMEOUT:-120}"
export MPIR_CVAR_NO_COLLECTIVE_FINALIZE=1
SITE=/tmp/acl-site
step() { echo; echo "==== $* ($(date +%T))"; }
pack() { tar -C "$WORK" -czf "$OUT/more.tar.gz" . 2>/dev/null; }
trap pack EXIT

if [ "${WHEELS:-1}" = 1 ] && compgen -G ".whl/*.whl" > /dev/null; then
  step "wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH="$SITE:$(pwd):$(pwd)/backends:${PYTHONPATH:-}"
  python3 -m pip install -q --no-deps --no-build-isolation -e . || echo "editable install failed; relying on PYTHONPATH"
fi

step "environment"
if [ -z "${RANKS:-}" ]; then
  RANKS=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
fi
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>/dev/null || true
nvidia-smi topo -m 2>/dev/null || true
echo "ranks: $RANKS  backend: $ACL_BACKEND  NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
python3 - <<'PY'
import importlib.metadata as md
for d in ("cuda-bindings", "nccl4py", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "numpy", "torch", "mpi4py"):
    try:
        print(f"{d:18} {md.version(d)}")
    except md.PackageNotFoundError:
        print(f"{d:18} MISSING")
import acl_core
caps = acl_core.get_backend().capabilities()
print(f"backend {caps.backend}: engine {caps.collective_engine}, max ranks {caps.collective_max_ranks}")
PY
if [ "$RANKS" -lt 2 ]; then
  echo "this run needs 2 or more GPUs (found $RANKS); set RANKS to override"
  exit 2
fi
LAUNCH=(python3 -m acl_tools.launch -n "$RANKS")
[ "${LAUNCH_MODE:-spawn}" = mpiexec ] && LAUNCH+=(--mpiexec)

step "multi-rank HCCL conformance on $ACL_BACKEND: collectives x dtypes x reduce ops, MC2 ($RANKS ranks)"
rm -rf "$WORK/conformance"; mkdir -p "$WORK/conformance"
"${LAUNCH[@]}" --timeout "${CONFORMANCE_TIMEOUT:-240}" -- python3 tests/hccl/ranks/collectives.py "$WORK/conformance" \
  > "$WORK/conformance.log" 2>&1
echo "conformance exit: $?"; tail -20 "$WORK/conformance.log"
python3 - "$WORK/conformance" "$OUT/conformance_multi.json" "$RANKS" <<'PY'
import json, pathlib, sys
found = {p.stem: json.loads(p.read_text()) for p in sorted(pathlib.Path(sys.argv[1]).glob("rank[0-9]*.json"))}
ranks = int(sys.argv[3])
report = {"ranks": ranks, "reported": len(found), "checks": sum(r["checks"] for r in found.values()),
          "failures": sum(len(r["failures"]) for r in found.values()), "per_rank": found}
report["passed"] = report["reported"] == ranks and report["failures"] == 0
pathlib.Path(sys.argv[2]).write_text(json.dumps(report, indent=1))
print(f"conformance: {report['reported']}/{ranks} ranks reported, {report['checks']} checks, "
      f"{report['failures']} failures -> {'PASS' if report['passed'] else 'FAIL'}")
PY

SIZES=(--min-bytes "${MIN_BYTES:-1024}" --max-bytes "${MAX_BYTES:-268435456}" --factor "${FACTOR:-4}" --iters "${ITERS:-20}")
[ -n "${OPS:-}" ] && SIZES+=(--ops "$OPS")
step "collective bandwidth: acl-core ($ACL_BACKEND) on $RANKS ranks"
"${LAUNCH[@]}" --timeout "${BENCH_TIMEOUT:-150}" -- python3 -m acl_tools.bench.collectives --engine acl "${SIZES[@]}" \
  --out "$OUT/bench_acl.json" > "$WORK/bench_acl.log" 2>&1
echo "acl bench exit: $?"; grep -v '^\[[1-9]' "$WORK/bench_acl.log" | tail -60

step "collective bandwidth: torch.distributed (${TORCH_BACKEND:-nccl}) on $RANKS ranks, same sizes"
"${LAUNCH[@]}" --timeout "${BENCH_TIMEOUT:-150}" -- python3 -m acl_tools.bench.collectives --engine torch \
  --torch-backend "${TORCH_BACKEND:-nccl}" "${SIZES[@]}" --out "$OUT/bench_torch.json" > "$WORK/bench_torch.log" 2>&1
echo "torch bench exit: $?"; grep -v '^\[[1-9]' "$WORK/bench_torch.log" | tail -60

step "acl-core beside torch.distributed"
python3 -m acl_tools.bench.compare_collectives "$OUT/bench_acl.json" "$OUT/bench_torch.json" \
  --target-bytes "${TARGET_BYTES:-268435456}" --out "$OUT/bench_collectives.json"
echo "compare exit: $?"
step "done"
