# NVIDIA: nvcc compiles the .hip sources as CUDA with our HIP-on-CUDA header first on the
# include path; host files are plain C++ against the CUDA runtime.
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(HIP_ON_CUDA ${CMAKE_SOURCE_DIR}/src/platform/hip_on_cuda)
list(PREPEND INCLUDE_DIRS ${HIP_ON_CUDA})

# "sm_90a" -> 90a: real machine code only (no PTX to JIT), with Hopper's own instructions
# (wgmma, setmaxnreg), which plain sm_90 lacks.
set(CUDA_ARCHS)
foreach(arch ${PLATFORM_ARCHS})
  string(REPLACE "sm_" "" number ${FMHA_ARCH_TARGET_${arch}})
  list(APPEND CUDA_ARCHS ${number}-real)
endforeach()
message(STATUS "fmha: NVIDIA targets: ${CUDA_ARCHS}")

set(KERNEL_OBJECTS)
foreach(arch ${PLATFORM_ARCHS})
  set_source_files_properties(${FMHA_KERNELS_${arch}} PROPERTIES LANGUAGE CUDA)
  list(APPEND KERNEL_OBJECTS ${FMHA_KERNELS_${arch}})
endforeach()

function(fmha_mark_device_sources)
  set_source_files_properties(${ARGN} PROPERTIES LANGUAGE CUDA)
endfunction()
fmha_mark_device_sources(${DEVICE_SOURCES})

set(NVCC_FLAGS -O3 -Xptxas=-warn-spills)  # no fast-math: masks rely on -inf, the reference on expf
function(fmha_platform_setup target)
  target_include_directories(${target} BEFORE PRIVATE ${HIP_ON_CUDA})
  target_link_libraries(${target} PRIVATE CUDA::cudart_static)
  set(launcher ${CMAKE_SOURCE_DIR}/cmake/ptxas_guard.sh ${CMAKE_CUDA_COMPILER_LAUNCHER})  # then ccache, if any
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${CUDA_ARCHS}" CUDA_COMPILER_LAUNCHER "${launcher}")
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${NVCC_FLAGS}>)
endfunction()

add_custom_target(resources COMMAND ${CMAKE_COMMAND} -E echo "resources: the AMD build's report (make resources PLATFORM=amd)")
