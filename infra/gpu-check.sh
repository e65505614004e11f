#!/usr/bin/env bash
# GPU check, at most 10 minutes: install the gpu extra, build small engines (target + draft),
# write the Triton repository, start Triton on it, run `ctxpress eval` on 20 cases, and print
# engine build time, p50/p95 latency, tokens/s and draft acceptance.
#
# Run from the repository root on a bare GPU machine with Python 3.10+ and registry access:
#   bash infra/gpu-check.sh                 # HF checkpoints in $TARGET_HF / $DRAFT_HF if set
#   GPU_FAMILY=hopper bash infra/gpu-check.sh
#   GPU_CHECK_ENGINE_SALT=1 bash infra/gpu-check.sh   # also salt the engines' KV reuse per user
#                                                     # (triton-repo --engine-cache-salt) and check the engine
# After the eval, benchmarks/cache_oracle.py sends one prompt as two users: the second user's reply must report
# 0 cached tokens (and, with the engine salt, the engine must reuse none of the first user's blocks for them).
# Models: no registry package here carries HF-format Qwen2.5-Coder weights, so without
# TARGET_HF/DRAFT_HF the script makes a tiny random Qwen2 model (the kind TensorRT-LLM's own
# unit tests build) and uses a copy of it as the draft. Latency and tokens/s then measure the
# serving path; acceptance must come out near 1.0 (identical draft), which checks the plumbing.
set -euo pipefail

DEADLINE=$((SECONDS + ${GPU_CHECK_BUDGET_S:-590}))
WORK=${GPU_CHECK_WORK:-/tmp/ctxpress-gpu-check}
PY=${PYTHON:-python3}
mkdir -p "$WORK"
LOG="$WORK/log"
mkdir -p "$LOG"

left() { echo $((DEADLINE - SECONDS)); }
step() { echo; echo "== [$(date +%H:%M:%S), $(left)s left] $*"; }
need() {  # need SECONDS: refuse to start a phase that cannot finish in the budget
  if [ "$(left)" -lt "$1" ]; then echo "gpu-check: out of time before: $2" >&2; exit 124; fi
}
run_for() {  # run_for MAX_SECONDS cmd...: bounded by the remaining budget as well
  local limit=$1; shift
  local l; l=$(left); [ "$l" -lt "$limit" ] && limit=$l
  timeout --signal=TERM --kill-after=10 "$limit" "$@"
}

step "GPU"
nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader
CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' ')
if [ -z "${GPU_FAMILY:-}" ]; then
  case "$CAP" in
    9.*|10.*|12.*) GPU_FAMILY=hopper ;;
    8.9) GPU_FAMILY=ada ;;
    8.*) GPU_FAMILY=ampere ;;
    *) echo "gpu-check: compute capability $CAP is older than Ampere; TensorRT-LLM needs >= 8.0" >&2; exit 2 ;;
  esac
fi
echo "family: $GPU_FAMILY"

step "install ctxpress[gpu] (TensorRT-LLM pinned in pyproject)"
need 60 "install"
if [ ! -x "$WORK/venv/bin/python" ]; then "$PY" -m venv "$WORK/venv"; fi
VPY="$WORK/venv/bin/python"
run_for 300 "$VPY" -m pip install -q --upgrade pip
run_for 300 "$VPY" -m pip install -q -e ".[gpu]" 2>&1 | tail -5
"$VPY" -c "import tensorrt_llm; print('tensorrt_llm', tensorrt_llm.__version__)"
export PATH="$WORK/venv/bin:$PATH"

step "models"
TARGET_HF=${TARGET_HF:-}
DRAFT_HF=${DRAFT_HF:-}
if [ -z "$TARGET_HF" ]; then
  TARGET_HF="$WORK/hf/target"; DRAFT_HF="$WORK/hf/draft"
  "$VPY" - "$TARGET_HF" "$DRAFT_HF" <<'PYEOF'
import shutil, sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

target, draft = Path(sys.argv[1]), Path(sys.argv[2])
# A byte-level BPE tokenizer trained on this repository's own Python: offline, deterministic.
corpus = [p.read_text(errors="ignore") for p in Path(".").rglob("*.py") if ".venv" not in p.parts][:400]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=2048, special_tokens=["<|endoftext|>"]))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
torch.manual_seed(0)
cfg = Qwen2Config(vocab_size=2048, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                  eos_token_id=0, pad_token_id=0, torch_dtype="float16")
model = Qwen2ForCausalLM(cfg).to(torch.float16)
model.save_pretrained(target, safe_serialization=True)
fast.save_pretrained(target)
shutil.copytree(target, draft, dirs_exist_ok=True)  # identical draft: acceptance ~1.0 expected
print("tiny random Qwen2:", sum(p.numel() for p in model.parameters()), "parameters")
PYEOF
fi
echo "target: $TARGET_HF"; echo "draft:  $DRAFT_HF"

step "build engines (dry run first: refuses bad flag combinations before any GPU time)"
ENGINES="$WORK/engines"
BUILD_ARGS=(--target "$TARGET_HF" --draft "$DRAFT_HF" --gpu "$GPU_FAMILY" --out "$ENGINES"
            --calib-repo . --calib-size 64 --max-input-len 2048 --max-output-len 128 --max-batch-size 8)
