// Package hostcheck runs gorun's CUDA kernels on the CPU, so that they can
// be checked against the CPU ops (gorun/ops) on a machine without a GPU.
//
// gen_hostcheck.cc compiles the very sources nvcc turns into the embedded
// PTX (cuda/kernels/all.cu) as plain C++, through cuda/kernels/host.h,
// which maps the CUDA built-ins onto C++ and runs a launch's (block,
// thread) pairs on the CPU. Each launcher (ReLU, Unary, …, Sum) launches
// one kernel of cuda/kernels/kernels.h with the given geometry and the
// kernel's own arguments, in the same order and of the same types (an int
// flag stays an int); slices stand for device pointers (an empty slice is
// a null pointer). The launchers, their C wrappers and the op codes are
// generated from kernels.h (go generate ./cuda/kernels). The package needs
// cgo and g++, nothing from CUDA; it is a test harness, not a backend:
// launches are serialised and slow. Without cgo (CGO_ENABLED=0) the
// package is empty and its tests are skipped.
package hostcheck
