#!/usr/bin/env bash
# One device call: install the carried wheels, run the rocm backend's GPU test tier, `acl-core conformance
# rocm --full`, the operator benchmarks beside PyTorch, and Qwen3 parity and speed beside transformers.
# Usage (repository root, on the GPU machine): bash scripts/gpu_run.sh [pytest args...]
# Each step has its own time limit (seconds, overridable) so the whole run ends inside a 10-minute call (conformance
# is interrupted, not killed, at its limit, so its partial report still lands);
# CONFORMANCE_SHARD=1/2 then 2/2 splits the full conformance run over two calls, CONFORMANCE_PARALLEL=P over P
# processes of one call;
# CONFORMANCE_MODE=--quick and QWEN=short make a shorter run when device time is scarce; BENCH=0 and
# QWEN=none leave out the benchmarks and Qwen3 (a correctness-only run); BENCH_ONLY=Op1,Op2 times only those rows;
# DECODE_BENCH=0 the decode-shape rows; TEST_PATHS="file ..." narrows the test tier; FP8_ACC=0 skips the fp8 accumulation probe; TESTS=0 leaves out the test tier and
# conformance (the second call of a run split in two: correctness first, then speed); SWEEP=file runs its shell
# lines after the benchmarks (variant timings, each under SWEEP_LINE_TIMEOUT; $OUT and $WORK are set); STARTUP=0
# skips the cold/warm start bench.
# The GPU machine has no registry: fetch the wheels it lacks here first, into the git-ignored .whl/:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
#     typing-inspection==0.4.5 ml_dtypes==0.7.0 nvmath-python==1.0.0 nccl4py==0.6.0 nvidia-cudnn-frontend==1.32.0
# (ml_dtypes 0.6 there cannot give numpy 2.5 a bfloat16 finfo; nvmath-python carries the cuBLASLt bindings;
# the cuDNN frontend drives cuDNN's fused attention.)
# What comes back (the device tool returns at most 8 files): gpu_run.log, caps.json, conformance.json,
# bench_ops.json, bench_ops.png, qwen3.json (parity and speed) and more.tar.gz (everything else).
set -uo pipefail
OUT="${OUT:-$(pwd)/reports/gpu}"
WORK="$OUT/work"
mkdir -p "$WORK"
exec > >(tee -a "$OUT/gpu_run.log") 2>&1
export PYTHONUNBUFFERED=1
export ACL_KERNEL_CACHE="${ACL_KERNEL_CACHE:-/tmp/acl-kernel-cache}"
SITE=/tmp/acl-site
step() { echo; echo "==== $* ($(date +%T))"; }
pack() { tar -C "$WORK" -czf "$OUT/more.tar.gz" . 2>/dev/null; }
trap pack EXIT

step "wheels"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH="$SITE:$(pwd):$(pwd)/backends:${PYTHONPATH:-}"
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . || echo "editable install failed; relying on PYTHONPATH"
export PATH="$HOME/.local/bin:$PATH"

step "environment"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null || true
python3 - <<'PY'
import importlib.metadata as md, os
for d in ("cuda-bindings", "nvmath-python", "nvidia-cudnn-frontend", "nccl4py", "numpy", "ml-dtypes", "pydantic",
          "torch", "transformers"):
    try:
        print(f"{d:22} {md.version(d)}")
    except md.PackageNotFoundError:
        print(f"{d:22} MISSING")
import acl_core
for s in acl_core.list_backends():
    print(f"backend {s.name}: available={s.available} {s.reason}")
caps = acl_core.get_backend("rocm").capabilities()
open(os.environ["OUT"] + "/caps.json", "w").write(caps.to_json())
print(f"rocm claims {len(caps.ops)} operators; attention: {caps.attention_path}")
PY
echo "MXFP8_FORCE_HW=1 acl-core caps rocm (must be refused where the GPU has no native MX GEMM):"
MXFP8_FORCE_HW=1 python3 -m acl_core caps rocm; echo "exit: $?"

