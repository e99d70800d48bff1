# SPDX-License-Identifier: MIT
# cmake -DMODE=cmake|pip -DPYTHON=<python3> -DSOURCE_DIR=<checkout> -DBUILD_DIR=<clbuf build>
#       -DWORK=<scratch dir> -DPACKAGE_DIR=<CLBUF_PYTHON_INSTALL_DIR> [-DMPIEXEC=<mpiexec>
#       -DMPIEXEC_FLAGS=<flags>] -P test_install.cmake
# Installs the Python package as a user would, into a fresh folder, and runs python/tests on it
# with CLBUF_EXPECT_INSTALLED=1 (tests/test_package.py then checks that clbuf was imported from
# that folder, with its stubs, py.typed and metadata of the version; test_cli.py the command).
#   cmake: cmake --install BUILD_DIR --component python --prefix WORK/prefix; `pip show clbuf`
#          must find its metadata there
#   pip:   python3 -m venv --system-site-packages WORK/venv (numpy, pytest and mpi4py from the
#          system), then WORK/venv/bin/python -m pip install -v --no-build-isolation --no-index
#          SOURCE_DIR. With MPIEXEC (CMake found MPI), the build must say it built clbuf.mpi,
#          and under `MPIEXEC -np 2` rank 0 sends device buffers to rank 1 through the pip-built
#          clbuf.mpi, received byte for byte (tests/mpi/send_to_rank_1.py).
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
  # -v: setup.py's lines (clbuf: building clbuf.mpi ...) come through; shown only on failure.
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env --unset=PYTHONPATH PIP_NO_CACHE_DIR=1
            PIP_DISABLE_PIP_VERSION_CHECK=1
            "${python}" -m pip install -v --no-build-isolation --no-index "${SOURCE_DIR}"
    RESULT_VARIABLE result OUTPUT_VARIABLE pip_output ERROR_VARIABLE pip_output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "pip install failed (${result}):\n${pip_output}")
  endif()
  string(REGEX MATCH "clbuf: [^\n]*clbuf.mpi[^\n]*" pip_mpi_line "${pip_output}")
  message(STATUS "pip: ${pip_mpi_line}")
  if(MPIEXEC AND NOT pip_mpi_line MATCHES "^clbuf: building clbuf.mpi with MPI from ")
    message(FATAL_ERROR "MPI is here (${MPIEXEC}), but pip built clbuf without clbuf.mpi:\n"
                        "${pip_output}")
  endif()
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

if(MODE STREQUAL "cmake")
  # pip knows the package CMake installed: its .dist-info names it, its version and its files.
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env ${environment} "${python}" -m pip show -f clbuf
    WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE result OUTPUT_VARIABLE shown)
  file(STRINGS "${SOURCE_DIR}/include/clbuf/version.hpp" version_lines
       REGEX "#define CLBUF_VERSION_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE "[^;]*MAJOR ([0-9]+);[^;]*MINOR ([0-9]+);[^;]*PATCH ([0-9]+)" "\\1.\\2.\\3"
         version "${version_lines}")
  if(NOT result EQUAL 0 OR NOT shown MATCHES "Name: clbuf\nVersion: ${version}\n"
     OR NOT shown MATCHES "Location: ${location}\n" OR NOT shown MATCHES "clbuf/_clbuf\\.")
    message(FATAL_ERROR "pip show clbuf (${result}) does not show the installed package "
                        "${version} at ${location}:\n${shown}")
  endif()
endif()

if(MODE STREQUAL "pip" AND MPIEXEC)
  separate_arguments(mpiexec_flags UNIX_COMMAND "${MPIEXEC_FLAGS}")
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env ${environment}
            "${MPIEXEC}" -np 2 ${mpiexec_flags} "${python}"
            "${SOURCE_DIR}/python/tests/mpi/send_to_rank_1.py"
    WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE result OUTPUT_VARIABLE sent ERROR_VARIABLE sent
    TIMEOUT 120)
  if(NOT result EQUAL 0 OR NOT sent MATCHES "clbuf.mpi: rank 0 -> rank 1 exact")
    message(FATAL_ERROR "mpiexec -np 2 send_to_rank_1.py on the pip-built clbuf (${result}):\n"
                        "${sent}")
  endif()
  message(STATUS "pip-built clbuf.mpi: rank 0 -> rank 1 exact")
endif()
file(REMOVE_RECURSE "${WORK}")
