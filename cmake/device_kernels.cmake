# device_kernels.cmake: kn_device_kernels(), the one shape of a device backend's kernels
# (included by CMakeLists.txt): when the backend's option is on and its tools are found,
# each kernel source is compiled at build time by the device's compiler (glslc to SPIR-V,
# nvcc to PTX) and the results are embedded in the binary by a cmake -P script; otherwise
# the module builds its stand-in file, and every device open says what the build lacks.
#
# kn_device_kernels(<module>
#   OPTION <var>              the -D option that turns the kernels off (KN_VULKAN)
#   FOUND <var>...            what the caller found; all must be true (Vulkan_FOUND KN_GLSLC)
#   LABEL <text>              the status line's subject ("Vulkan backend:"), then on/off
#   DETAIL <text>             said when on: the tools used
#   MISSING <text>            said when a FOUND is false: what to install
#   SOURCES <file>...         the kernel sources
#   EXT <ext>                 the compiled files' extension, in build/<module>/
#   COMMAND <tool> <arg>...   compiles one source: run as COMMAND -MD -MF <out>.d -o <out>
#                             <source> (the depfile lists the #includes for the rebuild)
#   VARIANT <suffix> <regex> <arg>...
#                             optional: each source whose name (no extension) matches
#                             <regex> is compiled a second time with <arg>... added, into
#                             <name><suffix>.<EXT> (Vulkan's int8 dot product builds)
#   COMMENT <text>            said while compiling one: <SOURCE> stands for its file name
#   EMBED <script> <arg>...   writes build/<module>/<GEN> from the compiled files: run as
#                             cmake -DIN=<their ;-list> <arg>... -DOUT=<gen> -P cmake/<script>
#   EMBED_COMMENT <text>
#   GEN <name>                the generated C file, added to the module (KN_MODULE_EXTRA_)
#   WITHOUT <file>            src/<module>/ file built only without the kernels
#   WITH <file>)              src/<module>/ file built only with them (optional)
# Sets KN_HAVE_<MODULE> (ON or OFF), KN_MODULE_EXCLUDE_<module> and KN_MODULE_EXTRA_<module>
# in the caller's scope, before the module's kn_module line.
function(kn_device_kernels module)
  cmake_parse_arguments(PARSE_ARGV 1 A "" "OPTION;LABEL;DETAIL;MISSING;EXT;COMMENT;EMBED_COMMENT;GEN;WITHOUT;WITH"
                        "FOUND;SOURCES;COMMAND;EMBED;VARIANT")
  string(TOUPPER ${module} MODULE)
  set(have ON)
  if(NOT ${A_OPTION})
    set(have OFF)
    message(STATUS "${A_LABEL} off (-D${A_OPTION}=OFF)")
  else()
    foreach(v ${A_FOUND})
      if(NOT ${v})
        set(have OFF)
      endif()
    endforeach()
    if(NOT have)
      message(STATUS "${A_LABEL} off (${A_MISSING})")
    endif()
  endif()
  set(KN_HAVE_${MODULE} ${have} PARENT_SCOPE)
  if(NOT have)
    set(KN_MODULE_EXCLUDE_${module} ${A_WITH} PARENT_SCOPE)
    set(KN_MODULE_EXTRA_${module} "" PARENT_SCOPE)
    return()
  endif()
  message(STATUS "${A_LABEL} on (${A_DETAIL})")
  set(dir ${CMAKE_BINARY_DIR}/${module})
  file(MAKE_DIRECTORY ${dir})
  set(outs "")
  set(var_regex "")
  if(A_VARIANT)
    list(POP_FRONT A_VARIANT var_suffix var_regex)
  endif()
  foreach(src ${A_SOURCES})
    get_filename_component(name ${src} NAME_WE)
    get_filename_component(file ${src} NAME)
    set(out ${dir}/${name}.${A_EXT})
    string(REPLACE "<SOURCE>" "${file}" comment "${A_COMMENT}")
    add_custom_command(OUTPUT ${out}
      COMMAND ${A_COMMAND} -MD -MF ${out}.d -o ${out} ${src}
      DEPENDS ${src} DEPFILE ${out}.d
      COMMENT "${comment}" VERBATIM)
    list(APPEND outs ${out})
    if(var_regex AND name MATCHES "${var_regex}")
      set(vout ${dir}/${name}${var_suffix}.${A_EXT})
      add_custom_command(OUTPUT ${vout}
        COMMAND ${A_COMMAND} ${A_VARIANT} -MD -MF ${vout}.d -o ${vout} ${src}
        DEPENDS ${src} DEPFILE ${vout}.d
        COMMENT "${comment} (${var_suffix})" VERBATIM)
      list(APPEND outs ${vout})
    endif()
  endforeach()
  list(POP_FRONT A_EMBED script)
  set(script ${CMAKE_SOURCE_DIR}/cmake/${script})
  set(gen ${dir}/${A_GEN})
  add_custom_command(OUTPUT ${gen}
    COMMAND ${CMAKE_COMMAND} "-DIN=${outs}" ${A_EMBED} -DOUT=${gen} -P ${script}
    DEPENDS ${outs} ${script}
    COMMENT "${A_EMBED_COMMENT}" VERBATIM)
  set(KN_MODULE_EXCLUDE_${module} ${A_WITHOUT} PARENT_SCOPE)
  set(KN_MODULE_EXTRA_${module} ${gen} PARENT_SCOPE)
endfunction()