if [ "${TESTS:-1}" = 1 ]; then  # TESTS=0 skips the test tier and conformance
# The figure rocm's AccumulationAllowance records as `measured` (backends/rocm/plugin.py): worst |err|/M of
# random fp8 QuantMatmulV5 calls at K = 16..4096, signed and one-signed operands, float32 out.
if [ "${FP8_ACC:-1}" = 1 ]; then  # FP8_ACC=0 skips it (a call about other operators)
step "fp8 accumulation: worst |err|/M of rocm's fp8 QuantMatmulV5 (python -m tests.rocm.fp8_accumulation)"
timeout "${FP8_ACC_TIMEOUT:-90}" python3 -m tests.rocm.fp8_accumulation rocm | tee "$WORK/fp8_accumulation.jsonl"
fi
# The test tier and conformance share the GPU; both are correctness runs, so they go side by side.
step "GPU test tier (pytest -m gpu ${TEST_PATHS:-tests/rocm}) beside conformance rocm ${CONFORMANCE_MODE:---full}"
# TEST_PATHS="tests/rocm/test_gpu_a.py ..." narrows the tier to those files
# shellcheck disable=SC2086
timeout -s INT -k 30 "${TESTS_TIMEOUT:-220}" python3 -m pytest -m gpu ${TEST_PATHS:-tests/rocm} -q -rfEs -n "${PYTEST_WORKERS:-8}" \
  -p no:cacheprovider --durations=40 --junitxml="$WORK/pytest_gpu.xml" "$@" > "$WORK/pytest_gpu.log" 2>&1 &
tests=$!
select=()  # CONFORMANCE_SHARD=K/N runs one of N balanced parts (a full run is longer than one call); CONFORMANCE_OPS narrows
[ -n "${CONFORMANCE_OPS:-}" ] && select+=(--ops "$CONFORMANCE_OPS")
# CONFORMANCE_PARALLEL=P runs the whole selection as shards 1/P..P/P in P processes at once (the host side, the
# reference oracle and the comparisons, is what takes the time) and joins their reports with acl_conformance.merge.
parallel="${CONFORMANCE_PARALLEL:-1}"
if [ "$parallel" -gt 1 ] && [ -n "${CONFORMANCE_SHARD:-}" ]; then
  echo "CONFORMANCE_PARALLEL and CONFORMANCE_SHARD exclude each other"; exit 2
fi
pids=()
for k in $(seq 1 "$parallel"); do
  part=(); dir="$WORK/conformance"
  [ -n "${CONFORMANCE_SHARD:-}" ] && part=(--shard "$CONFORMANCE_SHARD")
  [ "$parallel" -gt 1 ] && { part=(--shard "$k/$parallel"); dir="$WORK/conformance-$k"; }
  OMP_NUM_THREADS=1 timeout -s INT -k 20 "${CONFORMANCE_TIMEOUT:-280}" python3 -m acl_core conformance rocm \
    "${CONFORMANCE_MODE:---full}" --plain "${select[@]}" "${part[@]}" --report "$dir" > "$dir.log" 2>&1 &
  pids+=($!)
done
wait $tests; echo "pytest exit: $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$WORK/pytest_gpu.log" | tail -40
for k in "${!pids[@]}"; do wait "${pids[$k]}"; echo "conformance process $((k + 1)) exit: $?"; done
if [ "$parallel" -gt 1 ]; then
  for k in $(seq 1 "$parallel"); do echo "-- shard $k/$parallel"; tail -4 "$WORK/conformance-$k.log"; done
  python3 -m acl_conformance.merge "$WORK/conformance" "$WORK"/conformance-*/report.json; echo "merge exit: $?"
  grep -h "^  FAIL \|^PASSED\|^FAILED" "$WORK"/conformance-*.log | cut -c1-400 | head -80
else
  tail -30 "$WORK/conformance.log"
fi
cp "$WORK/conformance/report.json" "$OUT/conformance.json" 2>/dev/null || true
fi

if [ "${BENCH:-1}" = 1 ]; then  # BENCH=0 skips the benchmarks (a correctness-only run)
step "benchmarks: acl-core bench --backend rocm --suite ops --sizes full (beside torch on the same GPU)"
only=()  # BENCH_ONLY=Op1,Op2 times only those rows (a short call)
[ -n "${BENCH_ONLY:-}" ] && only=(--only "$BENCH_ONLY")
timeout "${BENCH_TIMEOUT:-120}" python3 -m acl_core bench --backend rocm --suite ops --sizes full "${only[@]}" \
  --out "$OUT/bench_ops.json" --plot "$OUT/bench_ops.png"
