// hostcheck.cc — the stamp of the kernel sources this package is built
// from. The kernels themselves (../all.cu through ../host.h) and their
// hc_<name> wrappers are in gen_hostcheck.cc, generated from ../kernels.h.
// sources.h lies in this directory, so that Go rebuilds the package, and
// with it gen_hostcheck.cc, whenever stamp.sh rewrites it.
#include "hostcheck.h"
#include "sources.h"

const char* hc_sources_sha256() { return GORUN_KERNEL_SOURCES_SHA256; }
