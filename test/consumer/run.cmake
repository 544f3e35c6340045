# Installs the built kiln into a scratch prefix, runs the installed `kiln list`
# (the installed programs find libkiln.so through their run path), builds
# test/consumer against the prefix with find_package(kiln), runs it and checks
# its output. With -DREADME=<file>, also compiles and runs every ```cpp block of
# that file as a program of the consumer project (a block without main() is
# wrapped in one; its #include and using lines stay at file scope).
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

# README snippets: extracted into the consumer's source list.
set(snippet_arg)
if(DEFINED README)
  file(READ ${README} text)
  set(dir ${WORK_DIR}/snippets)
  file(MAKE_DIRECTORY ${dir})
  set(count 0)
  while(TRUE)
    string(FIND "${text}" "```cpp\n" start)
    if(start EQUAL -1)
      break()
    endif()
    math(EXPR start "${start} + 7")
    string(SUBSTRING "${text}" ${start} -1 text)
    string(FIND "${text}" "```" end)
    string(SUBSTRING "${text}" 0 ${end} code)
    string(SUBSTRING "${text}" ${end} -1 text)
    if(NOT code MATCHES "int main\\(")
      # The leading #include, using and blank lines stay at file scope, the rest goes inside main().
      string(REGEX MATCH "^(((#include|using )[^\n]*)?\n)*" head "${code}")
      string(LENGTH "${head}" head_len)
      string(SUBSTRING "${code}" ${head_len} -1 body)
      set(code "${head}int main() {\n${body}  return 0;\n}\n")
    endif()
    file(WRITE ${dir}/snippet_${count}.cpp "// README.md ```cpp block ${count}\n${code}")
    math(EXPR count "${count} + 1")
  endwhile()
  if(count EQUAL 0)
    message(FATAL_ERROR "no ```cpp block in ${README}")
  endif()
  set(snippet_arg -DKILN_SNIPPETS_DIR=${dir})
  message(STATUS "${count} C++ blocks of ${README}")
endif()

# The consumer builds with kiln's compiler (a sanitized kiln needs that compiler's sanitizer runtime).
set(compiler_arg)
if(DEFINED KILN_CXX_COMPILER)
  set(compiler_arg -DCMAKE_CXX_COMPILER=${KILN_CXX_COMPILER})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${KILN_SOURCE_DIR}/test/consumer -B ${WORK_DIR}/build -G Ninja
                        -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix ${compiler_arg} ${snippet_arg}
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

if(DEFINED README)
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    execute_process(COMMAND ${WORK_DIR}/build/snippet_${i} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(rc)
      message(FATAL_ERROR "README ```cpp block ${i} (${WORK_DIR}/snippets/snippet_${i}.cpp) exited ${rc}:\n${out}\n${err}")
    endif()
  endforeach()
  message(STATUS "every ```cpp block of ${README} compiled and ran")
endif()
