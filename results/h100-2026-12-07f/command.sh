# 2026-12-07 session 15, NVIDIA H100 80GB HBM3 (no H200 lent). Two failed starts before run 1 (17:22, 17:28).
# run 1 (17:34-17:38, cold machine):
TEST_PATHS="tests/rocm/test_gpu_wgmma.py tests/rocm/test_gpu_flash_attention.py" CONFORMANCE_OPS='FlashAttentionScore,PromptFlashAttention*,FusedInferAttentionScore*' CONFORMANCE_PARALLEL=4 TESTS_TIMEOUT=200 CONFORMANCE_TIMEOUT=200 PYTEST_WORKERS=10 BENCH_ONLY=GroupedMatmulV5,GroupedMatmulV5Wgmma,FlashAttentionScore DECODE_BENCH=0 BENCH_TIMEOUT=150 SWEEP=results/sweeps/s15-call1.txt SWEEP_LINE_TIMEOUT=90 QWEN=none STARTUP=0 FP8_ACC=0 bash scripts/gpu_run.sh
# 18:08-18:57: five more starts failed (no machine).
# run 2 (19:09-19:10, cold machine): the grouped GEMM under auto = wgmma on sm_90 (commit 23a2946): its GPU tier file and conformance
TEST_PATHS="tests/rocm/test_gpu_grouped_matmul.py" CONFORMANCE_OPS='GroupedMatmul*' CONFORMANCE_PARALLEL=4 TESTS_TIMEOUT=100 CONFORMANCE_TIMEOUT=100 PYTEST_WORKERS=12 BENCH=0 QWEN=none STARTUP=0 FP8_ACC=0 bash scripts/gpu_run.sh -k "not matrix_kernel"
# run 3 (19:11, warm): the wgmma kernel's -m / -d choices beside its default (the device time then ran out)
export PYTHONPATH=/tmp/acl-site:$(pwd):$(pwd)/backends; export ACL_KERNEL_CACHE=/tmp/acl-kernel-cache; ACL_BENCH_GMM_WGMMA_CONFIGS=128x256-s4-sw,128x256-s4-m-sw,128x256-s4-d-sw,128x256-s4-m-d-sw timeout 95 python3 -m acl_core bench --backend rocm --suite ops --sizes full --only GroupedMatmulV5Wgmma --out $OUT/gmm-md.json
