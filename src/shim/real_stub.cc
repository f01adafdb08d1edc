// An empty library whose only purpose is its SONAME: linking the shim against it records the
// real driver library's name (libtessera-real-cuda.so.1 or libtessera-real-nvml.so.1) as a
// DT_NEEDED entry of libtessera-cuda.so. Never installed; the agent mounts the real driver
// under that name (contract.h).
