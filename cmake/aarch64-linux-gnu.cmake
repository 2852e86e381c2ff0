# aarch64-linux-gnu.cmake: cross-compiles Kinetic for 64-bit ARM Linux with Debian's
# gcc-aarch64-linux-gnu and the arm64 multiarch builds of the libraries
# (scripts/deps.sh --arch aarch64 installs both; scripts/build.sh --arch aarch64 uses this
# file). The tests run through qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR), with
# `-cpu max` so that every ARM kernel level (neon, dotprod, i8mm) can be selected.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(KN_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${KN_CROSS_TRIPLE}-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/${KN_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# pkg-config reads the arm64 .pc files only (Debian multiarch puts them here).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${KN_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
# The guest's dynamic loader and libc must be one glibc build: with the arm64 multiarch
# libc6 installed (the libraries' packages pull it in) that is /lib/ld-linux-aarch64.so.1
# with /lib/aarch64-linux-gnu/libc.so.6, so qemu looks up paths from "/"; mixing the cross
# package's loader (/usr/aarch64-linux-gnu) with the multiarch libc hangs pthread_create.
find_program(KN_QEMU_AARCH64 qemu-aarch64)
if(EXISTS /lib/ld-linux-aarch64.so.1)
  set(KN_QEMU_LD_PREFIX /)
else()
  set(KN_QEMU_LD_PREFIX /usr/${KN_CROSS_TRIPLE})
endif()
if(KN_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${KN_QEMU_AARCH64} -cpu max -L ${KN_QEMU_LD_PREFIX})
endif()
