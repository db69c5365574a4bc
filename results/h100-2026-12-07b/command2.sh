# follow-up on the warm machine (03:36):
ACL_BENCH_FLASH_CONFIGS=64=wg2k64b2ps,64=wg2k128s,64=wg2k128wops,128=wg2k128s,128=wg2k128ps,128=wg2k128sx3,128=wg2k128wops OUT=$OUT TESTS=0 QWEN=none STARTUP=0 DECODE_BENCH=0 BENCH_TIMEOUT=150 BENCH_ONLY=FlashAttentionScore bash scripts/gpu_run.sh
