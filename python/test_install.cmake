# SPDX-License-Identifier: MIT
# cmake -DMODE=cmake|pip -DPYTHON=<python3> -DSOURCE_DIR=<checkout> -DBUILD_DIR=<clbuf build>
#       -DWORK=<scratch dir> -DPACKAGE_DIR=<CLBUF_PYTHON_INSTALL_DIR> -P test_install.cmake
# Installs the Python package as a user would, into a fresh folder, and runs python/tests on it
# with CLBUF_EXPECT_INSTALLED=1 (tests/test_package.py then checks that clbuf was imported from
# that folder, with its stubs and py.typed, and, for pip, that its metadata has the version).
#   cmake: cmake --install BUILD_DIR --component python --prefix WORK/prefix
#   pip:   python3 -m venv --system-site-packages WORK/venv (numpy and pytest from the system),
#          then WORK/venv/bin/python -m pip install --no-build-isolation --no-index SOURCE_DIR
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "failed (${result}): ${command}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(environment "PYTHONDONTWRITEBYTECODE=1" "CLBUF_EXPECT_INSTALLED=1")
if(MODE STREQUAL "cmake")
  run("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --component python --prefix "${WORK}/prefix")
  set(python "${PYTHON}")
  set(location "${WORK}/prefix/${PACKAGE_DIR}")
  list(APPEND environment "PYTHONPATH=${location}")
elseif(MODE STREQUAL "pip")
  run("${PYTHON}" -m venv --system-site-packages "${WORK}/venv")
  set(python "${WORK}/venv/bin/python")
  run("${CMAKE_COMMAND}" -E env --unset=PYTHONPATH PIP_NO_CACHE_DIR=1
      PIP_DISABLE_PIP_VERSION_CHECK=1
      "${python}" -m pip install --no-build-isolation --no-index "${SOURCE_DIR}")
  set(location "${WORK}/venv")
  list(APPEND environment "--unset=PYTHONPATH")
else()
  message(FATAL_ERROR "MODE must be cmake or pip")
endif()
list(APPEND environment "CLBUF_EXPECT_LOCATION=${location}")
# From WORK, so that nothing of the checkout (python/clbuf/) can be imported instead.
execute_process(
  COMMAND "${CMAKE_COMMAND}" -E env ${environment}
          "${python}" -m pytest -q -p no:cacheprovider "${SOURCE_DIR}/python/tests"
  WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "pytest failed on the package installed by ${MODE} (${result})")
endif()
file(REMOVE_RECURSE "${WORK}")
