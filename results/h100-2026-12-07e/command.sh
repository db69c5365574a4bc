# 2026-12-07 session 14, NVIDIA H100 80GB HBM3 (no H200 lent). Three failed starts before run 1 (14:15-14:31).
# run 1 (14:42-14:46, cold machine):
TEST_PATHS="tests/rocm/test_gpu_select.py tests/rocm/test_gpu_attention_grad.py::test_cudnn_tuned_plan_matches_the_reference tests/rocm/test_gpu_grouped_matmul.py::test_moe_layer_on_the_matrix_kernel tests/rocm/test_gpu_paged_attention.py" CONFORMANCE_OPS='Nonzero,NonzeroV2,MaskedSelect,QuantMatmul*,RepeatInterleave*' TESTS_TIMEOUT=200 CONFORMANCE_TIMEOUT=200 PYTEST_WORKERS=8 BENCH_ONLY=Nonzero,MaskedSelect DECODE_BENCH=0 BENCH_TIMEOUT=60 SWEEP=results/sweeps/s14-call1.txt SWEEP_LINE_TIMEOUT=60 QWEN=none STARTUP=0 FP8_ACC=0 bash scripts/gpu_run.sh
# run 2 (14:46-14:50, warm):
export PYTHONPATH=/tmp/acl-site:$(pwd):$(pwd)/backends; TESTS=0 BENCH=0 SWEEP=results/sweeps/s14-call2.txt SWEEP_LINE_TIMEOUT=70 QWEN=none STARTUP=0 bash scripts/gpu_run.sh
# run 3 (14:50-14:52, warm): the GPU tier of the attention backward under what became its default, and the D 64 / D 128 shapes twice
export PYTHONPATH=/tmp/acl-site:$(pwd):$(pwd)/backends; mkdir -p $OUT/w; ACL_ATTENTION_GRAD_PATH=cudnn ACL_ATTENTION_GRAD_CUDNN_SQUARE=top-left timeout -s INT 200 python3 -m pytest -m gpu tests/rocm/test_gpu_attention_grad.py -q -rfEs -n 8 -p no:cacheprovider > $OUT/w/pytest_grad.log 2>&1
for i in 1 2; do ACL_BENCH_FLASH_CONFIGS=64=wg1k64b4sl,64=wg1k64b4psl,64=wg2k64b2slx3,128=wg2k128ps timeout 120 python3 -m acl_core bench --backend rocm --suite ops --sizes full --only FlashAttentionScore --out $OUT/flash64-r$i.json; done
# run 4 (14:52, warm): the flash cases of the shapes that became defaults
timeout -s INT 200 python3 -m pytest -m gpu tests/rocm/test_gpu_wgmma.py -q -rfEs -n 8 -p no:cacheprovider -k "test_wgmma_flash_matches_reference and (wg2k64b2slx3 or wg2k128ps or wg1k64b4sl)"   # 7 passed
# 15:46-16:22: four starts failed (no machine).
# run 5 (16:24-16:26, cold): the select family under vector loads, both load settings timed, the flash backward's bench row
export ACL_SELECT_LOADS=vec; TEST_PATHS="tests/rocm/test_gpu_select.py" CONFORMANCE_OPS='Nonzero,NonzeroV2,MaskedSelect' TESTS_TIMEOUT=80 CONFORMANCE_TIMEOUT=80 PYTEST_WORKERS=12 BENCH_ONLY=Nonzero,MaskedSelect DECODE_BENCH=0 BENCH_TIMEOUT=30 SWEEP=results/sweeps/s14-call3.txt SWEEP_LINE_TIMEOUT=30 QWEN=none STARTUP=0 FP8_ACC=0 bash scripts/gpu_run.sh
# run 6 (16:26, warm): the fused flash backward's GPU tier   -> 26 passed in 17.88s
export PYTHONPATH=/tmp/acl-site:$(pwd):$(pwd)/backends; timeout -s INT 60 python3 -m pytest -m gpu tests/rocm/test_gpu_attention_flash_grad.py -q -rfE -n 12 -p no:cacheprovider
# run 7 (16:27, warm): its conformance   -> PASSED: 840 passed, 162 contract, 0 failed, 0 skipped, 0 xfailed, 0 xpassed in 15.6 s
ACL_ATTENTION_GRAD_PATH=flash OMP_NUM_THREADS=1 timeout -s INT 40 python3 -m acl_core conformance rocm --full --plain --ops 'FlashAttentionScoreGrad*' --report /tmp/cf
