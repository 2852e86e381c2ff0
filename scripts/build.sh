#!/usr/bin/env bash
# build.sh: configures and builds Kinetic.
#   scripts/build.sh              release-style build in build/
#   scripts/build.sh --sanitize   ASan + UBSan build in build-asan/
# Extra arguments after the options go to CMake (e.g. -DCMAKE_C_COMPILER=clang).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
args=()
for a in "$@"; do
  case "$a" in
    --sanitize) dir=build-asan; args+=(-DKN_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug) ;;
    *) args+=("$a") ;;
  esac
done
[ -n "${CI:-}" ] && args+=(-DKN_WERROR=ON)
cmake -S . -B "$dir" -DKN_PYTHON="$PWD/.venv/bin/python" "${args[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
