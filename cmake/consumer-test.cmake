# Installs this build into a scratch prefix and builds and runs the consumer
# in examples/cmake-consumer against it, the way a downstream project would.
# Run by the ctest cases cmake_consumer_find_package and cmake_consumer_pkg_config:
#
#   cmake -DMODE=find_package|pkg_config -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=...
#         -DEMU_LIB=... -DCXX_COMPILER=... -DGENERATOR=... -DREADELF=...
#         -DSONAME=libnpualloc.so.<abi> -DREAL_NAME=libnpualloc.so.<version> -DVERSION=<version>
#         -DINSTALL_LIBDIR=... [-DPKG_CONFIG=...] -P cmake/consumer-test.cmake
#
# First checks the installed library as a Linux C library is installed: the
# file named after the package version, without debug information and with its
# SONAME (named after the ABI), and the links to it. The consumer asks
# find_package for VERSION, the package version, and checks at run time that
# npualloc_version() reports the version find_package (or pkg-config) found. The consumer must record the SONAME (not libnpualloc.so, not a path),
# finds the library in the prefix through its rpath (nothing points it at the
# build tree) and the ACL emulator through NPUALLOC_ACL_LIBRARY.
cmake_minimum_required(VERSION 3.20)

foreach(_var MODE BUILD_DIR SOURCE_DIR WORK_DIR EMU_LIB CXX_COMPILER GENERATOR READELF SONAME REAL_NAME
             VERSION INSTALL_LIBDIR)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "consumer-test.cmake: -D${_var}=... is required")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc COMMAND_ECHO STDOUT)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${_rc})")
  endif()
endfunction()

set(_prefix "${WORK_DIR}/prefix")
set(_consumer "${SOURCE_DIR}/examples/cmake-consumer")

# A fresh prefix, so nothing left from an earlier install can satisfy the build.
file(REMOVE_RECURSE "${_prefix}")
run("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${_prefix}")

