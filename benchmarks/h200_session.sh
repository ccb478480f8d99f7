#!/usr/bin/env bash
# The H200 record of this repository, one stage per call of the lent machine (10 min each):
#   bash benchmarks/h200_session.sh STAGE   with $OUT set (results are written there)
# Stages: gputests, timed-checks, held-out, throughput-triton, throughput-cuda, cuda-build, stability, examples, kb-softmax,
#         kb-bench, kb-walls, events, check-costs, kernel-times, inductor-capture, templated, ray-vs-local, memory-heatmap, tconv, conv-points, comparison-cost, compare-prepare, worker-start, bindings-build, triton-first-launch.
# Needs the wheels in .whl/ (../shared/tools/gpu-wheels.sh .whl pydantic sqlalchemy pyyaml alembic).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
gpus=$(nvidia-smi -L | wc -l)
# A store over the 16 MB a file may come back with travels gzipped: .kbstate/kernels.sqlite3.gz,
# when present, is the store (it wins over .kbstate/kernels.sqlite3)
[ -f .kbstate/kernels.sqlite3.gz ] && gunzip -c .kbstate/kernels.sqlite3.gz > .kbstate/kernels.sqlite3
kb_bench() {  # openkernel bench over ${KB:-.kbsel}, the database from .kbstate/ kept under $OUT
  mkdir -p .kbstate
  # (a second stage of the same call goes on with the first's store, not the carried one)
  [ -f .kbstate/kernels.sqlite3 ] && [ ! -f "$OUT/kernels.sqlite3" ] && python3 -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close()" \
    .kbstate/kernels.sqlite3 "$OUT/kernels.sqlite3"
  # SIGINT at the limit: the bench stops between candidates and still writes its table and JSON
  CUDA_VISIBLE_DEVICES=0 timeout -s INT -k 30 "${T:-500}" python3 -m openkernel.cli bench "${KB:-.kbsel}" --name "${SUITE:-kb-h200}" \
    --set max_iters="${ITERS:-1}" --set branches_per_iteration="${BRANCHES:-2}" --set eval_config.profile=false \
    --set paths.kernels_db_path="$OUT/kernels.sqlite3" --set search.seed=0 ${RETRY:+--retry-failed} ${EXTRA:-} \
    --json "$OUT/${JSON:-kb_bench}.json" 2>&1 | grep -v "^\s*$" | tail -70
}
echo "stage $1 on $(nproc) cores, $gpus GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
case "$1" in
  gputests)  # FILES: the test files (default: every file with GPU tests); K: a -k expression
    # One at a time by default: two engines profiling on one GPU collide (ncu's state is per worker)
    # TT: each test's limit; keep it under T so that pytest prints its summary before the stage's end.
    # At T pytest gets SIGINT (it then prints the failures so far and its summary: a plain kill
    # left four dots and an F, session 21); -v names each test as it ends.
    timeout -s INT -k 20 "${T:-330}" python3 -m pytest -v -m gpu -p no:cacheprovider -n "${N:-1}" --timeout "${TT:-320}" -rs --tb=short ${K:+-k "$K"} \
      ${FILES:-tests/test_pipeline.py tests/test_evaluation_integrity.py tests/test_sandbox.py \
      tests/test_profiling.py tests/test_generators_offline.py tests/test_pch.py tests/test_templates.py \
      tests/test_generators_traced.py tests/test_memory_plan.py tests/test_blame.py \
      tests/test_inductor_seeds.py tests/test_inductor_signatures.py tests/test_inductor_store.py tests/test_nvrtc.py \
      tests/test_gemm_rows.py tests/test_compiler_reductions.py tests/test_conv_transposed.py \
      tests/test_compiler_split.py tests/test_cuda_graph.py tests/test_float64_answer.py tests/test_k_major.py tests/test_conv_nhwc.py tests/test_compiler_matvec.py tests/test_sweep_weights.py tests/test_zygote.py tests/test_launchers.py tests/test_compare_kernel.py} 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -40 ;;
  throughput-triton)  # 32 Triton candidates on GPU 0 alone, then on every GPU (ALLONLY=1: only the latter); NOPROF=1: no ncu
    # NOOVERLAP=1: every check holds the GPU alone (eval_config.overlap_checks, on by default), the label says so
    # NOFORK=1: every worker started anew (eval_config.fork_workers off), the label says so
    extra="${NOPROF:+--set eval_config.profile=false} ${NOOVERLAP:+--set eval_config.overlap_checks=false} ${NOFORK:+--set eval_config.fork_workers=false}"
    # One kernel a candidate (no offline sweeps): the gelu family's 72 GPU points fill the 32
    # (with sweeps of 6 its space was spent after 12 candidates); SWEEPS=1 keeps them.
    [ -n "${SWEEPS:-}" ] || extra="$extra --set prompt.max_template_combinations=1"
    [ -n "${ALLONLY:-}" ] || CUDA_VISIBLE_DEVICES=0 timeout "${T:-240}" python3 benchmarks/pipeline_throughput.py --backend triton \
      --iters 2 --branches 16 --label "triton-1gpu${NOPROF:+-noprofile}${NOOVERLAP:+-nooverlap}${NOFORK:+-nofork}" $extra --out "$OUT/throughput.json" | tail -25
    if [ "$gpus" -gt 1 ]; then
      timeout "${T:-240}" python3 benchmarks/pipeline_throughput.py --backend triton \
        --iters 2 --branches 16 --label "triton-${gpus}gpu${NOPROF:+-noprofile}${NOOVERLAP:+-nooverlap}" $extra --out "$OUT/throughput.json" | tail -25
    fi ;;
  throughput-cuda)  # 16 CUDA C++ candidates, one GPU, 16 cores (as on the one-GPU H200); W=workers
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-400}" taskset -c 0-15 python3 benchmarks/pipeline_throughput.py \
      --backend cuda --iters 1 --branches 16 --label "cuda-1gpu-16cores${W:+-w$W}" \
      ${W:+--set eval_config.max_workers=$W} --out "$OUT/throughput.json" | tail -25 ;;
  cuda-build)  # issue 22: where a CUDA build's time goes. The exact nvcc command cpp_extension
    # runs for a .cu with CUDA headers only, with and without load_inline's implicit
    # <torch/types.h>; NVRTC on the same kernel; then the 16-candidate CUDA job (NVRTC and
    # cpp_extension candidates side by side, reported apart under "forms" and "ninja_steps")
    python3 benchmarks/cuda_build_phases.py --out "$OUT/cuda_build_phases.json" | tail -20
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-400}" taskset -c 0-15 python3 benchmarks/pipeline_throughput.py \
      --backend cuda --iters 1 --branches 16 --label "cuda-1gpu-16cores-nvrtc-and-extension" \
      --out "$OUT/throughput.json" | tail -30 ;;
  ray-vs-local)  # the Ray executor against the local pipeline on one GPU, the same job. Ray in
    # .whl/ too: gpu-wheels.sh .whl pydantic sqlalchemy pyyaml alembic ray is 84 MiB, over a
    # call's 64; Ray's wheel without its Java jar (unused: no Java workers) and source maps is
    # 43.5 MiB, so the whole .whl/ travels in one call:
    #   python3 benchmarks/slim_wheel.py .whl/ray-*.whl --drop ray/jars/ --drop-suffix .js.map
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-540}" python3 benchmarks/ray_vs_local.py --iters "${ITERS:-2}" \
      --branches 16 --out "$OUT/ray_vs_local.json" | tail -40 ;;
  stability)  # SKIP="repeat small cheats": the overlap step alone (eval_config.overlap_checks off, then on)
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-420}" python3 benchmarks/timing_stability.py ${SKIP:+--skip $SKIP} \
      --out "$OUT/timing_stability.json" | tail -5 ;;
  examples)
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-300}" python3 benchmarks/examples_search.py --iters "${ITERS:-2}" --branches 4 \
      --out "$OUT/examples.json" | tail -12 ;;
  kb-softmax)  # KernelBench level1/23_Softmax (6 GiB in) with a correct online softmax: judged
    # correct within memory? nvidia-smi samples the device's memory in use meanwhile.
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > "$OUT/kb23_smi.csv" &
    smi=$!
    SECONDS=0
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-240}" python3 -m openkernel.cli eval "${KB:-.kbsel}/level1/23_Softmax.py" \
      benchmarks/candidates/online_softmax.py --json > "$OUT/kb23_eval.json"
    echo "eval exit $? in ${SECONDS} s"
    kill $smi
    python3 -c "import json,sys; r=json.load(open('$OUT/kb23_eval.json')); m=r['metadata']; print(r['status'], 'eval_s', m.get('evaluation_s'), 'memory', m.get('memory')); print(r['eval_log'][-1500:])"
    sort -n "$OUT/kb23_smi.csv" | tail -1 | sed 's/^/nvidia-smi peak MiB: /' ;;
  tconv)  # issue 23: direct vs gradient-form Triton transposed convolutions vs cuDNN on the problems
    # ${KB:-.kbtconv}/level1/${PAT}.py (PAT: a glob; 8 compiled points a problem, ~6 problems a call)
    timeout "${T:-560}" python3 benchmarks/conv_points.py "${KB:-.kbtconv}"/level1/${PAT:-*conv_transposed*}.py \
      --vary TCONV_DIRECT=1,0 --out "$OUT/tconv.json" ${COMPILE:+--compile} 2>&1 | tail -60 ;;
  conv-points)  # issue 23: the compiled family's convolution forms and tiles vs cuDNN on ${KB:-.kbconv}'s
    # ${PAT:-level*/*}.py: POINTS (a JSON list; default the start points) crossed with VARY
    # ("NAME=v1,v2"), LIMIT seconds a problem
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-500}" python3 benchmarks/conv_points.py "${KB:-.kbconv}"/${PAT:-level*/*}.py \
      ${POINTS:+--points "$POINTS"} ${VARY:+--vary "$VARY"} --limit "${LIMIT:-60}" \
      --out "$OUT/conv_points.json" ${COMPILE:+--compile} 2>&1 | tail -80 ;;
  kb-bench)  # openkernel bench over ${KB:-.kbsel} (KB=benchmarks/llm_kernels: the LLM kernels), resumable: the database starts from .kbstate/
    # and lives under $OUT (what is there comes back even when the call is cut off; the bench
    # checkpoints it and rewrites its JSON after each problem). Keep T under the call's limit.
    kb_bench ;;
  events)  # a run's events with the seconds since its start, and the GPU's memory and the busiest
    # processes every 10 s beside it (where a problem's time goes): TASK="file ...", SETS="--set k=v ..."
    (while sleep 10; do echo "--- $(date +%T)"; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
      ps -eo etimes,pcpu,rss,args --sort=-pcpu | grep -v " ps " | head -6 | cut -c1-160; done) > "$OUT/monitor.txt" 2>&1 &
    CUDA_VISIBLE_DEVICES=0 timeout -s INT -k 20 "${T:-300}" python3 benchmarks/event_times.py $TASK \
      --set paths.kernels_db_path="$OUT/events.sqlite3" --set eval_config.profile=false ${SETS:-} 2>&1 | tee "$OUT/events.txt" | tail -60
    kill %1 ;;
  timed-checks)  # issue 56: every timed call checked. GPU=1: the catalogue's GPU cases and the GPU
    # tests the forwards' own thread touches (profiler, CUDA graphs, confinement, memory);
    # then openkernel bench over ${KB:-.kb56} (1 iteration x 2 branches, profiles off, eager
    # baseline only: what is measured is the candidates' own time) with the checks on, suite
    # ${SUITE:-kb56-on}; CHECKS=0: off (eval_config.check_timed_calls=false, suite kb56-off).
    # Resumable like kb-bench (the store under $OUT; carry it back in .kbstate/).
    # first one honest candidate judged end to end: nothing else runs if that fails
    CUDA_VISIBLE_DEVICES=0 timeout 240 python3 -m openkernel.cli eval examples/gelu tests/candidates/good_gelu.py --set "eval_config.baselines=[eager]" \
      --json > "$OUT/smoke.json" 2> "$OUT/smoke.err"
    python3 -c "import json,sys; r=json.load(open('$OUT/smoke.json')); print('smoke:', r['status'], r['runtime_improvement'], r['metadata'].get('timed_calls')); sys.exit(r['status'] not in ('correct','faster'))" \
      || { tail -30 "$OUT/smoke.err"; python3 -c "import json; print(json.load(open('$OUT/smoke.json'))['eval_log'][-3000:])"; exit 1; }
    if [ -n "${GPU:-}" ]; then
      timeout -s INT -k 20 "${TG:-200}" python3 -m pytest -v -m gpu -p no:cacheprovider --timeout "${TT:-150}" -rs --tb=short \
        tests/test_evaluation_integrity.py tests/test_cuda_graph.py tests/test_blame.py tests/test_sandbox.py \
        tests/test_memory_plan.py tests/test_float64_answer.py 2>&1 | tee "$OUT/pytest_gpu.txt" | grep -E "PASS|FAIL|ERROR|SKIP|passed|failed|^[a-z_]+ \(" | tail -60
    fi
    on=${CHECKS:-1}
    KB=${KB:-.kb56} SUITE=${SUITE:-kb56-$([ "$on" = 0 ] && echo off || echo on)} ITERS=1 BRANCHES=2 \
      JSON=${JSON:-kb56_$([ "$on" = 0 ] && echo off || echo on)} \
      EXTRA="--problem-timeout ${PT:-120} --set eval_config.baselines=[eager] $([ "$on" = 0 ] && echo --set eval_config.check_timed_calls=false) ${EXTRA:-}" kb_bench
    python3 benchmarks/own_time.py "$OUT/kernels.sqlite3" "${SUITE:-kb56-$([ "$on" = 0 ] && echo off || echo on)}" \
      --json "$OUT/${JSON:-kb56_$([ "$on" = 0 ] && echo off || echo on)}_own.json" | tail -4
    python3 benchmarks/timed_checks.py "$OUT/kernels.sqlite3" ${SUITE:-kb56-$([ "$on" = 0 ] && echo off || echo on)} | tail -30
    ;;
  held-out)  # issue 57: openkernel bench over the held-out sample in ${KB:-.kb57} (made by
    # benchmarks/held_out.py: 36 KernelBench problems no bench here had run, drawn at its pinned
    # commit) at ${ITERS:-5} iterations x ${BRANCHES:-4} branches, max-autotune and cudagraphs
    # baselines on (bench's default), each problem under --problem-timeout ${PT:-300}; suite
    # ${SUITE:-kb57-heldout}. Resumable like kb-bench: copy $OUT/kernels.sqlite3(.gz) to .kbstate/
    # between calls and call again until every problem has a line. The depth curve (best after
    # each iteration) is in the JSON and under the table.
    KB=${KB:-.kb57} SUITE=${SUITE:-kb57-heldout} ITERS=${ITERS:-5} BRANCHES=${BRANCHES:-4} \
      JSON=${JSON:-kb57_heldout} EXTRA="--problem-timeout ${PT:-300} ${EXTRA:-}" kb_bench ;;
  kb-walls)  # issue 22: the 46 problems of benchmarks/kb22_problems.txt (levels 1-3, level1/68 and
    # level1/84 among them) in ${KB:-.kb22} at 1 iteration x 4 branches, each problem under
    # --problem-timeout ${PT:-300}. PASS=fresh (suite kb22-fresh: every baseline timed anew) first,
    # then PASS=stored (suite kb22-stored: the same problems, the baselines and Inductor captures
    # the first pass stored: "probe steps" shows inductor near 0),
    # so the fixed cost is measured both ways. Resumable like kb-bench: copy $OUT/kernels.sqlite3
    # to .kbstate/ between calls and call again with the same PASS until every problem has a line.
    case "${PASS:-fresh}" in fresh) fresh=--fresh-baselines ;; stored) fresh= ;; *) echo "PASS=fresh|stored"; exit 2 ;; esac
    # SUITE, JSON: another suite (and file) for the same pass, e.g. one per session's code
    json=${JSON:-kb22_${PASS:-fresh}}
    # ITERS=0: the probe and the baselines only (the fixed cost both ways in minutes, no candidate)
    KB=${KB:-.kb22} SUITE=${SUITE:-kb22-${PASS:-fresh}} ITERS=${ITERS:-1} BRANCHES=4 JSON=$json \
      EXTRA="--problem-timeout ${PT:-300} $fresh ${EXTRA:-}" kb_bench
    python3 - "$OUT/$json.json" "${PT:-300}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); ps = d["problems"]; wall = float(sys.argv[2])
