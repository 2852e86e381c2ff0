# libFuzzer target for the receipt reader (included from tests/fuzz/CMakeLists.txt when
# KN_FUZZ=ON, clang only). The reader reaches the sampling settings, the chat families and
# the crypto: those modules are compiled in, instrumented (not the engine, the kernels or
# verify.c's rerun, which need a model). Run, one core only:
#   build-fuzz/tests/fuzz/fuzz_receipt -jobs=1 -workers=1 -max_len=65536 \
#       -dict=tests/fuzz/receipt.dict corpus-work tests/fuzz/corpus/receipt
set(KN_FUZZ_RECEIPT_SOURCES
  ${CMAKE_SOURCE_DIR}/src/receipt/receipt.c ${CMAKE_SOURCE_DIR}/src/receipt/template.c
  ${CMAKE_SOURCE_DIR}/src/kernels/cpu.c ${CMAKE_SOURCE_DIR}/src/kernels/kmath.c)
foreach(mod base chat crypto gguf grammar jinja quant sample text token)
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${mod}/*.c)
  list(APPEND KN_FUZZ_RECEIPT_SOURCES ${srcs})
endforeach()
add_executable(fuzz_receipt ${CMAKE_CURRENT_LIST_DIR}/fuzz_receipt.c ${KN_FUZZ_RECEIPT_SOURCES})
target_include_directories(fuzz_receipt PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_options(fuzz_receipt PRIVATE -g -O1 -fsanitize=fuzzer,address,undefined
  -fno-sanitize-recover=undefined -fno-omit-frame-pointer -ffp-contract=off)
target_link_options(fuzz_receipt PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_libraries(fuzz_receipt PRIVATE PkgConfig::DEPS m Threads::Threads)
# The ISA-specific kernels need their flags here too (source properties are per directory).
foreach(src ${KN_FUZZ_RECEIPT_SOURCES})
  if(src MATCHES "_avx2\\.c$")
    set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mbmi2")
  elseif(src MATCHES "_avx512\\.c$")
    set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS
      "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx512bf16;-mavx2;-mfma;-mf16c;-mbmi2")
  endif()
endforeach()
