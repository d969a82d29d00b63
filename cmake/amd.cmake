# AMD: hipcc (CMAKE_CXX_COMPILER) for everything. Host-only files are compiled with
# --offload-host-only; device files once per target; each catalogue kernel only for its arch.

# Every compile and link runs with TMPDIR in the build folder (CMakeLists.txt), then through the
# launcher the Makefile passes (ccache when installed).
set(FMHA_LAUNCHER ${CMAKE_CXX_COMPILER_LAUNCHER})
set(WITH_TMPDIR ${CMAKE_COMMAND} -E env TMPDIR=${FMHA_TMPDIR})
set(CMAKE_CXX_COMPILER_LAUNCHER ${WITH_TMPDIR} ${FMHA_LAUNCHER})
set(CMAKE_CXX_LINKER_LAUNCHER ${WITH_TMPDIR})

# Each arch has one offload target; a compiler that lacks it is an error, never a silent drop
# (gfx942 needs ROCm >= 5.7: `make deps` sets one up where the system's is older).
function(fmha_check_target target)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} --offload-arch=${target} --offload-device-only -x hip
                          -c /dev/null -o ${FMHA_TMPDIR}/probe.o
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE error)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fmha: ${CMAKE_CXX_COMPILER} (clang ${CMAKE_CXX_COMPILER_VERSION}) cannot compile for ${target}: "
                        "run `make deps`, which sets up a hipcc that can\n${error}")
  endif()
endfunction()

# Binaries linked in a toolchain root (FMHA_HIP_ROOT: make deps' Debian 13 one) load that root's
# C library and HIP runtime, the ones they were built against, so they also run on this system.
set(FMHA_HIP_ROOT "" CACHE PATH "the root folder tools/trixie_hipcc.sh runs hipcc in (the Makefile sets it)")
set(ROOT_LINK_OPTIONS)
if(FMHA_HIP_ROOT)
  set(root_libs ${FMHA_HIP_ROOT}/usr/lib/x86_64-linux-gnu)
  set(ROOT_LINK_OPTIONS -Wl,--dynamic-linker=${root_libs}/ld-linux-x86-64.so.2 -Wl,--disable-new-dtags
                        -Wl,-rpath,${root_libs})  # DT_RPATH, unlike RUNPATH, also serves the libraries' own needs
endif()

set(AMD_TARGETS)
set(KERNEL_OBJECTS)
set(KERNEL_TARGETS)
set(HIP_DEVICE_FLAGS -O3 -fno-gpu-rdc)  # the flags kernels are built with (no fast-math: masks rely on -inf)
# Each kernel's compile writes the compiler's resource report to resources/<kernel>.txt.
set(RESOURCE_REPORTS ${CMAKE_BINARY_DIR}/resources)
file(MAKE_DIRECTORY ${RESOURCE_REPORTS})
# A kernel the generator removed leaves its report behind: drop it, or `make resources` checks it.
set(current_reports)
foreach(arch ${PLATFORM_ARCHS})
  foreach(source ${FMHA_KERNELS_${arch}})
    get_filename_component(name ${source} NAME_WE)
    list(APPEND current_reports ${RESOURCE_REPORTS}/${name}.txt)
  endforeach()
endforeach()
file(GLOB reports ${RESOURCE_REPORTS}/*.txt)
foreach(report ${reports})
  if(NOT report IN_LIST current_reports)
    file(REMOVE ${report})
  endif()
endforeach()
foreach(arch ${PLATFORM_ARCHS})
  set(target ${FMHA_ARCH_TARGET_${arch}})
  list(LENGTH FMHA_KERNELS_${arch} count)
  if(FMHA_KERNELS_${arch})  # the archs of the selection; the device reference is built for each too
    fmha_check_target(${target})
    list(APPEND AMD_TARGETS ${target})
    message(STATUS "fmha: ${arch}: ${count} kernels, offload target ${target}")
    add_library(kernels_${arch} OBJECT ${FMHA_KERNELS_${arch}})
    set_source_files_properties(${FMHA_KERNELS_${arch}} PROPERTIES LANGUAGE CXX)
    target_include_directories(kernels_${arch} PRIVATE ${INCLUDE_DIRS})
    target_compile_options(kernels_${arch} PRIVATE -x hip --offload-arch=${target} ${HIP_DEVICE_FLAGS}
                           -Rpass-analysis=kernel-resource-usage)
    set(launcher ${WITH_TMPDIR} sh ${CMAKE_SOURCE_DIR}/tools/resource_remarks.sh ${RESOURCE_REPORTS} ${FMHA_LAUNCHER})
    set_target_properties(kernels_${arch} PROPERTIES CXX_COMPILER_LAUNCHER "${launcher}")
    list(APPEND KERNEL_OBJECTS $<TARGET_OBJECTS:kernels_${arch}>)
    list(APPEND KERNEL_TARGETS kernels_${arch})
  endif()
endforeach()
if(NOT AMD_TARGETS)
  message(FATAL_ERROR "fmha: the catalogue has no AMD kernel (python3 setup.py --archs ...)")
endif()
string(REPLACE ";" ", " targets_text "${AMD_TARGETS}")
message(STATUS "fmha: AMD offload targets ${targets_text}, all built by ${CMAKE_CXX_COMPILER} (clang ${CMAKE_CXX_COMPILER_VERSION})")

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
  target_link_options(${target} PRIVATE --offload-arch=${FIRST_TARGET} ${ROOT_LINK_OPTIONS})
endfunction()

add_custom_target(resources
  COMMAND ${FMHA_PYTHON} ${CMAKE_SOURCE_DIR}/tools/resources.py ${RESOURCE_REPORTS}
          "${CMAKE_CXX_COMPILER} (clang ${CMAKE_CXX_COMPILER_VERSION})" USES_TERMINAL VERBATIM)
add_dependencies(resources ${KERNEL_TARGETS})
