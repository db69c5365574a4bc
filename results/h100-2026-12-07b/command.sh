# session 10: the opt-in GPU paths proven (SFA gemm, int8 gmm mma, warp-specialised wgmma flash, decode split options), then timed
O=$OUT; mkdir -p $O/c $O/b
OUT=$O/c ACL_SFA_PATH=gemm ACL_GMM_KERNEL=mma BENCH=0 QWEN=none STARTUP=0 FP8_ACC_TIMEOUT=1 TESTS_TIMEOUT=250 CONFORMANCE_TIMEOUT=230 CONFORMANCE_PARALLEL=3 PYTEST_WORKERS=12 \
 CONFORMANCE_OPS=SparseFlashAttention,GroupedMatmulSwigluQuantV2,GroupedMatmulSwigluQuantWeightNzV2,GroupedMatmulSwigluQuantWeightNZ,QuantGroupedMatmulDequant,QuantGroupedMatmulDequantWeightNZ \
 bash scripts/gpu_run.sh -v -k 'test_gpu_sparse_attention or test_gpu_gmm_quant or test_gpu_grouped_matmul or (test_gpu_wgmma and (k128w or k64w or windows or prefill)) or test_gpu_decode_split_opts'
echo "pytest PASSED: $(grep -c ' PASSED' $O/c/work/pytest_gpu.log)"; grep -E " FAILED| ERROR" $O/c/work/pytest_gpu.log | head -30
export ACL_BENCH_FLASH_CONFIGS=128=wg2k128,128=wg2k128s,128=wg2k128wop,128=wg2k128wopsx3,64=wg2k64b2p,64=wg2k128wop
OUT=$O/b TESTS=0 QWEN=none STARTUP=0 DECODE_BENCH=0 BENCH_TIMEOUT=170 SWEEP=.whl/sweep3.txt SWEEP_LINE_TIMEOUT=80 BENCH_ONLY=SparseFlashAttention,GroupedMatmulSwigluQuantV2,FlashAttentionScore bash scripts/gpu_run.sh
rm -f $O/*/caps.json $O/*/bench_ops.png
