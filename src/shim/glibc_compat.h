// The shim is loaded into container images whose C library may be much older than the build
// machine's (CUDA images on Ubuntu 20.04 have glibc 2.31, on UBI 8 glibc 2.28). A library built on
// glibc 2.36 binds each libc function to its newest version and then refuses to load on an older
// glibc ("version `GLIBC_2.34' not found"). So the shim:
//   - binds dlopen, dlsym and dlerror to their original versions (below) and lists libdl.so.2
//     as DT_NEEDED, where glibc < 2.34 defines them (on 2.34+ it is an empty stub and libc.so.6
//     keeps the old versions);
//   - uses no stat/fstat (2.33 versions), no std::call_once (pthread_once 2.34);
//   - defines, hidden inside itself, the two symbols that its statically linked C++ runtime
//     would otherwise take from a new glibc (glibc_compat.cc).
// A test (shim_glibc_test) lists the versions the built libraries need and fails above 2.17.
// Include only in the translation units that call the dl* functions.
#pragma once

#if defined(__x86_64__)
#define TESSERA_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define TESSERA_GLIBC_BASE "GLIBC_2.17"
#endif

#if defined(TESSERA_GLIBC_BASE) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
__asm__(".symver dlopen,dlopen@" TESSERA_GLIBC_BASE);
__asm__(".symver dlsym,dlsym@" TESSERA_GLIBC_BASE);
__asm__(".symver dlerror,dlerror@" TESSERA_GLIBC_BASE);
#endif
