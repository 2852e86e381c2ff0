# libFuzzer target for the Jinja engine (picked up by tests/fuzz/CMakeLists.txt when
# KN_FUZZ=ON, clang only). Run, one core only:
#   build-fuzz/tests/fuzz/fuzz_jinja -jobs=1 -workers=1 -max_len=4096 \
#       -dict=tests/fuzz/jinja.dict corpus-work tests/fuzz/corpus/jinja
file(GLOB KN_FUZZ_JINJA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/jinja/*.c)
add_executable(fuzz_jinja ${CMAKE_CURRENT_LIST_DIR}/fuzz_jinja.c ${KN_FUZZ_JINJA_SOURCES}
  ${CMAKE_SOURCE_DIR}/src/base/json.c ${CMAKE_SOURCE_DIR}/src/base/base.c)
target_include_directories(fuzz_jinja PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_options(fuzz_jinja PRIVATE -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined
  -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
target_link_options(fuzz_jinja PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_libraries(fuzz_jinja PRIVATE m Threads::Threads)