echo "bench exit: $?"
if [ "${DECODE_BENCH:-1}" = 1 ]; then  # DECODE_BENCH=0 skips the decode-shape rows (a call about other ops)
step "benchmarks: acl-core bench --backend rocm --suite decode --sizes full (decode shapes beside torch)"
timeout "${DECODE_BENCH_TIMEOUT:-90}" python3 -m acl_core bench --backend rocm --suite decode --sizes full \
  --out "$WORK/bench_decode.json"
echo "decode bench exit: $?"
fi
fi

if [ -n "${SWEEP:-}" ]; then  # SWEEP=file: a file of shell lines (bench runs under alternative env choices), each timed
  step "sweep: $SWEEP"
  while IFS= read -r line; do
    case "$line" in ''|'#'*) continue ;; esac
    echo "-- $line"; OUT="$OUT" WORK="$WORK" timeout "${SWEEP_LINE_TIMEOUT:-90}" bash -c "$line"; echo "sweep line exit: $?"
  done < "$SWEEP"
fi

if [ "${QWEN:-full}" != none ]; then  # QWEN=none skips Qwen3
step "Qwen3: parity and speed beside transformers on this GPU"
Q="$WORK/qwen3"; mkdir -p "$Q"
qwen() { timeout "${QWEN_STEP_TIMEOUT:-60}" python3 -m acl_core qwen3 "$@" --quiet; echo "qwen3 $1 exit: $?"; }
python3 -m acl_core qwen3 make-tiny /tmp/q-tiny > /dev/null && python3 -m acl_core qwen3 make-tiny --config qwen3-0.6b /tmp/q06 > /dev/null
# cold then warm start of `acl-core qwen3 generate` in fresh processes with a private, emptied kernel + plan cache
# (issue 18 item 5: the warm start compiles nothing and plans nothing); a 1024-token prompt reaches cuDNN's prefill
if [ "${STARTUP:-1}" = 1 ]; then  # STARTUP=0 skips the cold/warm start pair (about 2 minutes)
  timeout "${STARTUP_TIMEOUT:-240}" python3 -m acl_core bench --suite startup --backend rocm --model /tmp/q06 \
    --dtype bf16 --prompt-len 1024 --out "$Q/startup-0.6b-bf16.json"; echo "startup bench exit: $?"
fi
if [ "${QWEN:-full}" = full ]; then  # QWEN=short skips the fp32 parity runs (proven in earlier runs) to save device time
  qwen parity --model /tmp/q-tiny --backend rocm --dtype fp32 --out "$Q/parity-tiny-fp32.json"
  qwen parity --model /tmp/q06 --backend rocm --dtype fp32 --out "$Q/parity-0.6b-fp32.json"
fi
# bf16 parity: acl-core's error against transformers' fp32 truth beside transformers' bf16 error (issue 15 item 8)
QWEN_STEP_TIMEOUT="${QWEN_PARITY_TIMEOUT:-90}" qwen parity --model /tmp/q06 --backend rocm --dtype bf16 --noise-floor \
  --out "$Q/parity-0.6b-bf16.json"
# bench: acl-core, transformers eager and the PyTorch CUDA-graph runner in one process; prefill of a 512-token
# prompt; acl-core's GPU kernel time per decode token at batch 1 (torch.profiler)
QWEN_STEP_TIMEOUT="${QWEN_BENCH_TIMEOUT:-180}" qwen bench --model /tmp/q06 --backend rocm --dtype bf16 --batch 1,8 \
  --prompt-len 64 --new-tokens 32 --prefill-len 512 --repeat 2 --out "$Q/bench-0.6b-bf16.json"
if [ "${QWEN:-full}" = full ]; then  # acl-core's eager decode at batch 1, to set beside the replayed one
  qwen bench --model /tmp/q06 --backend rocm --dtype bf16 --batch 1 --prompt-len 64 --new-tokens 32 --prefill-len 0 \
    --repeat 2 --eager --no-transformers --no-torch-graph --out "$Q/bench-0.6b-bf16-eager.json"
fi
python3 - "$Q" "$OUT/qwen3.json" <<'PY'
import json, pathlib, sys
found = {p.stem: json.loads(p.read_text()) for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json"))}
pathlib.Path(sys.argv[2]).write_text(json.dumps(found, indent=1))
PY
fi
step "done"
