# SPDX-License-Identifier: MIT
# cmake -DSOURCE=<clbuf checkout> -DWORK=<scratch dir> -DGENERATOR=<generator> -DCOMPILER=<c++>
#       -P install_without_googletest.cmake
# A top-level configure with the defaults (tests on) on a machine without GoogleTest, then
# `cmake --install`: both succeed, and the test list says the unit tests are missing.
file(REMOVE_RECURSE "${WORK}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${WORK}/build" -G "${GENERATOR}"
          "-DCMAKE_CXX_COMPILER=${COMPILER}" -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "configuring clbuf without GoogleTest failed")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${WORK}/build" --prefix "${WORK}/prefix"
  RESULT_VARIABLE result)
if(NOT result EQUAL 0 OR NOT EXISTS "${WORK}/prefix/include/clbuf/clbuf.hpp")
  message(FATAL_ERROR "installing clbuf without GoogleTest failed")
endif()
execute_process(COMMAND "${CMAKE_CTEST_COMMAND}" --test-dir "${WORK}/build" -N
  OUTPUT_VARIABLE tests RESULT_VARIABLE result)
if(NOT tests MATCHES "unit_tests_need_googletest")
  message(FATAL_ERROR "without GoogleTest the test list must say the unit tests are missing")
endif()
file(REMOVE_RECURSE "${WORK}")
