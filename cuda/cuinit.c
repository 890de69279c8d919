//go:build cuda

// gorgonia.org/cu calls cuInit in its package init and exits the process
// with a message of its own when that fails (no GPU, no driver loaded).
// This definition, linked into the executable, takes the place of
// libcuda's cuInit for every caller in the process (the executable's
// symbols come first): it calls the real cuInit, remembers its result for
// package cuda to report when a device is opened, and tells the caller all
// is well, so that a gorun built with -tags cuda still starts (and runs
// the cpu backend) on a machine without a GPU.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <cuda.h>

static CUresult gorun_cuinit_status = CUDA_ERROR_NOT_INITIALIZED;
static int gorun_cuinit_called = 0;

CUresult CUDAAPI cuInit(unsigned int flags) {
	CUresult (*real)(unsigned int) = (CUresult (*)(unsigned int))dlsym(RTLD_NEXT, "cuInit");
	gorun_cuinit_called = 1;
	if (real == NULL) {
		gorun_cuinit_status = CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
		return CUDA_SUCCESS;
	}
	gorun_cuinit_status = real(flags);
	return CUDA_SUCCESS;
}

// gorun_cuinit_result is the real cuInit's result (CUDA_SUCCESS when the
// driver found a GPU); cuInit is called again when it was never called.
CUresult gorun_cuinit_result(void) {
	if (!gorun_cuinit_called) {
		cuInit(0);
	}
	return gorun_cuinit_status;
}
