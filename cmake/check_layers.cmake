# check_layers.cmake: fails when a module's sources include a header of a module it does
# not declare. The modules and their dependencies are declared once, with kn_module() in the
# top CMakeLists.txt; the build runs this script for each module before compiling it (and
# again whenever one of its files changes), so an upward or undeclared include stops the
# build with the file, the line and the fix.
#
#   cmake -DMODULE=chat -DDEPS="base;gguf" -DSRC_DIR=<repo>/src [-DSTAMP=file] -P check_layers.cmake
#
# The forms of include it understands, from src/<MODULE>/<file>:
#   "x.h"           a header of the same folder (must exist there)
#   "../dep/x.h"    a header of module dep
#   "dep/x.h"       the same, through the src/ include directory
# Anything else in quotes (a deeper path, a file that is not there) is an error too, so the
# check cannot be walked around by spelling an include differently.
cmake_minimum_required(VERSION 3.20)
if(NOT DEFINED MODULE OR NOT DEFINED SRC_DIR)
  message(FATAL_ERROR "check_layers.cmake: pass -DMODULE=<name> -DSRC_DIR=<src folder> [-DDEPS=a;b]")
endif()
set(dir "${SRC_DIR}/${MODULE}")
file(GLOB files "${dir}/*.c" "${dir}/*.h")
set(problems "")
foreach(f ${files})
  file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  get_filename_component(fname "${f}" NAME)
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*$" "\\1" inc "${line}")
    set(dep "")
    if(inc MATCHES "^[^/]+$")
      if(NOT EXISTS "${dir}/${inc}")
        string(APPEND problems "  src/${MODULE}/${fname} includes \"${inc}\", which is not in src/${MODULE}/ (name another module's header as \"../module/${inc}\")\n")
      endif()
      continue()
    elseif(inc MATCHES "^\\.\\./([^/]+)/[^/]+$")
      set(dep "${CMAKE_MATCH_1}")
    elseif(inc MATCHES "^([^/.][^/]*)/[^/]+$")
      set(dep "${CMAKE_MATCH_1}")
    else()
      string(APPEND problems "  src/${MODULE}/${fname} includes \"${inc}\": only \"x.h\", \"../module/x.h\" and \"module/x.h\" are allowed in src/\n")
      continue()
    endif()
    if(dep STREQUAL MODULE)
      continue()
    endif()
    if(NOT IS_DIRECTORY "${SRC_DIR}/${dep}")
      string(APPEND problems "  src/${MODULE}/${fname} includes \"${inc}\", but there is no module src/${dep}/\n")
    elseif(NOT dep IN_LIST DEPS)
      string(APPEND problems "  src/${MODULE}/${fname} includes \"${inc}\", but module ${MODULE} does not declare ${dep}\n")
    endif()
  endforeach()
endforeach()
if(problems)
  string(REPLACE ";" " " deps_words "${DEPS}")
  message(FATAL_ERROR "layering: module ${MODULE} (declared: kn_module(${MODULE} ${deps_words})) reaches outside its declared dependencies:\n"
    "${problems}"
    "A module uses only the modules it declares in CMakeLists.txt (see docs/modules.md). "
    "If the dependency is right, add it to kn_module(${MODULE} ...) and keep the graph acyclic; "
    "if it points up a layer, move the code down or pass a callback instead.")
endif()
if(DEFINED STAMP)
  file(WRITE "${STAMP}" "${MODULE}: ${DEPS}\n")
endif()
