#!/usr/bin/env bash
# test.sh: installs what the tests need, builds Kinetic (plain and with ASan + UBSan)
# and runs the whole suite on both builds with CTest; then the aarch64 part: the cross
# build, its kernel, model and golden-token tests under qemu-aarch64 (every ARM level),
# and (in the plain suite, py_test_cross_isa) receipts made on x86 verified under qemu and
# back.
#   scripts/test.sh              everything; the aarch64 part where this machine is set up
#                                for it, or (on a terminal) after asking to set it up
#   scripts/test.sh --aarch64    everything, setting up the aarch64 part without asking
#                                (CI: .ci/run)
#   scripts/test.sh --quick      the plain build only
#   scripts/test.sh --no-aarch64 everything but the aarch64 part
# The tests need nothing outside the repository (tests/data, and what scripts/deps.sh
# --test installs or fetches by hash). Setting up the aarch64 part changes the system
# beyond installing packages: it adds the arm64 architecture to dpkg (multiarch), so that
# step is asked for, or named with --aarch64, never taken silently.
#
# CI time (budget: 20 minutes for a clean clone on 2 cores, aim 15). Each phase prints its
# seconds. What keeps it down, without dropping a check that finds anything:
#  - the sanitizer build is -O1 -g (CMakeLists.txt, build type Sanitize), not -O0: the
#    AddressSanitizer documentation's advice; its unit tests take half the CPU time;
#  - the sanitizer suite leaves out the Python tests that reach no C path there that
#    another sanitizer test does not (KN_PY_PLAIN_ONLY in tests/CMakeLists.txt, each with
#    where its C code is covered); they run in the plain suite;
#  - the longest tests start first (COST in tests/CMakeLists.txt): a clean clone has no
#    CTest timing history, and `ctest -j2` would otherwise end on one long test alone;
#  - under qemu, the golden-token run goes beside the unit tests instead of after them.
# A test that is long only in the sanitizer build checks fewer cases there
# (tests/py/srvutil.py sanitizer_build), saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
aarch64=ask
for a in "$@"; do
  case "$a" in
    --quick) quick=1; aarch64=0 ;;
    --no-aarch64) aarch64=0 ;;
    --aarch64) aarch64=1 ;;
    *) echo "test.sh: unknown option '$a' (use --aarch64, --no-aarch64 or --quick)" >&2; exit 2 ;;
  esac
done
if [ "$aarch64" = ask ]; then
  # Set up already (arm64 in dpkg's architectures, the cross compiler and qemu): run it.
  if dpkg --print-foreign-architectures 2>/dev/null | grep -qx arm64 &&
     command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1; then
    aarch64=1
  elif [ -t 0 ] && [ -t 1 ]; then
    read -r -p "test.sh: the aarch64 tests need dpkg's arm64 architecture (multiarch) added, and qemu-user and the aarch64 cross compiler installed. Set them up? [y/N] " yn
    case "$yn" in [yY]*) aarch64=1 ;; *) aarch64=0 ;; esac
  else
    aarch64=0
  fi
  [ $aarch64 = 0 ] && echo "test.sh: skipping the aarch64 part (it needs dpkg's arm64 architecture and qemu-user; scripts/test.sh --aarch64 sets them up)"
fi
t_start=$(date +%s)
t_phase=$t_start
phase_done() { # prints the seconds since the last phase
  local now; now=$(date +%s)
  echo "== $1: $(( now - t_phase )) s"
  t_phase=$now
}
scripts/deps.sh --test
scripts/build.sh
phase_done "deps and plain build"
status=0
# The tests of the aarch64 build that run under qemu: every kernel bit-equality test (each
# loops over the levels this CPU has: qemu's -cpu max has neon, dotprod and i8mm), the
# reference quantizers, BLAKE3, sampling's pinned tokens, whole models against the
# reference backend, and llama.cpp's golden tokens for aidreams260K (test_run.py).
aarch64_unit='^(test_kern_.*|test_attn|test_ops_.*|test_kmath|test_quant|test_blake3|test_sample_chain|test_backend_seam|test_synth)$'
if [ $aarch64 = 1 ]; then
  scripts/deps.sh --arch aarch64
  scripts/build.sh --arch aarch64 --tests "$aarch64_unit" # only what runs under qemu
  export KN_CROSS_REQUIRED=1 # py_test_cross_isa in the plain suite must not skip
  phase_done "aarch64 deps and cross build"
fi
if [ $quick = 0 ]; then
  scripts/build.sh --sanitize
  phase_done "sanitizer build"
  echo "== sanitizer build (ASan + UBSan) =="
  ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j2 || status=1
  phase_done "sanitizer suite"
fi
echo "== plain build =="
ctest --test-dir build --output-on-failure -j2 || status=1
phase_done "plain suite"
if [ $aarch64 = 1 ]; then
  echo "== aarch64 build under qemu-aarch64 =="
  # llama.cpp's golden tokens (test_run.py) run beside the unit tests rather than after
  # them, so that both cores stay busy until the last of the two ends.
  KINETIC="$PWD/build-aarch64/kinetic-emu" \
    KN_SOURCE="$PWD" KN_BUILD="$PWD/build-aarch64" .venv/bin/python -m pytest -q -x \
    -p no:cacheprovider tests/py/test_run.py \
    -k "greedy_matches_llamacpp or invariant_across_threads_isa" > build-aarch64/golden.log 2>&1 &
  golden=$!
  ctest --test-dir build-aarch64 -R "$aarch64_unit" --output-on-failure -j2 || status=1
  wait $golden || { status=1; echo "aarch64 golden tokens under qemu: FAILED"; }
  cat build-aarch64/golden.log
  phase_done "aarch64 under qemu (py_test_cross_isa ran in the plain suite)"
fi
echo "== total: $(( $(date +%s) - t_start )) s"
exit $status
