# SPDX-License-Identifier: MIT
# Ranks as on separate nodes (issue 36 item 5): the mpiexec flags under which the label mpi runs
# some of clbuf::mpi's tests and example 08 a second time, with Open MPI's TCP transport as the
# only way between ranks, the path between nodes: btl tcp (self carries a rank's messages to
# itself), pml ob1 (so that neither UCX nor the cm layer brings shared memory back), on the
# loopback interface (Open MPI leaves lo out by default, and a container may have no other).
# Included by tests/mpi/ and examples/08_heat3d_mpi/. Empty where mpiexec is not Open MPI's
# (the flags are its MCA parameters): those registrations are then left out.
if(NOT DEFINED CLBUF_MPIEXEC_TCP_FLAGS)
  set(clbuf_tcp_flags "")
  if(MPIEXEC_EXECUTABLE)
    execute_process(COMMAND "${MPIEXEC_EXECUTABLE}" --version OUTPUT_VARIABLE clbuf_mpiexec_version
                    ERROR_QUIET RESULT_VARIABLE clbuf_mpiexec_status)
    if(clbuf_mpiexec_status EQUAL 0 AND clbuf_mpiexec_version MATCHES "Open MPI|OpenRTE|open-mpi")
      set(clbuf_tcp_flags --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)
    endif()
  endif()
  set(CLBUF_MPIEXEC_TCP_FLAGS "${clbuf_tcp_flags}" CACHE STRING
      "Flags after CLBUF_MPIEXEC_FLAGS that leave Open MPI only TCP between ranks (empty: no TCP runs)")
endif()
