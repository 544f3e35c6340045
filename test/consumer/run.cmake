# Installs the built kiln into a scratch prefix, runs the installed `kiln list`
# (the installed programs find libkiln.so through their run path), builds
# test/consumer against the prefix with find_package(kiln), runs it and checks
# its output.
cmake_policy(VERSION 3.25)
foreach(var KILN_BUILD_DIR KILN_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run.cmake needs -D${var}=...")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()

# The installed command line runs from the prefix, with no LD_LIBRARY_PATH.
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${WORK_DIR}/prefix/bin/kiln list
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc OR NOT out MATCHES "w1-gelu-chain")
  message(FATAL_ERROR "installed 'kiln list' failed (exit ${rc}):\n${out}\n${err}")
endif()
message(STATUS "installed kiln list ran from the prefix")

# The consumer builds with kiln's compiler (a sanitized kiln needs that compiler's sanitizer runtime).
set(compiler_arg)
if(DEFINED KILN_CXX_COMPILER)
  set(compiler_arg -DCMAKE_CXX_COMPILER=${KILN_CXX_COMPILER})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${KILN_SOURCE_DIR}/test/consumer -B ${WORK_DIR}/build -G Ninja
                        -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix ${compiler_arg}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "building the consumer failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
string(STRIP "${out}" out)
if(rc OR NOT out STREQUAL "5")
  message(FATAL_ERROR "consumer printed '${out}' (exit ${rc}), expected 5")
endif()
message(STATUS "consumer built against the installed kiln and printed ${out}")
