# The H100 calls of 2026-12-07 (08:36-10:03 UTC), each `bash scripts/gpu_run.sh` on the device (carry .whl) with:
# run 1 (the 114 new operators): the GPU tier of their files, conformance over their names, their bench rows
TEST_PATHS="$(echo tests/rocm/test_gpu_{bitwise,pooling,padding,index_shape,class_loss,attention_grad,conv_grad,batch_norm_grad,misc_ops,loss,reduction_norm,gmm_wgmma}.py)" \
  CONFORMANCE_OPS="<the 114 names added 2026-12-07>" FP8_ACC=0 TESTS_TIMEOUT=250 PYTEST_WORKERS=10 CONFORMANCE_PARALLEL=6 \
  CONFORMANCE_TIMEOUT=250 BENCH_ONLY=BitwiseAndTensor,Addcmul,FlashAttentionScoreGrad,ConvolutionBackward,BatchNormBackward,CrossEntropyLoss,StridedSlice,RepeatInterleave,EmbeddingDenseBackward,ReflectionPad2d,AvgPool2d,MaxPool2dWithIndices,GroupedMatmulV5,GroupedMatmulV5Wgmma \
  BENCH_TIMEOUT=190 DECODE_BENCH=0 QWEN=none STARTUP=0 bash scripts/gpu_run.sh
# run 2 (a debug call): CrossEntropyLossGrad's case alone, under compute-sanitizer memcheck / racecheck, and
#   pytest -m gpu tests/rocm/test_gpu_decode_split_opts.py tests/rocm/test_gpu_wgmma.py -k "decode_split or k128s or k128ps or k64b2ps"
# run 4 (the fixes, the wgmma flash default): TEST_PATHS=test_gpu_{flash_attention,wgmma,attention,attention_grad,class_loss,bitwise}.py
#   CONFORMANCE_OPS='FlashAttentionScoreGrad*,Addcdiv,InplaceAddcdiv,Addcmul,InplaceAddcmul,CrossEntropyLossGrad,FlashAttentionScore,...V4,PromptFlashAttention*,FusedInferAttentionScore*'
#   BENCH_ONLY=FlashAttentionScore SWEEP=sweep4.txt
# run 5 (the helpers' branches): TEST_PATHS=test_gpu_{conv_grad_cudnn,attention,capture,plan_cache,class_loss,index_shape,bitwise,attention_grad}.py
#   CONFORMANCE_OPS='FlashAttentionScoreGrad*,Addc*,CrossEntropyLoss*,FlashAttentionScore*,ConvolutionBackward,RepeatInterleave*'
#   BENCH_ONLY=ConvolutionBackward,CrossEntropyLoss,RepeatInterleave,FlashAttentionScoreGrad,Addcmul SWEEP=sweep5.txt
# run 6 (the new defaults): TEST_PATHS=test_gpu_{attention_grad,conv_grad_cudnn,conv_grad,class_loss,index_shape,attention}.py
#   CONFORMANCE_OPS='ConvolutionBackward,CrossEntropyLoss*,RepeatInterleave*,FlashAttentionScoreGrad*,FlashAttentionScore*'
#   BENCH_ONLY=FlashAttentionScoreGrad,ConvolutionBackward,CrossEntropyLoss,RepeatInterleave SWEEP=sweep6.txt
# run 7 (everything): FP8_ACC=1 TESTS_TIMEOUT=450 PYTEST_WORKERS=7 CONFORMANCE_PARALLEL=10 CONFORMANCE_TIMEOUT=450 BENCH=0 QWEN=none STARTUP=0
# run 8 (the tier without the files runs 1-6 proved): pytest -m gpu tests/rocm --ignore=<those 17 files> -q -rfE -n 12 (timeout -s INT 250)
