package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The test runs in cuda/kernels/internal/genkernels.
const (
	kernelsDir = "../.."
	cudaDir    = "../../.."
)

// TestGeneratedFilesCurrent regenerates every mirror of kernels.h into a
// temporary directory and fails when a committed file differs, is missing,
// or is a gen_* file the generator no longer writes.
func TestGeneratedFilesCurrent(t *testing.T) {
	files, err := generate(kernelsDir)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if err := write(tmp, files); err != nil {
		t.Fatal(err)
	}
	const fix = "run `go generate ./cuda/kernels` and commit the result"
	want := map[string]bool{}
	for _, f := range files {
		want[filepath.Clean(filepath.FromSlash(f.path))] = true
		fresh, err := os.ReadFile(filepath.Join(tmp, filepath.FromSlash(f.path)))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(filepath.Join(cudaDir, filepath.FromSlash(f.path)))
		if err != nil {
			t.Errorf("cuda/%s: %v: %s", f.path, err, fix)
			continue
		}
		if !bytes.Equal(committed, fresh) {
			t.Errorf("cuda/%s is stale (kernels.h or the generator changed since it was written): %s", f.path, fix)
		}
	}
	for _, dir := range []string{".", "kernels", filepath.Join("kernels", "hostcheck")} {
		names, err := filepath.Glob(filepath.Join(cudaDir, dir, "gen_*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			rel, _ := filepath.Rel(cudaDir, n)
			if !want[rel] {
				t.Errorf("cuda/%s is not written by the generator any more: delete it (or %s)", filepath.ToSlash(rel), fix)
			}
		}
	}
}

// TestGeneratedHeader: every generated file opens with Go's "Code
// generated … DO NOT EDIT." line.
func TestGeneratedHeader(t *testing.T) {
	files, err := generate(kernelsDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		first, _, _ := strings.Cut(string(f.data), "\n")
		if !strings.HasPrefix(first, "// Code generated ") || !strings.HasSuffix(first, " DO NOT EDIT.") {
			t.Errorf("%s starts %q", f.path, first)
		}
	}
}

// TestBlocks: the kernels with shared memory or barriers, found in the
// real sources, directly (gorun_bn_running has only a __syncthreads) or
// not, and an elementwise kernel that reduces (clip_grad_norm).
func TestBlocks(t *testing.T) {
	files, err := generate(kernelsDir)
	if err != nil {
		t.Fatal(err)
	}
	var cc string
	for _, f := range files {
		if f.path == hostcheckCC {
			cc = string(f.data)
		}
	}
	for _, c := range []struct {
		kernel string
		block  bool
	}{
		{"gorun_relu", false}, {"gorun_bn_params", false}, {"gorun_softmax", false},
		{"gorun_sum", true}, {"gorun_bn_running", true}, {"gorun_clip_grad_norm", true},
		{"gorun_layer_norm", true}, {"gorun_nll_loss", true},
	} {
		launch := "gorun_host::launch(hc_grid, hc_block, " + c.kernel + ","
		if c.block {
			launch = "gorun_host::launch_block(hc_grid, hc_block, " + c.kernel + ","
		}
		if !strings.Contains(cc, launch) {
			t.Errorf("%s: want %s", c.kernel, launch)
		}
	}
}

func TestMarkBlocksTransitive(t *testing.T) {
	ks := []*kernel{{name: "gorun_a"}, {name: "gorun_b"}, {name: "gorun_c"}, {name: "gorun_d"}}
	srcs := map[string]string{
		"x.cuh": `#define SYNC() __syncthreads()
__device__ float gorun_inner(float* r) { SYNC(); return r[0]; } // __shared__ in a comment does not count
__device__ float gorun_outer(float* r) { return gorun_inner(r); }
__device__ float gorun_plain(float* r) { /* __syncthreads */ return r[0]; }`,
		"y.cu": `GORUN_KERNEL gorun_a(float* x) { x[0] = gorun_outer(x); }
GORUN_KERNEL gorun_b(float* x) { if (x) { x[0] = gorun_plain(x); } }
GORUN_KERNEL gorun_c(float* x) { __shared__ float s[4]; s[0] = x[0]; }
GORUN_KERNEL gorun_d(float* x) { const char* s = "__syncthreads"; x[0] = s[0]; }`,
	}
	if err := markBlocks(ks, srcs); err != nil {
		t.Fatal(err)
	}
	got := []bool{ks[0].block, ks[1].block, ks[2].block, ks[3].block}
	// d's string literal is a token too: the rule errs on the safe side
	// (launch_block runs any kernel correctly).
	if want := []bool{true, false, true, true}; !slices.Equal(got, want) {
		t.Errorf("blocks %v, want %v", got, want)
	}
}

// TestErrors: a header or sources the mirrors cannot follow fail with a
// message naming the kernel or macro.
func TestErrors(t *testing.T) {
	for _, c := range []struct {
		name, header, src, want string
	}{
		{"type", `GORUN_KERNEL gorun_a(const short* x);`, `GORUN_KERNEL gorun_a(const short* x) {}`, `gorun_a: parameter x has the type "const short*"`},
		{"unnamed", `GORUN_KERNEL gorun_a(float*);`, ``, `gorun_a: parameter "float*": want a type and a name`},
		{"prefix", `GORUN_KERNEL relu(float* x);`, ``, `kernel relu: a kernel's name is gorun_<name>`},
		{"twice", "GORUN_KERNEL gorun_a(float* x);\nGORUN_KERNEL gorun_a(float* x);", ``, `gorun_a declared twice`},
		{"malformed", "GORUN_KERNEL gorun_a(float* x)\nGORUN_KERNEL gorun_b(float* x);", ``, `2 GORUN_KERNEL declarations, 1 of them`},
		{"code", "#define GORUN_UNARY_X (1 << 2)\nGORUN_KERNEL gorun_a(float* x);", ``, `#define GORUN_UNARY_X (1 << 2): an op code or mode must be a decimal integer`},
		{"undefined", `GORUN_KERNEL gorun_a(float* x);`, `GORUN_KERNEL gorun_b(float* x) {}`, `kernels.h declares gorun_a, but no kernel source defines it`},
		{"undeclared", `GORUN_KERNEL gorun_a(float* x);`, "GORUN_KERNEL gorun_a(float* x) {}\nGORUN_KERNEL gorun_b(float* x) {}", `k.cu defines the kernel gorun_b, which kernels.h does not declare`},
		{"keyword", `GORUN_KERNEL gorun_a(float* x, int range);`, `GORUN_KERNEL gorun_a(float* x, int range) {}`, `gorun_a: rename the parameter range`},
		{"reserved", `GORUN_KERNEL gorun_a(float* geom);`, `GORUN_KERNEL gorun_a(float* geom) {}`, `gorun_a: rename the parameter geom`},
		{"go name", "GORUN_KERNEL gorun_a_b(float* x);\nGORUN_KERNEL gorun_a__b(float* x);", "GORUN_KERNEL gorun_a_b(float* x) {}\nGORUN_KERNEL gorun_a__b(float* x) {}", `kernels gorun_a_b and gorun_a__b both become AB in Go`},
	} {
		hdr, err := parseHeader(c.header)
		if err == nil {
			err = markBlocks(hdr.kernels, map[string]string{"k.cu": c.src})
		}
		if err == nil {
			_, err = render(hdr)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestParseHeader: prototypes over several lines, pointers written either
// way, comments, and codes with and without a trailing comment.
func TestParseHeader(t *testing.T) {
	hdr, err := parseHeader(`#ifndef GORUN_KERNELS_H
#define GORUN_KERNELS_H
#define GORUN_KERNEL extern "C" __global__ void
// GORUN_KERNEL gorun_commented(float* x);
#define GORUN_MODE_A 0 // the first
#define GORUN_MODE_B 7
GORUN_KERNEL gorun_first(const float *x, float* y,
                         int n, unsigned  long long seed /* the seed */);
GORUN_KERNEL gorun_second(void);
#endif`)
	if err != nil {
		t.Fatal(err)
	}
	if len(hdr.kernels) != 2 || hdr.kernels[0].name != "gorun_first" || hdr.kernels[1].name != "gorun_second" {
		t.Fatalf("kernels %+v", hdr.kernels)
	}
	var types []string
	for _, p := range hdr.kernels[0].params {
		types = append(types, p.ctype.c+" "+p.name)
	}
	if want := []string{"const float* x", "float* y", "int n", "unsigned long long seed"}; !slices.Equal(types, want) {
		t.Errorf("params %q, want %q", types, want)
	}
	if len(hdr.kernels[1].params) != 0 {
		t.Errorf("gorun_second(void) has params %+v", hdr.kernels[1].params)
	}
	want := []code{{"GORUN_MODE_A", 0, "the first"}, {"GORUN_MODE_B", 7, ""}}
	if !slices.Equal(hdr.codes, want) {
		t.Errorf("codes %+v, want %+v", hdr.codes, want)
	}
}

func TestGoName(t *testing.T) {
	for _, c := range []struct {
		in       string
		exported bool
		want     string
	}{
		{"relu_grad", true, "ReLUGrad"}, {"maxpool2d_grad", true, "MaxPool2DGrad"}, {"dropout2d", true, "Dropout2D"},
		{"im2col", true, "Im2col"}, {"onl_to_nol", true, "ONLToNOL"}, {"gather_rows_int", true, "GatherRowsInt"},
		{"running_mean", false, "runningMean"}, {"dy2", false, "dy2"}, {"BN_GRAD_SUMS", false, "bnGradSums"},
		{"UNARY_LEAKY_RELU", true, "UnaryLeakyReLU"}, {"LN_GAMMA_SUMS", true, "LNGammaSums"},
	} {
		if got := goName(c.in, c.exported); got != c.want {
			t.Errorf("goName(%q, %v) = %q, want %q", c.in, c.exported, got, c.want)
		}
	}
}
