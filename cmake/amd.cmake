# AMD: hipcc (CMAKE_CXX_COMPILER) for everything. Host-only files are compiled with
# --offload-host-only; device files once per target; each catalogue kernel only for its arch.

# Every compile and link runs with TMPDIR in the build folder (CMakeLists.txt), then through the
# launcher the Makefile passes (ccache when installed).
set(FMHA_LAUNCHER ${CMAKE_CXX_COMPILER_LAUNCHER})
set(WITH_TMPDIR ${CMAKE_COMMAND} -E env TMPDIR=${FMHA_TMPDIR})
set(CMAKE_CXX_COMPILER_LAUNCHER ${WITH_TMPDIR} ${FMHA_LAUNCHER})
set(CMAKE_CXX_LINKER_LAUNCHER ${WITH_TMPDIR})

# Picks the first offload target of an arch that this hipcc knows (gfx942 needs ROCm >= 5.7;
# older toolchains compile CDNA3 as gfx940 and the configure log says so).
function(fmha_pick_target arch out)
  foreach(target ${FMHA_ARCH_TARGETS_${arch}})
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} --offload-arch=${target} --offload-device-only -x hip
                            -c /dev/null -o /dev/null
                    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(rc EQUAL 0)
      list(GET FMHA_ARCH_TARGETS_${arch} 0 preferred)
      if(NOT target STREQUAL preferred)
        message(STATUS "fmha: ${CMAKE_CXX_COMPILER} does not know ${preferred}: ${arch} kernels are compiled for ${target} (same ISA)")
      endif()
      set(${out} ${target} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "fmha: ${CMAKE_CXX_COMPILER} knows none of ${FMHA_ARCH_TARGETS_${arch}} for ${arch}")
endfunction()

set(AMD_TARGETS)
set(KERNEL_OBJECTS)
set(KERNEL_TARGETS)
set(HIP_DEVICE_FLAGS -O3 -fno-gpu-rdc)  # the flags kernels are built with (no fast-math: masks rely on -inf)
# Each kernel's compile writes the compiler's resource report to resources/<kernel>.txt.
set(RESOURCE_REPORTS ${CMAKE_BINARY_DIR}/resources)
file(MAKE_DIRECTORY ${RESOURCE_REPORTS})
foreach(arch ${PLATFORM_ARCHS})
  fmha_pick_target(${arch} target)
  list(APPEND AMD_TARGETS ${target})
  list(LENGTH FMHA_KERNELS_${arch} count)
  message(STATUS "fmha: ${arch}: ${count} kernels, offload target ${target}")
  if(FMHA_KERNELS_${arch})
    add_library(kernels_${arch} OBJECT ${FMHA_KERNELS_${arch}})
    set_source_files_properties(${FMHA_KERNELS_${arch}} PROPERTIES LANGUAGE CXX)
    target_include_directories(kernels_${arch} PRIVATE ${INCLUDE_DIRS})
    target_compile_options(kernels_${arch} PRIVATE -x hip --offload-arch=${target} ${HIP_DEVICE_FLAGS}
                           -Rpass-analysis=kernel-resource-usage)
    set_target_properties(kernels_${arch} PROPERTIES CXX_COMPILER_LAUNCHER
      "${WITH_TMPDIR};sh;${CMAKE_SOURCE_DIR}/tools/resource_remarks.sh;${RESOURCE_REPORTS};${FMHA_LAUNCHER}")
    list(APPEND KERNEL_OBJECTS $<TARGET_OBJECTS:kernels_${arch}>)
    list(APPEND KERNEL_TARGETS kernels_${arch})
  endif()
endforeach()
list(REMOVE_DUPLICATES AMD_TARGETS)
string(REPLACE ";" ", " targets_text "${AMD_TARGETS}")
message(STATUS "fmha: AMD offload targets: ${targets_text}")

set(OFFLOAD_ALL)
foreach(target ${AMD_TARGETS})
  list(APPEND OFFLOAD_ALL --offload-arch=${target})
endforeach()
list(GET AMD_TARGETS 0 FIRST_TARGET)

set(HOST_FILE_FLAGS --offload-arch=${FIRST_TARGET} --offload-host-only)
set_source_files_properties(${HOST_SOURCES} src/tool/fmha_main.cpp PROPERTIES COMPILE_OPTIONS "${HOST_FILE_FLAGS}")

function(fmha_mark_device_sources)
  set_source_files_properties(${ARGN} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-x;hip;${OFFLOAD_ALL};${HIP_DEVICE_FLAGS}")
endfunction()
fmha_mark_device_sources(${DEVICE_SOURCES})

# Host-only test files: the same host-only flags.
function(fmha_platform_setup target)
  get_target_property(sources ${target} SOURCES)
  foreach(source ${sources})
    if(source MATCHES "\\.cpp$")
      get_source_file_property(opts ${source} COMPILE_OPTIONS)
      if(NOT opts)
        set_source_files_properties(${source} PROPERTIES COMPILE_OPTIONS "${HOST_FILE_FLAGS}")
      endif()
    endif()
  endforeach()
  # The link step must name a target, or hipcc probes for a GPU.
  target_link_options(${target} PRIVATE --offload-arch=${FIRST_TARGET})
endfunction()

add_custom_target(resources
  COMMAND ${FMHA_PYTHON} ${CMAKE_SOURCE_DIR}/tools/resources.py ${RESOURCE_REPORTS} USES_TERMINAL)
add_dependencies(resources ${KERNEL_TARGETS})
