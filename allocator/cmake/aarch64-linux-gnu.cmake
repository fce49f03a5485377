# The one arm64 toolchain (Debian's gcc-aarch64-linux-gnu), for the allocator and the workloads:
#   cmake -S allocator -B build/allocator-arm64 -G Ninja \   (or -S runner/workloads)
#         -DCMAKE_TOOLCHAIN_FILE=allocator/cmake/aarch64-linux-gnu.cmake
# Binaries run under qemu-aarch64 (-L /usr/aarch64-linux-gnu), also with -p 65536.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
find_program(MLD_QEMU_AARCH64 qemu-aarch64)
if(MLD_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${MLD_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
endif()
