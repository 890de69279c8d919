package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// kernel is one gorun_* kernel as kernels.h declares it.
type kernel struct {
	name   string // the C name, gorun_relu
	params []param
	// block: the kernel uses __shared__ memory or __syncthreads (itself or
	// through a helper), so the host emulation runs each block's threads
	// together (host.h's launch_block) instead of one after the other.
	block bool
}

// param is one kernel parameter.
type param struct {
	name  string // the C name
	ctype *ctype
}

// code is one of kernels.h's GORUN_* integer macros: an op code or mode.
type code struct {
	macro   string // GORUN_UNARY_SIGMOID
	value   int
	comment string // the macro's trailing comment, if any
}

// ctype is a parameter type kernels.h allows, with what each mirror makes
// of it.
type ctype struct {
	c      string // as written in C, normalised: "const float*"
	argK   string // cuda's argKind
	goType string // hostcheck's Go parameter type
	toC    string // hostcheck's conversion of that Go value to the C type
}

// ctypes are the parameter types of kernels.h's ABI: pointers to float,
// int32 and double, int, float and unsigned long long.
var ctypes = func() map[string]*ctype {
	m := map[string]*ctype{}
	for _, t := range []*ctype{
		{"float*", "argPtr", "[]float32", "fp"},
		{"const float*", "argPtr", "[]float32", "fp"},
		{"int*", "argPtr", "[]int32", "ip"},
		{"const int*", "argPtr", "[]int32", "ip"},
		{"double*", "argPtr", "[]float64", "dp"},
		{"const double*", "argPtr", "[]float64", "dp"},
		{"int", "argInt", "int", "C.int"},
		{"float", "argFloat", "float32", "C.float"},
		{"unsigned long long", "argU64", "uint64", "C.ulonglong"},
	} {
		m[t.c] = t
	}
	return m
}()

// header is what kernels.h declares.
type header struct {
	kernels []*kernel
	codes   []code
}

// generate parses kernelsDir's kernels.h and kernel sources and renders
// every mirror.
func generate(kernelsDir string) ([]file, error) {
	h, err := os.ReadFile(filepath.Join(kernelsDir, "kernels.h"))
	if err != nil {
		return nil, err
	}
	hdr, err := parseHeader(string(h))
	if err != nil {
		return nil, err
	}
	srcs := map[string]string{}
	for _, pat := range []string{"*.cu", "*.cuh"} {
		names, err := filepath.Glob(filepath.Join(kernelsDir, pat))
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				return nil, err
			}
			srcs[filepath.Base(n)] = string(b)
		}
	}
	if err := markBlocks(hdr.kernels, srcs); err != nil {
		return nil, err
	}
	return render(hdr)
}

var (
	defineRE = regexp.MustCompile(`^#\s*define\s+(GORUN_\w+)\b(.*)$`)
	kernelRE = regexp.MustCompile(`GORUN_KERNEL\s+(\w+)\s*\(([^)]*)\)\s*;`)
	identRE  = regexp.MustCompile(`^[A-Za-z_]\w*$`)
)

// parseHeader reads kernels.h: its GORUN_KERNEL prototypes, in order, and
// its GORUN_* integer macros. A GORUN_* macro with a value other than a
// decimal integer (but GORUN_KERNEL itself) is an error, so that a code
// cannot be missed.
func parseHeader(src string) (*header, error) {
	hdr := &header{}
	seen := map[string]bool{}
	var body []string // the lines that are not preprocessor directives
	for i, line := range strings.Split(joinContinued(src), "\n") {
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, "#") {
			body = append(body, line)
			continue
		}
		m := defineRE.FindStringSubmatch(t)
		if m == nil || m[1] == "GORUN_KERNEL" {
			continue
		}
		val, comment, _ := strings.Cut(m[2], "//")
		val = strings.TrimSpace(val)
		if val == "" { // an include guard
			continue
		}
		v, err := strconv.Atoi(val)
		if err != nil {
			return nil, fmt.Errorf("kernels.h:%d: #define %s %s: an op code or mode must be a decimal integer", i+1, m[1], val)
		}
		if seen[m[1]] {
			return nil, fmt.Errorf("kernels.h:%d: %s defined twice", i+1, m[1])
		}
		seen[m[1]] = true
		hdr.codes = append(hdr.codes, code{macro: m[1], value: v, comment: strings.TrimSpace(comment)})
	}
	text := stripComments(strings.Join(body, "\n"))
	protos := kernelRE.FindAllStringSubmatch(text, -1)
	if n := strings.Count(text, "GORUN_KERNEL"); n != len(protos) {
		return nil, fmt.Errorf("kernels.h: %d GORUN_KERNEL declarations, %d of them of the form GORUN_KERNEL gorun_<name>(<parameters>);", n, len(protos))
	}
	names := map[string]bool{}
	for _, p := range protos {
		k := &kernel{name: p[1]}
		if !strings.HasPrefix(k.name, "gorun_") || len(k.name) == len("gorun_") {
			return nil, fmt.Errorf("kernels.h: kernel %s: a kernel's name is gorun_<name>", k.name)
		}
		if names[k.name] {
			return nil, fmt.Errorf("kernels.h: kernel %s declared twice", k.name)
		}
		names[k.name] = true
		list := strings.TrimSpace(p[2])
		if list != "" && list != "void" {
			for _, s := range strings.Split(list, ",") {
				prm, err := parseParam(s)
				if err != nil {
					return nil, fmt.Errorf("kernels.h: kernel %s: %w", k.name, err)
				}
				k.params = append(k.params, prm)
			}
		}
		hdr.kernels = append(hdr.kernels, k)
	}
	if len(hdr.kernels) == 0 {
		return nil, fmt.Errorf("kernels.h declares no kernel")
	}
	return hdr, nil
}

