#!/usr/bin/env bash
# test.sh: installs what the tests need, builds Kinetic (plain and with ASan + UBSan)
# and runs the whole suite on both builds with CTest.
#   scripts/test.sh            everything
#   scripts/test.sh --quick    the plain build only
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = --quick ] && quick=1
scripts/deps.sh --test
scripts/build.sh
status=0
if [ $quick = 0 ]; then
  scripts/build.sh --sanitize
  echo "== sanitizer build (ASan + UBSan) =="
  ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j2 || status=1
fi
echo "== plain build =="
ctest --test-dir build --output-on-failure -j2 || status=1
exit $status
