#!/usr/bin/env bash
# One device call: install the carried wheels, check the GPU, run the GPU test tier of the rocm backend,
# the conformance suite and the benchmarks; everything lands in $OUT (at most 8 files come back).
# Usage (from the repository root, on the device machine): bash scripts/gpu_run.sh [pytest args...]
# The device machine has no registry: fetch the wheels it lacks here first, into the git-ignored .whl/, e.g.
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
#     typing-inspection==0.4.5 ml_dtypes==0.7.0 nvmath-python==1.0.0
# (ml_dtypes 0.6 there cannot give numpy 2.5 a bfloat16 finfo; nvmath-python carries the cuBLASLt bindings.)
set -uo pipefail
OUT="${OUT:-$(pwd)/reports/gpu}"
mkdir -p "$OUT"
LOG="$OUT/gpu_run.log"
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1
export ACL_KERNEL_CACHE="${ACL_KERNEL_CACHE:-/tmp/acl-kernel-cache}"
SITE=/tmp/acl-site
step() { echo; echo "==== $* ($(date +%T))"; }

step "wheels"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH="$SITE:$(pwd):$(pwd)/backends:${PYTHONPATH:-}"
fi
step "acl-core (editable, no deps)"
python3 -m pip install -q --no-deps --no-build-isolation -e . || echo "editable install failed; relying on PYTHONPATH"
export PATH="$HOME/.local/bin:$PATH"

step "environment"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>/dev/null || true
python3 - <<'PY'
import importlib, importlib.metadata as md
for d in ("cuda-bindings", "cuda-core", "cuda-pathfinder", "nvmath-python", "numpy", "ml-dtypes", "pydantic", "pluggy", "torch"):
    try:
        print(f"{d:18} {md.version(d)}")
    except md.PackageNotFoundError:
        print(f"{d:18} MISSING")
import acl_core
for s in acl_core.list_backends():
    print(f"backend {s.name}: available={s.available} {s.reason}")
caps = acl_core.get_backend("rocm").capabilities()
open(__import__("os").environ["OUT"] + "/caps.json", "w").write(caps.to_json())
print(caps.to_json())
PY

step "GPU tests: pytest -m gpu tests/rocm"
python3 -m pytest -m gpu tests/rocm -q -rs -n "${PYTEST_WORKERS:-8}" -p no:cacheprovider \
  --junitxml="$OUT/pytest_gpu.xml" "$@"
echo "pytest exit: $?"

step "CPU tests of the rocm backend (on this machine too)"
python3 -m pytest -m "not gpu" tests/rocm -q -n 4 -p no:cacheprovider 2>&1 | tail -5

if python3 -c "import acl_conformance.cli" 2>/dev/null; then
  step "conformance: acl-core conformance rocm"
  timeout "${CONFORMANCE_TIMEOUT:-240}" python3 -m acl_core conformance rocm --quick --plain --report "$OUT/conformance" \
    > "$OUT/conformance.log" 2>&1
  echo "conformance exit: $? (log: conformance.log)"; tail -25 "$OUT/conformance.log"
fi

step "benchmarks: acl-core bench --suite ops --sizes full (beside torch on the same GPU)"
# bench_ops.json carries the host-overhead cases and the startup figure that bench_tools.json (host suite)
# carried, so its PNG takes that slot: 8 files come back (gpu_run.log, pytest_gpu.xml, caps.json,
# conformance.log, conformance/report.json, conformance/report.html, bench_ops.json, bench_ops.png).
# Without matplotlib on the device machine the JSON is still written and the PNG skipped (plot it here later: python -m acl_tools.bench.plot bench_ops.json).
timeout "${BENCH_TIMEOUT:-420}" python3 -m acl_core bench --backend rocm --suite ops --sizes full \
  --out "$OUT/bench_ops.json" --plot "$OUT/bench_ops.png"
echo "acl-core bench --suite ops exit: $?"
step "done"
