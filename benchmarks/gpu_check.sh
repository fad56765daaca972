#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run of under 8 minutes (each part has its own time limit):
#
#   (a) the tests marked gpu:                 python -m pytest -m gpu -q
#   (b) the first 20 pretraining losses of MLM, CLM and span on CUDA fp32 against CPU fp32
#       (same seed, same batches):            benchmarks/gpu_losses.py
#   (c) tokens/s of maskwise against HF on the GPU: the README performance table's shapes (4 layers,
#       d_model 256, sequence 128, batch 16; MLM, CLM, span) and GPT-2 small's (12 layers, d_model
#       768, 12 heads, FFN 3072, sequence 1024; CLM, batch 8), fp32 and bf16 sides:
#                                             benchmarks/bench_train.py --device cuda
#   (d) the comparison report end to end:     maskwise compare --quick --device cuda
#   (e) pretraining under torchrun:           torchrun --nproc_per_node=1 -m maskwise pretrain --device cuda
#
# Usage: benchmarks/gpu_check.sh            (from anywhere; PYTHON=... picks the interpreter)
# Prints a header (GPUs, torch, the runtime maskwise picks), each part's output and wall time, and a
# summary. Exit status: 0 if every part passed, 1 if one failed or ran out of time, 2 (with one line)
# on a machine without a CUDA GPU.

set -u
cd "$(dirname "$0")/.." || exit 1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"  # works with or without maskwise installed
export TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python}

if ! "$PY" -c "import sys; from maskwise.runtime import detect_hardware; sys.exit(0 if detect_hardware().cuda_capabilities else 1)" 2>/dev/null; then
    echo "gpu_check.sh: no CUDA GPU visible here (torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not importable')): nothing to check"
    exit 2
fi

started=$(date +%s)
echo "== gpu_check.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname)"
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not available"
"$PY" -c "
import torch
from maskwise.runtime import machine_line, resolve
print(f'torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}')
print('maskwise auto:', machine_line(resolve()))
"

summary=()
failed=0

# part NAME LIMIT_SECONDS COMMAND...: run COMMAND under `timeout`, print and record its wall time.
part() {
    local name=$1 limit=$2
    shift 2
    echo
    echo "== ($name) limit ${limit} s: $*"
    local t0 t1 rc verdict
    t0=$(date +%s.%N)
    timeout -k 10 "$limit" "$@"
    rc=$?
    t1=$(date +%s.%N)
    case $rc in
        0) verdict="ok" ;;
        124 | 137) verdict="TIMED OUT after ${limit} s" ;;
        *) verdict="FAILED (exit $rc)" ;;
    esac
    if [ "$name" = "a: pytest -m gpu" ] && [ $rc -eq 5 ]; then
        verdict="NOTHING RAN (exit 5: no test marked gpu was collected)"
    fi
    [ "$verdict" = "ok" ] || failed=1
    local line
    line=$(awk -v n="$name" -v v="$verdict" -v a="$t0" -v b="$t1" 'BEGIN { printf "(%s): %s, %.0f s", n, v, b - a }')
    echo "== $line"
    summary+=("$line")
}

BENCH=(--device cuda --hf-bf16 --rounds 3 --steps 3 --warmup 2)
GPT2=(--layers 12 --d-model 768 --heads 12 --d-ff 3072 --seq 1024 --batch 8 --vocab 8192)
TINY=(--layers 2 --d-model 64 --heads 4 --block-size 64 --batch-size 8 --steps 20 --eval-every 10 --eval-batches 2)

part "a: pytest -m gpu" 60 "$PY" -m pytest -m gpu -q
part "b: losses, CUDA fp32 vs CPU fp32" 45 "$PY" benchmarks/gpu_losses.py --steps 20 --device cuda --precision fp32
part "c: train MLM, README shape" 45 "$PY" benchmarks/bench_train.py --objective mlm "${BENCH[@]}"
part "c: train CLM, README shape" 35 "$PY" benchmarks/bench_train.py --objective clm "${BENCH[@]}"
part "c: train span, README shape" 35 "$PY" benchmarks/bench_train.py --objective span "${BENCH[@]}"
part "c: train CLM, GPT-2 small shape" 70 "$PY" benchmarks/bench_train.py --objective clm "${GPT2[@]}" \
    --device cuda --hf-bf16 --rounds 3 --steps 2 --warmup 2
part "d: maskwise compare --quick" 120 "$PY" -m maskwise compare --quick --device cuda --out /tmp/gpu-compare \
    --overwrite --no-progress
part "e: torchrun pretrain" 40 "$PY" -m torch.distributed.run --nproc_per_node=1 -m maskwise pretrain \
    --family decoder "${TINY[@]}" --device cuda --out /tmp/gpu-torchrun --overwrite --no-progress

echo
echo "== summary ($(($(date +%s) - started)) s in all)"
for line in "${summary[@]}"; do
    echo "$line"
done
exit $failed
