package cuda

import (
	"fmt"
	"strings"
)

// libraryNames are the sonames dlopen tries for each dynamically opened
// library, newest first, after any path the cluster file names.
var libraryNames = map[string][]string{
	"cublas":   {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"},
	"cublasLt": {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"},
	"nccl":     {"libnccl.so.2", "libnccl.so"},
}

// librarySearch is the list of names or paths tried for library lib
// ("cublas", "nccl"): override (the [cuda] table's cublas or nccl
// path) first when it is set, then the default sonames.
func librarySearch(lib, override string) []string {
	var out []string
	if override != "" {
		out = append(out, override)
	}
	for _, n := range libraryNames[lib] {
		if n != override {
			out = append(out, n)
		}
	}
	return out
}

// openAttempt is one failed dlopen: what was tried and dlerror's text.
type openAttempt struct {
	Name, Err string
}

// openFirst opens the first of names that open accepts. open returns a
// handle (nil on failure) and dlerror's text. The error of a search that
// found nothing names every attempt.
func openFirst[H comparable](lib string, names []string, open func(string) (H, string)) (H, string, error) {
	var zero H
	var tried []openAttempt
	for _, n := range names {
		h, msg := open(n)
		if h != zero {
			return h, n, nil
		}
		tried = append(tried, openAttempt{n, msg})
	}
	return zero, "", loadError(lib, tried)
}

// libraryKey is the cluster file key that sets a library's path.
func libraryKey(lib string) string { return "[cuda] " + lib }

// loadError says that none of the attempts to open lib succeeded, with
// dlerror's text for each, and how to point gorun at the library.
func loadError(lib string, tried []openAttempt) error {
	var b strings.Builder
	fmt.Fprintf(&b, "cuda: cannot load %s: tried ", displayName(lib))
	for i, t := range tried {
		if i > 0 {
			b.WriteString("; ")
		}
		msg := strings.TrimSpace(t.Err)
		if msg == "" {
			msg = "not found"
		}
		fmt.Fprintf(&b, "%s (%s)", t.Name, msg)
	}
	if len(tried) == 0 {
		b.WriteString("nothing")
	}
	fmt.Fprintf(&b, ". Set %s = \"/path/to/%s\" in the cluster file, or add its folder to LD_LIBRARY_PATH", libraryKey(lib), exampleSoname(lib))
	return fmt.Errorf("%s", b.String())
}

func displayName(lib string) string {
	switch lib {
	case "cublas":
		return "cuBLAS"
	case "cublasLt":
		return "cuBLASLt"
	case "nccl":
		return "NCCL"
	}
	return lib
}

func exampleSoname(lib string) string {
	if names := libraryNames[lib]; len(names) > 0 {
		return names[0]
	}
	return "lib" + lib + ".so"
}
