#!/usr/bin/env bash
# build.sh: configures and builds Kinetic.
#   scripts/build.sh                release-style build in build/
#   scripts/build.sh --sanitize     ASan + UBSan build in build-asan/ (-O1 -g: CMakeLists.txt)
#   scripts/build.sh --arch aarch64 cross build for 64-bit ARM Linux in build-aarch64/
#                                   (cmake/aarch64-linux-gnu.cmake; needs
#                                   scripts/deps.sh --arch aarch64; the tests run under
#                                   qemu-aarch64 through ctest --test-dir build-aarch64)
#   scripts/build.sh --tests REGEX  builds only kinetic and the unit tests whose CTest
#                                   names match REGEX (scripts/test.sh's aarch64 part)
# Extra arguments after the options go to CMake (e.g. -DCMAKE_C_COMPILER=clang).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
args=()
arch=""
want_arch=0
tests=""
want_tests=0
for a in "$@"; do
  if [ $want_arch = 1 ]; then
    arch="$a"; want_arch=0; continue
  fi
  if [ $want_tests = 1 ]; then
    tests="$a"; want_tests=0; continue
  fi
  case "$a" in
    # The sanitizer build leaves the CUDA kernels out (the PTX is not instrumented, and
    # nvcc's seconds are spent once, in the plain build): its tests are those of a build
    # without nvcc.
    --sanitize) dir=build-asan; args+=(-DKN_SANITIZE=ON -DCMAKE_BUILD_TYPE=Sanitize -DKN_CUDA=OFF) ;;
    --arch) want_arch=1 ;;
    --tests) want_tests=1 ;;
    --arch=*) arch="${a#--arch=}" ;;
    *) args+=("$a") ;;
  esac
done
if [ $want_arch = 1 ]; then
  echo "build.sh: --arch needs a value (aarch64)" >&2; exit 2
fi
if [ $want_tests = 1 ]; then
  echo "build.sh: --tests needs a regular expression of CTest names" >&2; exit 2
fi
case "$arch" in
  "") ;;
  aarch64|arm64)
    if ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1; then
      echo "build.sh: no aarch64 cross compiler (aarch64-linux-gnu-gcc); run scripts/deps.sh --arch aarch64" >&2
      exit 1
    fi
    dir=build-aarch64
    # The Vulkan backend is left out of the cross build (it would need the arm64 Vulkan
    # loader; the ARM part is the CPU kernels), and so are the CUDA kernels: the cross
    # build is then the one that runs the tests of a build without nvcc.
    args+=(-DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" -DKN_VULKAN=OFF -DKN_CUDA=OFF) ;;
  *) echo "build.sh: unknown --arch '$arch' (this script cross-builds aarch64)" >&2; exit 2 ;;
esac
[ -n "${CI:-}" ] && args+=(-DKN_WERROR=ON)
cmake -S . -B "$dir" -DKN_PYTHON="$PWD/.venv/bin/python" "${args[@]}" >/dev/null
# Say whether the CUDA kernels are in (the configure output above is not shown).
nvcc=$(sed -n 's/^KN_NVCC:FILEPATH=//p' "$dir/CMakeCache.txt")
if grep -q '^KN_CUDA:BOOL=OFF' "$dir/CMakeCache.txt"; then
  echo "build.sh: CUDA kernels off (-DKN_CUDA=OFF)"
elif [ -z "$nvcc" ] || [ "${nvcc%NOTFOUND}" != "$nvcc" ]; then
  echo "build.sh: no nvcc found: building without the CUDA kernels (--device cuda says so;" \
       "install the CUDA toolkit or put its bin/ on PATH)"
else
  echo "build.sh: CUDA kernels: $nvcc"
fi
targets=()
if [ -n "$tests" ]; then
  # the configured tests' names (CTest reads them from the build folder), as build targets
  mapfile -t targets < <(ctest --test-dir "$dir" -N -R "$tests" | sed -n 's/^ *Test *#[0-9]*: //p')
  if [ ${#targets[@]} = 0 ]; then
    echo "build.sh: no test matches --tests '$tests'" >&2; exit 2
  fi
  targets=(--target kinetic "${targets[@]}")
fi
cmake --build "$dir" -j"$(nproc)" "${targets[@]}"
