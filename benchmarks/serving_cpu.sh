#!/usr/bin/env bash
# Serving-stack CPU per streamed token, the issue-12 workload: one server,
# `rotor bench` at one concurrency (~160-token prompts, 128-token answers,
# ignore_eos), CPU read from /proc of the server process and its children.
#
#   benchmarks/serving_cpu.sh rotor  32 out=mocker --speedup-ratio 0
#   benchmarks/serving_cpu.sh rotor  32 out=mocker --speedup-ratio 0 --http-workers 2
#   ROTOR_ECHO_DELAY_MS=0 benchmarks/serving_cpu.sh rotor 32 out=echo
#   DYNAMO_PY=/path/to/dynamo-venv/bin/python benchmarks/serving_cpu.sh dynamo 32
#
# `dynamo` runs `python -m dynamo.frontend` + `python -m dynamo.mocker
# --speedup-ratio 0` (file discovery) on a model directory written from
# rotor's built-in test model, so both serve the same tokenizer.
set -euo pipefail
KIND=$1 CONC=$2
shift 2
PORT=${PORT:-8199}
OUT=${OUT:-$(mktemp -d /tmp/serving-cpu.XXXX)}
MODEL_DIR=$OUT/model
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

if [[ $KIND == rotor ]]; then
  python -m rotor.cli run "$@" --port "$PORT" >"$OUT/server.log" 2>&1 &
  pids+=($!)
  model_args=()
else
  python - "$MODEL_DIR" <<'PY'
import json, sys
from pathlib import Path
from rotor.model.builtin import CHATML_TEMPLATE, _chatml_tokenizer
root = Path(sys.argv[1]); root.mkdir(parents=True, exist_ok=True)
tok = _chatml_tokenizer(); tok.save(str(root / "tokenizer.json"))
added = {str(i): {"content": t.content, "special": t.special, "lstrip": False, "rstrip": False,
                  "normalized": False, "single_word": False}
         for i, t in sorted(tok.get_added_tokens_decoder().items())}
(root / "tokenizer_config.json").write_text(json.dumps({
    "added_tokens_decoder": added, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
    "chat_template": CHATML_TEMPLATE, "model_max_length": 32768,
    "tokenizer_class": "PreTrainedTokenizerFast"}))
eos = [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
(root / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
(root / "config.json").write_text(json.dumps({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "vocab_size": tok.get_vocab_size(), "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
    "max_position_embeddings": 32768, "eos_token_id": eos[0], "bos_token_id": eos[0]}))
PY
  export DYN_FILE_KV=$OUT/kv
  "$DYNAMO_PY" -m dynamo.frontend --http-port "$PORT" --discovery-backend file >"$OUT/fe.log" 2>&1 &
  pids+=($!)
  "$DYNAMO_PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name mock-model \
    --discovery-backend file --speedup-ratio 0 >"$OUT/mocker.log" 2>&1 &
  pids+=($!)
  model_args=(--model mock-model)
fi

for _ in $(seq 300); do
  if curl -sf "localhost:$PORT/v1/models" | grep -q '"id"'; then break; fi
  sleep 0.2
done
server_pids=("${pids[@]}")
for p in "${pids[@]}"; do
  read -ra kids <"/proc/$p/task/$p/children" || true
  server_pids+=("${kids[@]}")
done
rotor bench --url "http://127.0.0.1:$PORT/v1" "${model_args[@]}" --concurrency "$CONC" \
  --num-requests "${REQUESTS:-640}" --warmup 32 --input-len 32 --output-len 128 \
  --server-pid "${server_pids[@]}" --no-progress --output-dir "$OUT/results"