// parseParam reads one C parameter, "const float* x".
func parseParam(s string) (param, error) {
	f := strings.Fields(strings.ReplaceAll(s, "*", " * "))
	if len(f) < 2 || !identRE.MatchString(f[len(f)-1]) {
		return param{}, fmt.Errorf("parameter %q: want a type and a name", strings.TrimSpace(s))
	}
	name := f[len(f)-1]
	typ := strings.ReplaceAll(strings.Join(f[:len(f)-1], " "), " *", "*")
	t, ok := ctypes[typ]
	if !ok {
		var allowed []string
		for c := range ctypes {
			allowed = append(allowed, c)
		}
		slices.Sort(allowed)
		return param{}, fmt.Errorf("parameter %s has the type %q; a kernel takes only %s", name, typ, strings.Join(allowed, ", "))
	}
	return param{name: name, ctype: t}, nil
}

var (
	funcRE  = regexp.MustCompile(`\b(gorun_\w+)\s*\([^(){};]*\)\s*\{`)
	tokenRE = regexp.MustCompile(`[A-Za-z_]\w*`)
	macroRE = regexp.MustCompile(`^#\s*define\s+(\w+)(.*)$`)
)

// markBlocks sets each kernel's block flag from the sources (file name →
// text): a function or macro "blocks" when its body names __shared__ or
// __syncthreads or a function or macro that blocks. Every kernel must be
// defined in exactly one source, and every gorun_* function defined
// with GORUN_KERNEL must be declared in kernels.h.
func markBlocks(kernels []*kernel, srcs map[string]string) error {
	bodies := map[string]string{} // gorun_* functions and GORUN_*/gorun_* macros
	where := map[string]string{}
	kernelDefs := map[string]bool{}
	files := make([]string, 0, len(srcs))
	for f := range srcs {
		files = append(files, f)
	}
	slices.Sort(files)
	for _, f := range files {
		var code []string
		for _, line := range strings.Split(joinContinued(stripComments(srcs[f])), "\n") {
			t := strings.TrimSpace(line)
			if !strings.HasPrefix(t, "#") {
				code = append(code, line)
				continue
			}
			if m := macroRE.FindStringSubmatch(t); m != nil {
				bodies[m[1]] = m[2]
			}
		}
		text := strings.Join(code, "\n")
		for _, loc := range funcRE.FindAllStringSubmatchIndex(text, -1) {
			name := text[loc[2]:loc[3]]
			end, err := blockEnd(text, loc[1]-1)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", f, name, err)
			}
			if w, ok := where[name]; ok {
				return fmt.Errorf("%s: %s is defined in %s too", f, name, w)
			}
			where[name] = f
			bodies[name] = text[loc[1]:end]
			if strings.HasSuffix(strings.TrimSpace(text[max(0, loc[0]-64):loc[0]]), "GORUN_KERNEL") {
				kernelDefs[name] = true
			}
		}
	}
	memo := map[string]int{} // 1 visiting, 2 no, 3 yes
	var blocks func(name string) bool
	blocks = func(name string) bool {
		switch memo[name] {
		case 1, 2:
			return false
		case 3:
			return true
		}
		memo[name] = 1
		yes := false
		for _, tok := range tokenRE.FindAllString(bodies[name], -1) {
			if tok == "__shared__" || tok == "__syncthreads" {
				yes = true
			} else if _, ok := bodies[tok]; ok && tok != name && blocks(tok) {
				yes = true
			}
		}
		memo[name] = map[bool]int{false: 2, true: 3}[yes]
		return yes
	}
	declared := map[string]bool{}
	for _, k := range kernels {
		declared[k.name] = true
		if !kernelDefs[k.name] {
			return fmt.Errorf("kernels.h declares %s, but no kernel source defines it (GORUN_KERNEL %s(...) { ... })", k.name, k.name)
		}
		k.block = blocks(k.name)
	}
	for name := range kernelDefs {
		if !declared[name] {
			return fmt.Errorf("%s defines the kernel %s, which kernels.h does not declare", where[name], name)
		}
	}
	return nil
}

// blockEnd returns the index just past the brace that closes the one at
// text[open].
func blockEnd(text string, open int) (int, error) {
	depth := 0
	for i := open; i < len(text); i++ {
		switch text[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("unbalanced braces")
}

// stripComments replaces C comments with a space each (or their line
// breaks), leaving string and character literals alone.
func stripComments(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '"' || s[i] == '\'':
			q := s[i]
			b.WriteByte(q)
			for i++; i < len(s) && s[i] != q && s[i] != '\n'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					b.WriteByte(s[i])
					i++
				}
				b.WriteByte(s[i])
			}
			if i < len(s) {
				b.WriteByte(s[i])
			}
		case strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
			b.WriteByte(' ')
			if i < len(s) {
				b.WriteByte('\n')
			}
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				end = len(s) - i - 2
			}
			b.WriteString(" " + strings.Repeat("\n", strings.Count(s[i:i+2+end], "\n")))
			i += 2 + end + 1
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// joinContinued joins lines ending in a backslash with the next, keeping
// the line count (the continuation lines become empty).
func joinContinued(s string) string {
	lines := strings.Split(s, "\n")
	for i := 0; i < len(lines); i++ {
		j := i + 1
		for strings.HasSuffix(lines[i], "\\") && j < len(lines) {
			lines[i] = strings.TrimSuffix(lines[i], "\\") + " " + lines[j]
			lines[j] = ""
			j++
		}
		i = j - 1
	}
	return strings.Join(lines, "\n")
}
