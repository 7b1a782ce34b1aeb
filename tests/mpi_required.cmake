# mpi_required.cmake — MPI is required (MCC_REQUIRE_MPI, CMakeLists.txt): configuring without it fails.
add_test(NAME mpi_required COMMAND ${CMAKE_SOURCE_DIR}/tests/mpi_required.sh ${CMAKE_COMMAND} ${CMAKE_C_COMPILER})
