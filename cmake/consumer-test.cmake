# Installs this build into a scratch prefix and builds and runs the consumer
# in examples/cmake-consumer against it, the way a downstream project would.
# Run by the ctest cases cmake_consumer_find_package and cmake_consumer_pkg_config:
#
#   cmake -DMODE=find_package|pkg_config -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=...
#         -DEMU_LIB=... -DCXX_COMPILER=... -DGENERATOR=... [-DPKG_CONFIG=...]
#         -P cmake/consumer-test.cmake
#
# The consumer finds libnpualloc.so in the prefix through its rpath (nothing
# points it at the build tree) and the ACL emulator through NPUALLOC_ACL_LIBRARY.
cmake_minimum_required(VERSION 3.20)

foreach(_var MODE BUILD_DIR SOURCE_DIR WORK_DIR EMU_LIB CXX_COMPILER GENERATOR)
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

if(MODE STREQUAL "find_package")
  set(_build "${WORK_DIR}/find-package")
  file(REMOVE_RECURSE "${_build}")
  run("configuring the consumer" "${CMAKE_COMMAND}" -S "${_consumer}" -B "${_build}" -G "${GENERATOR}"
      "-DCMAKE_PREFIX_PATH=${_prefix}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
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

run("running the consumer" "${CMAKE_COMMAND}" -E env --unset=LD_LIBRARY_PATH --unset=NPUALLOC_CONF
    "NPUALLOC_ACL_LIBRARY=${EMU_LIB}" ACLEMU_DEVICE_MEMORY=8g "${_program}")