ctxpress build-engines "${BUILD_ARGS[@]}" --dry-run > "$LOG/build-plan.sh"
need 120 "engine build"
BUILD_T0=$SECONDS
set +e
run_for 360 ctxpress build-engines "${BUILD_ARGS[@]}" 2>&1 | tee "$LOG/build.log"
BUILD_RC=${PIPESTATUS[0]}
set -e
[ "$BUILD_RC" -eq 0 ] || { echo "gpu-check: engine build failed ($BUILD_RC); see $LOG/build.log" >&2; exit 1; }
BUILD_S=$((SECONDS - BUILD_T0))

step "Triton model repository"
SALT_REPO_ARGS=(); SALT_CHECK_ARGS=()
if [ -n "${GPU_CHECK_ENGINE_SALT:-}" ]; then SALT_REPO_ARGS=(--engine-cache-salt); SALT_CHECK_ARGS=(--engine-salt); fi
# --speculate-min-prompt-tokens 0: speculate on every eval case, so acceptance is measured
ctxpress triton-repo --engines "$ENGINES" --out "$WORK/model_repository" --max-batch-size 8 \
  --speculate-min-prompt-tokens 0 "${SALT_REPO_ARGS[@]}"

step "start Triton"
need 90 "Triton start"
if command -v tritonserver >/dev/null && [ -d /opt/tritonserver/backends/tensorrtllm ]; then
  tritonserver --model-repository="$WORK/model_repository" --metrics-port=8002 \
    --disable-auto-complete-config > "$LOG/triton.log" 2>&1 &
  TRITON_PID=$!
elif command -v docker >/dev/null; then
  # The container's TensorRT-LLM must match the pinned wheel that built the engines.
  docker run -d --rm --name ctxpress-gpu-check --gpus all --shm-size=2g --net=host \
    -v "$ENGINES:$ENGINES:ro" -v "$WORK/model_repository:/models:ro" \
    "${TRITON_IMAGE:-nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3}" \
    tritonserver --model-repository=/models --metrics-port=8002 --disable-auto-complete-config > "$LOG/triton.cid"
  TRITON_PID=""
else
  echo "gpu-check: no tritonserver with the tensorrtllm backend and no docker here;" >&2
  echo "  engines were built in ${BUILD_S}s (see $ENGINES/BUILD.json); the serving half needs NVIDIA's Triton." >&2
  exit 3
fi
cleanup() {
  if [ -n "${TRITON_PID:-}" ]; then kill "$TRITON_PID" 2>/dev/null || true; fi
  if [ -f "$LOG/triton.cid" ]; then docker stop ctxpress-gpu-check >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
until curl -fsS localhost:8000/v2/health/ready >/dev/null 2>&1; do
  need 30 "eval (Triton never became ready; see $LOG/triton.log)"
  sleep 2
done
echo "Triton ready"

step "ctxpress eval: 20 cases"
need 30 "eval"
CTXPRESS_TRITON_URL=localhost:8001 run_for 240 ctxpress eval --cases 20 --json "$WORK/eval.json" \
  > "$LOG/eval.log" 2>&1 || { tail -20 "$LOG/eval.log" >&2; exit 1; }
curl -fsS localhost:8002/metrics > "$LOG/metrics.txt" || true

step "cached-token oracle: one prompt as two users"
need 20 "cache oracle check"
set +e
run_for 120 "$VPY" -m benchmarks.cache_oracle --triton localhost:8001 "${SALT_CHECK_ARGS[@]}" \
  | tee "$LOG/cache-oracle.json"
ORACLE_RC=${PIPESTATUS[0]}
set -e

step "summary"
"$VPY" - "$WORK/eval.json" "$BUILD_S" "$LOG/metrics.txt" <<'PYEOF'
import json, re, sys
from pathlib import Path

report = json.loads(Path(sys.argv[1]).read_text())
build_s = int(sys.argv[2])
metrics = Path(sys.argv[3]).read_text() if Path(sys.argv[3]).exists() else ""

def find(*names):
    for name in names:
        if name in report:
            return report[name]
    return None

lat = sorted(find("latencies_ms") or [])
def pct(p):
    return lat[min(len(lat) - 1, int(round(p / 100 * (len(lat) - 1))))] if lat else None
p50, p95 = find("p50_ms") or pct(50), find("p95_ms") or pct(95)
tps = find("tokens_per_s", "tokens_per_second")
proposed, accepted = find("draft_tokens_proposed"), find("draft_tokens_accepted")
acceptance = find("draft_acceptance") or (accepted / proposed if proposed else None)
blocks = dict(re.findall(r'nv_trt_llm_kv_cache_block_metrics\{kv_cache_block_type="(\w+)",model="tensorrt_llm"[^}]*\} (\S+)', metrics))
print(f"engine build time : {build_s} s")
print(f"latency p50 / p95 : {p50} ms / {p95} ms")
print(f"tokens/s          : {tps}")
print(f"draft acceptance  : {acceptance}")
print(f"KV cache blocks   : {blocks or 'n/a'}")
PYEOF
[ "$ORACLE_RC" -eq 0 ] || { echo "gpu-check: cached-token oracle check failed ($ORACLE_RC); see $LOG/cache-oracle.json" >&2; exit 1; }
echo "gpu-check: done in ${SECONDS}s"
