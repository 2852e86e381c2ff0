# fuzz_server: OpenAI request validation and prompt preparation on fuzzed bodies, with the
# toy backend (api.c and toy.c instrumented; the rest from the module libraries). Run, one core:
#   build-fuzz/tests/fuzz/fuzz_server -jobs=1 -workers=1 -max_len=4096 \
#       -dict=tests/fuzz/json.dict corpus-work tests/fuzz/corpus/server
add_executable(fuzz_server ${CMAKE_CURRENT_LIST_DIR}/fuzz_server.c
  ${CMAKE_SOURCE_DIR}/src/server/api.c ${CMAKE_SOURCE_DIR}/src/server/toy.c)
target_include_directories(fuzz_server PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_options(fuzz_server PRIVATE -g -O1 -fsanitize=fuzzer,address,undefined
  -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
target_link_options(fuzz_server PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_libraries(fuzz_server PRIVATE kinetic_core)
