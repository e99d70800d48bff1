# SPDX-License-Identifier: MIT
# cmake -DPKG_CONFIG=<pkg-config> -DPC_DIR=<dir of clbuf.pc> -DCOMPILER=<c++> -DSOURCE=<main.cpp>
#       -DWORK=<scratch dir> -DVERSION=<x.y.z> -P pkg_config_app.cmake
# Builds and runs an application with nothing but the flags `pkg-config --cflags --libs clbuf`
# gives, -std=c++17 and warnings as errors.
function(pkg_config out)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${PC_DIR}" "${PKG_CONFIG}" ${ARGN}
    RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE error
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "pkg-config ${ARGN} failed (${result}): ${error}")
  endif()
  set(${out} "${output}" PARENT_SCOPE)
endfunction()

pkg_config(version --modversion clbuf)
if(NOT version STREQUAL VERSION)
  message(FATAL_ERROR "clbuf.pc says version ${version}, the header ${VERSION}")
endif()
pkg_config(cflags --cflags clbuf)
pkg_config(libs --libs clbuf)
message(STATUS "pkg-config --cflags --libs clbuf: ${cflags} ${libs}")
separate_arguments(cflags UNIX_COMMAND "${cflags}")
separate_arguments(libs UNIX_COMMAND "${libs}")

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
execute_process(
  COMMAND "${COMPILER}" -std=c++17 -Wall -Wextra -Werror ${cflags} "${SOURCE}" -o "${WORK}/app" ${libs}
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "the application did not build with pkg-config's flags")
endif()
execute_process(COMMAND "${WORK}/app" RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "the application built with pkg-config's flags failed (${result})")
endif()
