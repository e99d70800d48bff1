# SPDX-License-Identifier: MIT
# README's quick start must be examples/01_quick_start.cpp verbatim (after its SPDX line, if any,
# and its first comment line).
file(READ "${SOURCE_DIR}/README.md" readme)
file(READ "${SOURCE_DIR}/examples/01_quick_start.cpp" example)
if(example MATCHES "^// SPDX-License-Identifier:[^\n]*\n")
  string(LENGTH "${CMAKE_MATCH_0}" spdx_length)
  string(SUBSTRING "${example}" ${spdx_length} -1 example)
endif()
string(FIND "${example}" "\n" first_newline)
math(EXPR body_start "${first_newline} + 1")
string(SUBSTRING "${example}" ${body_start} -1 body)
string(FIND "${readme}" "// examples/01_quick_start.cpp\n${body}```" found)
if(found EQUAL -1)
  message(FATAL_ERROR "README.md's quick start differs from examples/01_quick_start.cpp")
endif()
