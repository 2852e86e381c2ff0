# fuzz_http_head: the gate's check of a request's head (src/server/gate.c instrumented; the
# rest from kinetic_core). Run, one core:
#   build-fuzz/tests/fuzz/fuzz_http_head -jobs=1 -workers=1 -max_len=2048 \
#       -dict=tests/fuzz/http.dict corpus-work tests/fuzz/corpus/http_head
add_executable(fuzz_http_head ${CMAKE_CURRENT_LIST_DIR}/fuzz_http_head.c
  ${CMAKE_SOURCE_DIR}/src/server/gate.c)
target_include_directories(fuzz_http_head PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_options(fuzz_http_head PRIVATE -g -O1 -fsanitize=fuzzer,address,undefined
  -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
target_link_options(fuzz_http_head PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_libraries(fuzz_http_head PRIVATE kinetic_core)
