# SPDX-License-Identifier: MIT
# cmake -DCOMPILER=<c++> -DHEADER=<single_include/clbuf/clbuf.hpp> -DSOURCE=<main.cpp>
#       -DWORK=<scratch dir> -P single_header_app.cmake
# A vendored copy: the one file in a folder of its own, the only clbuf file on the include path;
# the application builds with -std=c++17 -Wall -Wextra -Werror and OpenCL, and runs.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/vendor/clbuf")
file(COPY "${HEADER}" DESTINATION "${WORK}/vendor/clbuf")
execute_process(
  COMMAND "${COMPILER}" -std=c++17 -Wall -Wextra -Werror "-I${WORK}/vendor" "${SOURCE}"
          -o "${WORK}/app" -lOpenCL -pthread
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "an application did not build with the single header alone")
endif()
execute_process(COMMAND "${WORK}/app" RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "the application built on the single header failed (${result})")
endif()
