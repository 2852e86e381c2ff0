# libFuzzer target for the JSON reader/writer (included from tests/fuzz/CMakeLists.txt when
# KN_FUZZ=ON, clang only). Run, one core only:
#   build-fuzz/tests/fuzz/fuzz_json -jobs=1 -workers=1 -max_len=4096 \
#       -dict=tests/fuzz/json.dict corpus-work tests/fuzz/corpus/json
add_executable(fuzz_json ${CMAKE_CURRENT_LIST_DIR}/fuzz_json.c
  ${CMAKE_SOURCE_DIR}/src/base/json.c ${CMAKE_SOURCE_DIR}/src/base/base.c)
target_include_directories(fuzz_json PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_options(fuzz_json PRIVATE -g -O1 -fsanitize=fuzzer,address,undefined
  -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
target_link_options(fuzz_json PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_libraries(fuzz_json PRIVATE m Threads::Threads)
