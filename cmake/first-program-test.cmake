# Builds and runs examples/first_program.c by hand, the two ways the README's
# "A first C program" section gives, so its commands stay right:
#   1. against the source tree (include/, src/sys/, the cargo output directory);
#   2. against `cmake --install` plus `cmake --install --component emulator`
#      in a scratch prefix.
#   3. the same, with the installed static library (stripped of its debug
#      information by the install) and the system libraries it needs.
# Each build must print "reused: yes" and exit 0, with no NPUALLOC_ACL_LIBRARY
# or LD_LIBRARY_PATH set: the program's rpath finds both libraries, and
# npualloc finds the libascendcl.so the program links.
#
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DLIB_DIR=... -DC_COMPILER=...
#         -DINSTALL_LIBDIR=... -DINSTALL_INCLUDEDIR=... -DNATIVE_STATIC_LIBS=lib1,lib2,...
#         -P cmake/first-program-test.cmake
cmake_minimum_required(VERSION 3.20)

foreach(_var BUILD_DIR SOURCE_DIR WORK_DIR LIB_DIR C_COMPILER INSTALL_LIBDIR INSTALL_INCLUDEDIR NATIVE_STATIC_LIBS)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "first-program-test.cmake: -D${_var}=... is required")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc COMMAND_ECHO STDOUT)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${_rc})")
  endif()
endfunction()

function(run_program program)
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env --unset=NPUALLOC_ACL_LIBRARY --unset=LD_LIBRARY_PATH
            --unset=NPUALLOC_CONF ACLEMU_DEVICE_MEMORY=1g "${program}"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  message(STATUS "${program}: ${_out}${_err}")
  if(NOT _rc EQUAL 0 OR NOT _out MATCHES "reused: yes")
    message(FATAL_ERROR "${program} failed (${_rc}): ${_out}${_err}")
  endif()
endfunction()

set(_source "${SOURCE_DIR}/examples/first_program.c")
set(_flags -std=c11 -Wall -Wextra -Werror)
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# 1. The source tree, as after `cargo build --workspace`.
run("building against the source tree" "${C_COMPILER}" ${_flags}
    "-I${SOURCE_DIR}/include" "-I${SOURCE_DIR}/src/sys" "${_source}"
    "-L${LIB_DIR}" -lnpualloc -lascendcl "-Wl,-rpath,${LIB_DIR}" -o "${WORK_DIR}/first_program_tree")
run_program("${WORK_DIR}/first_program_tree")

# 2. An installed prefix with the emulator component.
set(_prefix "${WORK_DIR}/prefix")
run("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${_prefix}")
run("cmake --install --component emulator"
    "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${_prefix}" --component emulator)
set(_lib "${_prefix}/${INSTALL_LIBDIR}")
set(_inc "${_prefix}/${INSTALL_INCLUDEDIR}")
foreach(_file "${_lib}/libnpualloc.so" "${_lib}/libnpualloc.a" "${_inc}/npualloc.h"
              "${_lib}/npualloc-emu/libascendcl.so" "${_inc}/npualloc-emu/acl_emu.h"
              "${_inc}/npualloc-emu/acl_decls.h")
  if(NOT EXISTS "${_file}")
    message(FATAL_ERROR "the install did not provide ${_file}")
  endif()
endforeach()
# The emulator stays out of the library directory itself, where it would
# shadow a real libascendcl.so.
if(EXISTS "${_lib}/libascendcl.so")
  message(FATAL_ERROR "the emulator was installed into ${_lib}")
endif()
run("building against the installed prefix" "${C_COMPILER}" ${_flags}
    "-I${_inc}" "-I${_inc}/npualloc-emu" "${_source}"
    "-L${_lib}" "-L${_lib}/npualloc-emu" -lnpualloc -lascendcl
    "-Wl,-rpath,${_lib}:${_lib}/npualloc-emu" -o "${WORK_DIR}/first_program_installed")
run_program("${WORK_DIR}/first_program_installed")

# 3. The installed static library.
string(REPLACE "," ";" _native "${NATIVE_STATIC_LIBS}")
list(TRANSFORM _native PREPEND "-l")
run("building against the installed static library" "${C_COMPILER}" ${_flags}
    "-I${_inc}" "-I${_inc}/npualloc-emu" "${_source}"
    "${_lib}/libnpualloc.a" "-L${_lib}/npualloc-emu" -lascendcl ${_native}
    "-Wl,-rpath,${_lib}/npualloc-emu" -o "${WORK_DIR}/first_program_static")
run_program("${WORK_DIR}/first_program_static")

# A plain `cmake --install` leaves the emulator out.
set(_plain "${WORK_DIR}/plain-prefix")
run("plain cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${_plain}")
if(EXISTS "${_plain}/${INSTALL_LIBDIR}/npualloc-emu")
  message(FATAL_ERROR "a plain cmake --install installed the emulator component")
endif()
