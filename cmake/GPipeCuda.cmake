# Finds what the CUDA target needs (nvcc, cuBLASLt, NCCL, cuDNN) and enables CUDA.
# Sets GPIPE_HAVE_CUDA. Included from the top-level CMakeLists.txt: CMake
# wants enable_language(CUDA) in the highest directory using it.
set(GPIPE_ENABLE_CUDA AUTO CACHE STRING "Build the CUDA target (AUTO, ON, OFF)")
# The stage programs take theirs from --cuda-arch.
set(GPIPE_CUDA_ARCHITECTURES "80;90" CACHE STRING
    "GPU architectures of the CUDA runtime library")
set(GPIPE_HAVE_CUDA OFF)
if(NOT GPIPE_ENABLE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # "native" needs a GPU at configure time: name the architectures.
    set(CMAKE_CUDA_ARCHITECTURES ${GPIPE_CUDA_ARCHITECTURES})
    enable_language(CUDA)
    find_package(CUDAToolkit)
    find_path(GPIPE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(GPIPE_NCCL_LIBRARY NAMES nccl
                 HINTS ${CUDAToolkit_LIBRARY_DIR})
    # cuDNN runs the convolutions (runtime/src/cuda/conv.cu).
    find_path(GPIPE_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(GPIPE_CUDNN_LIBRARY NAMES cudnn
                 HINTS ${CUDAToolkit_LIBRARY_DIR})
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TARGET CUDA::cublasLt AND
     GPIPE_NCCL_INCLUDE_DIR AND GPIPE_NCCL_LIBRARY AND
     GPIPE_CUDNN_INCLUDE_DIR AND GPIPE_CUDNN_LIBRARY)
    set(GPIPE_HAVE_CUDA ON)
  elseif(GPIPE_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "GPIPE_ENABLE_CUDA=ON but nvcc, cuBLASLt, NCCL or cuDNN was "
                        "not found (CUDA toolkit under /usr/local/cuda?)")
  else()
    message(STATUS "gpipe: CUDA toolkit, cuBLASLt, NCCL or cuDNN not found: the CUDA "
                   "target (--target cuda) is not built")
  endif()
endif()

