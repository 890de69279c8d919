// hostcheck.h — what hostcheck.cc adds to the generated wrappers
// (gen_hostcheck.h: one hc_<name> per kernel of ../kernels.h).
#ifndef GORUN_HOSTCHECK_H
#define GORUN_HOSTCHECK_H
#ifdef __cplusplus
extern "C" {
#endif

// hc_sources_sha256 returns the stamp (sources.h) this build was compiled with.
const char* hc_sources_sha256(void);

#ifdef __cplusplus
}
#endif
#endif // GORUN_HOSTCHECK_H
