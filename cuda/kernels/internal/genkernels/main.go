// Command genkernels writes the Go and C mirrors of cuda/kernels/kernels.h,
// the one list of gorun's CUDA kernels. Run it through go generate:
//
//	go generate ./cuda/kernels
//
// It reads kernels.h's gorun_* prototypes (each kernel's name and parameter
// C types) and its GORUN_* integer macros (the op codes and modes of the
// kernels shared by several ops), and the kernel sources (*.cu, *.cuh) to
// tell which kernels use __shared__ memory or __syncthreads, directly or
// through a helper. From them it writes, under the cuda directory:
//
//	gen_kernels.go                  package cuda: the kernel ids (kernelID),
//	                                kernelSigs (names and argument kinds) and
//	                                the op code constants
//	kernels/gen_names.go            package kernels: Names
//	kernels/hostcheck/gen_hostcheck.h   one hc_<name> per kernel: launch it on
//	kernels/hostcheck/gen_hostcheck.cc  the CPU (host.h's launch, or
//	                                launch_block for kernels with shared
//	                                memory or barriers)
//	kernels/hostcheck/gen_hostcheck.go  package hostcheck: a Go function per
//	                                kernel calling its hc_<name>, the op code
//	                                constants and Codes
//
// A file is rewritten only when its content changes. An error (a parameter
// type the launchers do not know, a kernel declared but never defined, …)
// names kernels.h or the source file and the kernel, and nothing is
// written. The package's test fails when a committed file differs from
// what this program writes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	kernels := flag.String("kernels", ".", "the `directory` holding kernels.h and the kernel sources")
	out := flag.String("out", "", "the cuda `directory` to write into (default: the parent of -kernels)")
	flag.Parse()
	root := *out
	if root == "" {
		root = filepath.Dir(filepath.Clean(*kernels))
		if abs, err := filepath.Abs(*kernels); err == nil {
			root = filepath.Dir(abs)
		}
	}
	files, err := generate(*kernels)
	if err == nil {
		err = write(root, files)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "genkernels:", err)
		os.Exit(1)
	}
}

// write writes files under root, each only when its content differs from
// what is there.
func write(root string, files []file) error {
	for _, f := range files {
		path := filepath.Join(root, filepath.FromSlash(f.path))
		if old, err := os.ReadFile(path); err == nil && string(old) == string(f.data) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
