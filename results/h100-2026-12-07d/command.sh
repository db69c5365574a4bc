# The H100 calls of 2026-12-07 (11:46-13:05 UTC), on the device (carry .whl), at main as the session moved.
# run 1 (11:46, at dffda73): the whole GPU tier
FP8_ACC=0 TESTS_TIMEOUT=470 PYTEST_WORKERS=12 CONFORMANCE_OPS=Abs CONFORMANCE_TIMEOUT=100 BENCH=0 QWEN=none STARTUP=0 bash scripts/gpu_run.sh
# (three calls between 12:10 and 13:00 got no machine)
# run 2 (13:02, at 0cfafd3: the helpers' FlashAttentionScoreGrad class, flash D64 shapes, RepeatInterleave variants)
#   sweep file: the ACL_BENCH_ENV_ROWS line of results/sweeps/repeat_interleave.txt ('gather,grid;gather,pdl,grid;gather8,pdl,grid')
#   and ACL_BENCH_FLASH_CONFIGS=64=wg2k64b2psl,64=wg1k64b4psl,64=wg3k64psl,64=wg2k64b2slx3 (that line hit its 60 s limit)
FP8_ACC=0 TEST_PATHS="tests/rocm/test_gpu_attention_grad.py tests/rocm/test_gpu_index_shape.py tests/rocm/test_gpu_wgmma.py" \
  TESTS_TIMEOUT=100 PYTEST_WORKERS=12 CONFORMANCE_OPS='FlashAttentionScoreGrad*,RepeatInterleave*' CONFORMANCE_PARALLEL=3 \
  CONFORMANCE_TIMEOUT=100 BENCH=0 QWEN=none STARTUP=0 SWEEP=<that file> SWEEP_LINE_TIMEOUT=60 \
  bash scripts/gpu_run.sh -k "chunked or repeat_rows or sl- or slx3 or cudnn_path or every_sample_under"
# run 3 (13:04, warm): RepeatInterleave's conformance under the new default, then two D64 candidates
ACL_REPEAT_ROWS=gather8,pdl,grid python3 -m acl_core conformance rocm --full --plain --ops 'RepeatInterleave*'
ACL_BENCH_FLASH_CONFIGS=64=wg2k64b2psl,64=wg1k64b4psl python3 -m acl_core bench --backend rocm --suite ops --sizes full --only FlashAttentionScore
# run 4 (13:05, warm): the second run of wg2k64b2psl
ACL_BENCH_FLASH_CONFIGS=64=wg2k64b2psl python3 -m acl_core bench --backend rocm --suite ops --sizes full --only FlashAttentionScore