# readelf's output for FILE (-d: the dynamic section, -S: the sections).
function(readelf out what file)
  execute_process(COMMAND "${READELF}" ${what} "${file}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _text ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "readelf ${what} ${file} failed (${_rc}): ${_err}")
  endif()
  set(${out} "${_text}" PARENT_SCOPE)
endfunction()

set(_lib "${_prefix}/${INSTALL_LIBDIR}")
if(NOT REAL_NAME STREQUAL "libnpualloc.so.${VERSION}")
  message(FATAL_ERROR "the library file ${REAL_NAME} is not named after the package version ${VERSION}")
endif()
if(NOT EXISTS "${_lib}/${REAL_NAME}" OR IS_SYMLINK "${_lib}/${REAL_NAME}")
  message(FATAL_ERROR "the install did not provide the file ${_lib}/${REAL_NAME}")
endif()
foreach(_link_and_target "${SONAME}>${REAL_NAME}" "libnpualloc.so>${SONAME}")
  string(REPLACE ">" ";" _pair "${_link_and_target}")
  list(GET _pair 0 _link)
  list(GET _pair 1 _target)
  if(NOT IS_SYMLINK "${_lib}/${_link}")
    message(FATAL_ERROR "the install did not provide the link ${_lib}/${_link}")
  endif()
  file(READ_SYMLINK "${_lib}/${_link}" _points_to)
  if(NOT _points_to STREQUAL _target)
    message(FATAL_ERROR "${_lib}/${_link} points to '${_points_to}', not ${_target}")
  endif()
endforeach()
string(REPLACE "." "\\." _soname_re "${SONAME}")
readelf(_dynamic -d "${_lib}/${REAL_NAME}")
if(NOT _dynamic MATCHES "\\(SONAME\\)[^\n]*\\[${_soname_re}\\]")
  message(FATAL_ERROR "${_lib}/${REAL_NAME} does not carry the SONAME ${SONAME}:\n${_dynamic}")
endif()
readelf(_sections -S "${_lib}/${REAL_NAME}")
if(_sections MATCHES "\\.debug_" OR NOT _sections MATCHES "\\.gnu_debuglink")
  message(FATAL_ERROR "${_lib}/${REAL_NAME} has debug sections or no debug link:\n${_sections}")
endif()
if(EXISTS "${_lib}/.debug")
  message(FATAL_ERROR "a plain cmake --install installed the debug component (${_lib}/.debug)")
endif()

if(MODE STREQUAL "find_package")
  set(_build "${WORK_DIR}/find-package")
  file(REMOVE_RECURSE "${_build}")
  run("configuring the consumer" "${CMAKE_COMMAND}" -S "${_consumer}" -B "${_build}" -G "${GENERATOR}"
      "-DCMAKE_PREFIX_PATH=${_prefix}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
      "-DNPUALLOC_REQUIRED_VERSION=${VERSION}")
  run("building the consumer" "${CMAKE_COMMAND}" --build "${_build}")
  set(_program "${_build}/npualloc_consumer")
elseif(MODE STREQUAL "pkg_config")
  if(NOT PKG_CONFIG)
    message(FATAL_ERROR "consumer-test.cmake: -DPKG_CONFIG=<pkg-config> is required for MODE=pkg_config")
  endif()
  file(GLOB _pcdirs "${_prefix}/*/pkgconfig" "${_prefix}/*/*/pkgconfig")
  if(NOT _pcdirs)
    message(FATAL_ERROR "no pkgconfig directory under ${_prefix}")
  endif()
  list(JOIN _pcdirs ":" _pcpath)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${_pcpath}" "PKG_CONFIG_LIBDIR=${_pcpath}"
                          "${PKG_CONFIG}" --modversion npualloc
                  OUTPUT_VARIABLE _pc_version OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT _pc_version STREQUAL VERSION)
    message(FATAL_ERROR "pkg-config --modversion npualloc says '${_pc_version}' (${_rc}), not ${VERSION}")
  endif()
  set(_program "${WORK_DIR}/npualloc_consumer_pc")
  file(REMOVE "${_program}")
  # PKG_CONFIG_LIBDIR as well: only the scratch prefix may provide npualloc.
  run("building the consumer with pkg-config"
      "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${_pcpath}" "PKG_CONFIG_LIBDIR=${_pcpath}"
      "PKG_CONFIG=${PKG_CONFIG}" "CXX=${CXX_COMPILER}"
      bash "${_consumer}/build-pkg-config.sh" "${_program}")
else()
  message(FATAL_ERROR "consumer-test.cmake: unknown MODE '${MODE}'")
endif()

# The consumer asks the loader for the SONAME.
readelf(_dynamic -d "${_program}")
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*libnpualloc[^\n]*" _npualloc_needed "${_dynamic}")
list(LENGTH _npualloc_needed _count)
if(NOT _count EQUAL 1 OR NOT _npualloc_needed MATCHES "\\[${_soname_re}\\]")
  message(FATAL_ERROR "${_program} should need ${SONAME} and no other libnpualloc; it needs: ${_npualloc_needed}")
endif()
message(STATUS "${_program} needs ${SONAME}")

run("running the consumer" "${CMAKE_COMMAND}" -E env --unset=LD_LIBRARY_PATH --unset=NPUALLOC_CONF
    "NPUALLOC_ACL_LIBRARY=${EMU_LIB}" ACLEMU_DEVICE_MEMORY=8g "${_program}")

# The debug information is a component of its own, where gdb finds it through
# the library's debug link.
run("cmake --install --component debug" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${_prefix}"
    --component debug)
readelf(_sections -S "${_lib}/.debug/${REAL_NAME}.debug")
if(NOT _sections MATCHES "\\.debug_info")
  message(FATAL_ERROR "${_lib}/.debug/${REAL_NAME}.debug has no debug information:\n${_sections}")
endif()
