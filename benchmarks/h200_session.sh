#!/usr/bin/env bash
# The H200 record of this repository, one stage per call of the lent machine (10 min each):
#   bash benchmarks/h200_session.sh STAGE   with $OUT set (results are written there)
# Stages: gputests, throughput-triton, throughput-cuda, stability, examples.
# Needs the wheels in .whl/ (../shared/tools/gpu-wheels.sh .whl pydantic sqlalchemy pyyaml).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
gpus=$(nvidia-smi -L | wc -l)
echo "stage $1 on $(nproc) cores, $gpus GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
case "$1" in
  gputests)  # FILES: the test files (default: every file with GPU tests)
    # One at a time by default: two engines profiling on one GPU collide (ncu's state is per worker)
    timeout "${T:-330}" python3 -m pytest -q -m gpu -p no:cacheprovider -n "${N:-1}" --timeout 320 -rs \
      ${FILES:-tests/test_pipeline.py tests/test_evaluation_integrity.py tests/test_sandbox.py \
      tests/test_profiling.py tests/test_generators_offline.py tests/test_pch.py} 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -40 ;;
  throughput-triton)  # 32 Triton candidates on GPU 0 alone, then on every GPU (ALLONLY=1: only the latter); NOPROF=1: no ncu
    extra=${NOPROF:+--set eval_config.profile=false}
    [ -n "${ALLONLY:-}" ] || CUDA_VISIBLE_DEVICES=0 timeout "${T:-240}" python3 benchmarks/pipeline_throughput.py --backend triton \
      --iters 2 --branches 16 --label "triton-1gpu${NOPROF:+-noprofile}" $extra --out "$OUT/throughput.json" | tail -25
    if [ "$gpus" -gt 1 ]; then
      timeout "${T:-240}" python3 benchmarks/pipeline_throughput.py --backend triton \
        --iters 2 --branches 16 --label "triton-${gpus}gpu${NOPROF:+-noprofile}" $extra --out "$OUT/throughput.json" | tail -25
    fi ;;
  throughput-cuda)  # 16 CUDA C++ candidates, one GPU, 16 cores (as on the one-GPU H200); W=workers
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-400}" taskset -c 0-15 python3 benchmarks/pipeline_throughput.py \
      --backend cuda --iters 1 --branches 16 --label "cuda-1gpu-16cores${W:+-w$W}" \
      ${W:+--set eval_config.max_workers=$W} --out "$OUT/throughput.json" | tail -25 ;;
  stability)
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-420}" python3 benchmarks/timing_stability.py --out "$OUT/timing_stability.json" | tail -5 ;;
  examples)
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-300}" python3 benchmarks/examples_search.py --iters "${ITERS:-2}" --branches 4 \
      --out "$OUT/examples.json" | tail -12 ;;
esac
