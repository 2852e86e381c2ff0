#!/usr/bin/env bash
# test.sh: installs what the tests need, builds Kinetic (plain and with ASan + UBSan)
# and runs the whole suite on both builds with CTest; then the aarch64 part: the cross
# build, its kernel, model and golden-token tests under qemu-aarch64 (every ARM level),
# and (in the plain suite, py_test_cross_isa) receipts made on x86 verified under qemu and
# back.
#   scripts/test.sh              everything
#   scripts/test.sh --quick      the plain build only
#   scripts/test.sh --no-aarch64 everything but the aarch64 part
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
aarch64=1
for a in "$@"; do
  case "$a" in
    --quick) quick=1; aarch64=0 ;;
    --no-aarch64) aarch64=0 ;;
    *) echo "test.sh: unknown option '$a' (use --quick or --no-aarch64)" >&2; exit 2 ;;
  esac
done
scripts/deps.sh --test
scripts/build.sh
status=0
# The tests of the aarch64 build that run under qemu: every kernel bit-equality test (each
# loops over the levels this CPU has: qemu's -cpu max has neon, dotprod and i8mm), the
# reference quantizers, BLAKE3, sampling's pinned tokens, whole models against the
# reference backend, and llama.cpp's golden tokens for aidreams260K (test_run.py).
aarch64_unit='^(test_kern_.*|test_attn|test_ops_.*|test_kmath|test_quant|test_blake3|test_sample_chain|test_backend_seam|test_synth)$'
if [ $aarch64 = 1 ]; then
  scripts/deps.sh --arch aarch64
  scripts/build.sh --arch aarch64
  export KN_CROSS_REQUIRED=1 # py_test_cross_isa in the plain suite must not skip
fi
if [ $quick = 0 ]; then
  scripts/build.sh --sanitize
  echo "== sanitizer build (ASan + UBSan) =="
  ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j2 || status=1
fi
echo "== plain build =="
ctest --test-dir build --output-on-failure -j2 || status=1
if [ $aarch64 = 1 ]; then
  echo "== aarch64 build under qemu-aarch64 =="
  t0=$(date +%s)
  ctest --test-dir build-aarch64 -R "$aarch64_unit" --output-on-failure -j2 || status=1
  KINETIC="$PWD/build-aarch64/kinetic-emu" KN_SHARED="${KN_SHARED:-$PWD/../shared}" \
    KN_SOURCE="$PWD" KN_BUILD="$PWD/build-aarch64" .venv/bin/python -m pytest -q -x \
    -p no:cacheprovider tests/py/test_run.py \
    -k "greedy_matches_llamacpp or invariant_across_threads_isa" || status=1
  echo "aarch64 under qemu: $(( $(date +%s) - t0 )) s (py_test_cross_isa ran in the plain suite)"
fi
exit $status
