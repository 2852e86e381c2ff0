# fuzz_tok: the tokenizers on fuzzed text, with the vocabularies of tests/data/vocab.
#   build-fuzz/tests/fuzz/fuzz_tok -jobs=1 -workers=1 -max_len=512
file(GLOB KN_FUZZ_TOK_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/token/*.c
  ${CMAKE_SOURCE_DIR}/src/gguf/*.c)
add_executable(fuzz_tok ${CMAKE_CURRENT_LIST_DIR}/fuzz_tok.c ${KN_FUZZ_TOK_SOURCES}
  ${CMAKE_SOURCE_DIR}/src/base/base.c ${CMAKE_SOURCE_DIR}/src/quant/types.c)
target_include_directories(fuzz_tok PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_definitions(fuzz_tok PRIVATE KN_TEST_DATA_DIR="${KN_TEST_DATA_DIR}")
target_compile_options(fuzz_tok PRIVATE -g -O1 -fsanitize=fuzzer,address,undefined
  -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
target_link_options(fuzz_tok PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_libraries(fuzz_tok PRIVATE PkgConfig::DEPS m)