ended = [p for p in ps if p["status"] in ("completed", "failed", "timed_out")]
print(f"{d['suite']}: {len(ended)} of {len(ps)} problems ended ({d['n_timed_out']} timed out), "
      f"{sum(p['correct'] for p in ps)} correct; fixed cost median {d['fixed_s_median']} s "
      f"({sum(bool(p['baselines_stored']) for p in ps)} with stored baselines); a candidate's own "
      f"time median {d['candidate_s_median']} s (plain {d.get('candidate_s_median_plain')} s, sweeps "
      f"{d.get('candidate_s_median_sweep')} s of {d.get('sweep_combinations_median')} combinations); longest problem {max((p['problem_s'] or 0 for p in ps), default=0):.0f} s "
      f"(wall {wall:g} s); worst worker peak {max((p['peak_over_footprint'] or 0 for p in ps), default=0):.2f}x")
steps = {}
for p in ps:
    for k, v in (p.get("probe_steps_s") or {}).items():
        steps.setdefault(k, []).append(v)
if steps:
    med = lambda v: sorted(v)[len(v) // 2]
    print("probe steps, median s: " + ", ".join(f"{k} {med(v):.2f}" for k, v in steps.items()))
for p in ps:
    if p["baseline_note"] or p["status"] == "timed_out":
        print(f"  {p['name']}: {p['status']}; {p['baseline_note'] or p['error'][:120]}")
for p in ps:  # what the best kernels' GEMMs and convolutions multiply in
    if p.get("best_precision"):
        print(f"  {p['name']}: {p.get('over_compile') or 0:.3f}x compile; {', '.join(p['best_precision'])}")
PY
    # where the candidates' own time went (phases, compilations, check steps, spent_s)
    python3 benchmarks/own_time.py "$OUT/kernels.sqlite3" "${SUITE:-kb22-${PASS:-fresh}}" \
      --json "$OUT/${json}_own.json" | tail -10
    ;;
  bindings-build)  # issue 22: GCC over a CUDA candidate's main.cpp by what it includes (extension.h
    # or the precompiled pybind.h; the offline form's tensor side in C++ before, in Python now)
    timeout "${T:-400}" python3 benchmarks/bindings_build.py --repeats "${R:-2}" --out "$OUT/bindings_build.json" | tail -8 ;;
  worker-start)  # issue 22: a worker forked by the fork server against one started anew, 1 and
    # 16 at once (the throughput job starts 16 together): from asking for it to its first answer
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-300}" python3 benchmarks/worker_start.py --device cuda \
      --at-once 1 16 --repeats "${R:-2}" --out "$OUT/worker_start.json" | tail -8 ;;
  triton-first-launch)  # issue 22: a Triton kernel's first launch in a fresh process with an empty
    # cache (as every worker's): compiling, Triton's host C modules (driver utils, launcher), then again
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-200}" python3 benchmarks/triton_first_launch.py \
      --repeats "${R:-2}" --json "$OUT/triton_first_launch.json" ;;
  comparison-cost)  # issue 22: comparing outputs with the unmasked first pass vs the masked pass
    # and the one-pass kernel (eval_config.fused_comparison),
    # alone, on a float32 output of ${N:-1610612736} elements (6 GiB: level1/23's size) and 16 Mi
    CUDA_VISIBLE_DEVICES=0 python3 benchmarks/comparison_cost.py --device cuda --elements "${N:-1610612736}" \
      --out "$OUT/comparison_cost.json" | tail -14
    CUDA_VISIBLE_DEVICES=0 python3 benchmarks/comparison_cost.py --device cuda --elements 16777216 \
      --out "$OUT/comparison_cost_16mi.json" | tail -14 ;;
  compare-prepare)  # issue 22: making the one-pass comparison kernel, step by step, ${AT:-1 16}
    # processes at once, the self-check's sets on torch's threads as a process starts and on one
    # (2.0-2.3 s a job in a bench), beside BUSY (default 0) processes keeping the GPU busy and
    # CPU_BUSY (default "0 16") keeping a core each busy
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-300}" python3 benchmarks/compare_prepare.py --at-once ${AT:-1 16} \
      --threads 0 1 --busy ${BUSY:-0} --cpu-busy ${CPU_BUSY:-0 16} --out "$OUT/compare_prepare.json" ;;
  check-costs)  # issue 22: a check's steps on each problem's own data, alone and beside BUSY
    # (default 3) processes keeping the GPU busy: ${KB:-.kbsel}/${PAT:-level*/*}.py
    for f in "${KB:-.kbsel}"/${PAT:-level*/*}.py; do
      n=$(basename "$(dirname "$f")")_$(basename "$f" .py)
      CUDA_VISIBLE_DEVICES=0 timeout "${T:-120}" python3 benchmarks/check_costs.py "$f" --busy "${BUSY:-3}" \
        --out "$OUT/check_costs_$n.json" 2>&1 | tail -22
    done ;;
  kernel-times)  # issue 23: per-kernel GPU time and the gap beside torch.compile's, for the best
    # stored kernel of each of ${KB:-.kbsel}/${PAT:-level*/*}.py (the store: .kbstate/kernels.sqlite3)
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-300}" python3 benchmarks/kernel_times.py "${KB:-.kbsel}"/${PAT:-level*/*}.py \
      --db .kbstate/kernels.sqlite3 --out "$OUT/kernel_times.json" 2>&1 | grep -v "^\s*$" | tail -80 ;;
  inductor-capture)  # issue 23: Inductor's output for the seed tests (an extern GEMM, a reduction,
    # a convolution) and for ${KB:-.kbsel}'s problems, captured on the GPU (nothing runs): JSON
    # under $OUT/inductor; copy tests/data/inductor/*.json from there to replace the stand-in captures
    timeout "${T:-500}" python3 benchmarks/capture_inductor.py tests/data/inductor/*.py \
      $(ls "${KB:-.kbsel}"/level*/*.py 2>/dev/null | head -"${N:-60}") --out "$OUT/inductor" 2>&1 | tail -70 ;;
  memory-heatmap)  # issue 25: a GELU job profiled with eval_config.profile_memory (Nsight Compute's
    # memory workload tables); $OUT/kernels.sqlite3 comes back, then on a machine with Chromium:
    # python benchmarks/memory_heatmap.py screenshot --db OUT/kernels.sqlite3 (docs/memory-heatmap.png)
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-400}" python3 benchmarks/memory_heatmap.py run --out "$OUT" 2>&1 | tail -20
    if [ -x /usr/bin/chromium ] && python3 -c "import playwright" 2>/dev/null; then
      python3 benchmarks/memory_heatmap.py screenshot --db "$OUT/kernels.sqlite3" --png "$OUT/memory-heatmap.png"
    fi ;;
  templated)  # issue 13: a templated Triton matmul (48 combinations) and CUDA C++ GELU (16), judged
    CUDA_VISIBLE_DEVICES=0 timeout "${T:-420}" python3 benchmarks/templated_sweep.py \
      ${ONLY:+--only $ONLY} --out "$OUT/templated.json" 2>&1 | tail -20 ;;
esac
# (then here: gunzip -c OUT/kernels.sqlite3.gz > .kbstate/kernels.sqlite3, or carry the .gz)
if [ -f "$OUT/kernels.sqlite3" ] && [ "$(stat -c %s "$OUT/kernels.sqlite3")" -gt 15000000 ]; then
  gzip -f -1 "$OUT/kernels.sqlite3" && echo "the store comes back gzipped: $OUT/kernels.sqlite3.gz"
fi
