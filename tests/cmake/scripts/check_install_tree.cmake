# SPDX-License-Identifier: MIT
# cmake -DPREFIX=<install prefix> -DFILES=<paths relative to it> -P check_install_tree.cmake
# Fails naming every file the install tree lacks.
set(missing "")
foreach(file IN LISTS FILES)
  if(NOT EXISTS "${PREFIX}/${file}")
    list(APPEND missing "${file}")
  endif()
endforeach()
if(missing)
  string(REPLACE ";" "\n  " missing "${missing}")
  message(FATAL_ERROR "the install tree ${PREFIX} lacks:\n  ${missing}")
endif()
list(LENGTH FILES count)
message(STATUS "the install tree holds all ${count} files checked")
