package docs

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"go.starlark.net/syntax"

	"gorun/datasets"
	"gorun/engine"
	_ "gorun/engine/backend/cpu" // the backend the partition how-to's plans compile for
	"gorun/script"
	"gorun/scripts"
)

// root is the repository, seen from this package's folder.
const root = ".."

// The pages checked: the README and every Markdown file under docs/.
func pages(t *testing.T) []*page {
	t.Helper()
	names := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []*page
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(root, n))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, parsePage(n, string(b)))
	}
	if len(out) < 8 {
		t.Fatalf("found %d pages (%v); want the README, the architecture page, the reference and the four how-tos at least", len(out), names)
	}
	return out
}

// page is a Markdown file cut into what the checks read.
type page struct {
	name     string // path from the repository root
	spans    []item // inline code spans, outside fenced blocks
	links    []item // link and image targets
	headings []string
	blocks   []*block
}

// item is a piece of text and the line it is on.
type item struct {
	text string
	line int
}

// block is a fenced code block.
type block struct {
	lang  string
	line  int      // the line of its opening fence
	lines []string // its content, the fence's indentation removed
}

func (p *page) at(line int) string { return fmt.Sprintf("%s:%d", p.name, line) }

var (
	fenceRE   = regexp.MustCompile("^(\\s*)(```+|~~~+)\\s*([\\w+-]*)")
	spanRE    = regexp.MustCompile("`([^`]+)`")
	linkRE    = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*$`)
)

func parsePage(name, text string) *page {
	p := &page{name: name}
	var open *block
	var fence, indent string
	// para holds the lines of the paragraph being read, so that code spans
	// and links that wrap onto the next line are found whole.
	var para []string
	paraLine := 0
	flush := func() {
		if len(para) == 0 {
			return
		}
		text := strings.Join(para, "\n")
		lineOf := func(off int) int { return paraLine + strings.Count(text[:off], "\n") }
		for _, m := range spanRE.FindAllStringSubmatchIndex(text, -1) {
			p.spans = append(p.spans, item{strings.ReplaceAll(text[m[2]:m[3]], "\n", " "), lineOf(m[0])})
		}
		for _, m := range linkRE.FindAllStringSubmatchIndex(text, -1) {
			p.links = append(p.links, item{text[m[2]:m[3]], lineOf(m[0])})
		}
		para = nil
	}
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		if open != nil {
			if t := strings.TrimSpace(line); strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				p.blocks = append(p.blocks, open)
				open = nil
				continue
			}
			open.lines = append(open.lines, strings.TrimPrefix(line, indent))
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			flush()
			open = &block{lang: m[3], line: n}
			indent, fence = m[1], m[2]
			continue
		}
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			flush()
			p.headings = append(p.headings, m[2])
		}
		if len(para) == 0 {
			paraLine = n
		}
		para = append(para, line)
	}
	flush()
	return p
}

// slug is the anchor GitHub gives a heading.
func slug(h string) string {
	h = strings.ToLower(strings.ReplaceAll(h, "`", ""))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && !strings.ContainsRune("—–…→·×²≤≥", r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// ignored are the top-level folders .gitignore names (/bin/, /runs/, …):
// what a build or a run leaves, never part of the repository.
func ignored(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{".git": true}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "/") {
			out[strings.Trim(l, "/")] = true
		}
	}
	return out
}

// repoFiles walks the repository (but ignored folders and testdata) and
// calls fn with each file's path from the root.
func repoFiles(t *testing.T, fn func(rel string)) {
	t.Helper()
	skip := ignored(t)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (skip[rel] || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		fn(rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPaths: every repository path a page names exists. A path is a code
// span, or a word of a code block, whose first element is a top-level entry
// of the repository (engine/sync.go, scripts/examples/partition_*.star,
// ./cuda/kernels/...); a bare Go or CUDA file name (sync_local_sgd.go) must
// be some file's name; links (relative to the page) must reach a file, and
// an #anchor a heading of it.
func TestPaths(t *testing.T) {
	skip := ignored(t)
	top := map[string]bool{}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !skip[e.Name()] {
			top[e.Name()] = true
		}
	}
	base := map[string]bool{}
	repoFiles(t, func(rel string) { base[path.Base(rel)] = true })
	headings := map[string][]string{}
	all := pages(t)
	for _, p := range all {
		headings[p.name] = p.headings
	}

	checked := 0
	check := func(p *page, line int, s string) {
		s = strings.Trim(s, "\"'`(),;:")
		s = strings.TrimPrefix(s, "./")
		s = strings.TrimSuffix(s, "...")
		if i := strings.IndexByte(s, ':'); i > 0 {
			s = s[:i] // file:line
		}
		first, _, ok := strings.Cut(s, "/")
		if !ok || !top[first] {
			if !strings.ContainsAny(s, "/ ") && regexp.MustCompile(`^[\w.+-]+\.(go|cu|cuh)$`).MatchString(s) {
				checked++
				if !base[s] {
					t.Errorf("%s: no file of the repository is called %s", p.at(line), s)
				}
			}
			return
		}
		checked++
		if strings.ContainsAny(s, "*?[") {
			m, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(s)))
			if err != nil || len(m) == 0 {
				t.Errorf("%s: %s matches no file", p.at(line), s)
			}
			return
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(s))); err != nil {
			t.Errorf("%s: %s does not exist", p.at(line), s)
		}
	}
	for _, p := range all {
		for _, s := range p.spans {
			for _, w := range strings.Fields(s.text) {
				check(p, s.line, w)
			}
		}
		for _, b := range p.blocks {
			for i, l := range b.lines {
				for _, w := range strings.Fields(l) {
					check(p, b.line+1+i, w)
				}
			}
		}
		for _, l := range p.links {
			target := l.text
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			rel := p.name
			if file != "" {
				rel = path.Clean(path.Join(path.Dir(p.name), file))
				checked++
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
					t.Errorf("%s: link %s: %s does not exist", p.at(l.line), target, rel)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			hs, ok := headings[rel]
			if !ok {
				t.Errorf("%s: link %s: an anchor in a file that is not a checked page", p.at(l.line), target)
				continue
			}
			if !slices.ContainsFunc(hs, func(h string) bool { return slug(h) == anchor }) {
				t.Errorf("%s: link %s: %s has no heading #%s", p.at(l.line), target, rel, anchor)
			}
		}
	}
	if checked < 100 {
		t.Errorf("checked only %d paths: is the parser still finding the code spans?", checked)
	}
}

// pkgDirs are gorun's packages by the name their identifiers are written
// with in the docs (the last element of their path).
var pkgDirs = map[string]string{
	"ops":         "ops",
	"engine":      "engine",
	"backend":     "engine/backend",
	"target":      "engine/target",
	"runner":      "engine/runner",
	"spec":        "engine/spec",
	"cpu":         "engine/backend/cpu",
	"plot":        "engine/plot",
	"board":       "engine/board",
	"comm":        "comm",
	"datasets":    "datasets",
	"torchrand":   "datasets/torchrand",
	"safetensors": "safetensors",
	"script":      "script",
	"scripts":     "scripts",
	"cuda":        "cuda",
	"cudatarget":  "cuda/cudatarget",
	"kernels":     "cuda/kernels",
	"hostcheck":   "cuda/kernels/hostcheck",
	"model":       "model",
	"serve":       "model/serve",
	"scriptcopy":  "script/scriptcopy",
	"scaling":     "engine/scaling",
}

// decls is what one package declares: its top-level names, and the
// members (methods, struct fields, interface methods) and embedded types
// of its types.
type decls struct {
	top      map[string]bool
	members  map[string]map[string]bool
	embedded map[string][]string
}

func (d *decls) has(typ, member string, seen map[string]bool) bool {
	if d.members[typ][member] {
		return true
	}
	if seen[typ] {
		return false
	}
	seen[typ] = true
	for _, e := range d.embedded[typ] {
		if d.has(e, member, seen) {
			return true
		}
	}
	return false
}

// typeName is the name of a receiver or embedded type: T, *T, T[P].
func typeName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return typeName(x.X)
	case *ast.IndexExpr:
		return typeName(x.X)
	case *ast.IndexListExpr:
		return typeName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return "" // another package's type
}

// goFiles parses the non-test Go files of dir (every build tag's).
func goFiles(dir string, mode parser.Mode) ([]*ast.File, error) {
	entries, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(dir)))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, filepath.FromSlash(dir), n), nil, mode)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

func declsOf(dir string) (*decls, error) {
	files, err := goFiles(dir, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	d := &decls{top: map[string]bool{}, members: map[string]map[string]bool{}, embedded: map[string][]string{}}
	member := func(typ, name string) {
		if d.members[typ] == nil {
			d.members[typ] = map[string]bool{}
		}
		d.members[typ][name] = true
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			switch x := decl.(type) {
			case *ast.FuncDecl:
				if x.Recv == nil {
					d.top[x.Name.Name] = true
				} else if len(x.Recv.List) > 0 {
					member(typeName(x.Recv.List[0].Type), x.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range x.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							d.top[n.Name] = true
						}
					case *ast.TypeSpec:
						name := s.Name.Name
						d.top[name] = true
						var fields []*ast.Field
						switch tt := s.Type.(type) {
						case *ast.StructType:
							fields = tt.Fields.List
						case *ast.InterfaceType:
							fields = tt.Methods.List
						}
						for _, fl := range fields {
							if len(fl.Names) == 0 {
								if e := typeName(fl.Type); e != "" {
									d.embedded[name] = append(d.embedded[name], e)
									member(name, e)
								}
								continue
							}
							for _, n := range fl.Names {
								member(name, n.Name)
							}
						}
					}
				}
			}
		}
	}
	return d, nil
}

// TestIdentifiers: every pkg.Name and pkg.Type.Member a page writes, for
// gorun's packages (pkgDirs), is declared there: a top-level name, or a
// method, struct field or interface method of the type (or of a type it
// embeds). Only exported first names are taken as identifiers, so cluster
// keys such as comm.timeout and cpu.help are not.
func TestIdentifiers(t *testing.T) {
	var names []string
	for n := range pkgDirs {
		names = append(names, n)
	}
	sort.Strings(names)
	idRE := regexp.MustCompile(`(^|[^\w./])(` + strings.Join(names, "|") + `)\.([A-Z]\w*)(?:\.([A-Za-z_]\w*))?`)

	pkgs := map[string]*decls{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for n, dir := range pkgDirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := declsOf(dir)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			pkgs[n] = d
			mu.Unlock()
		}()
	}
	wg.Wait()

	checked := 0
	for _, p := range pages(t) {
		text, err := os.ReadFile(filepath.Join(root, p.name))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			for _, m := range idRE.FindAllStringSubmatch(line, -1) {
				pkg, name, mem := m[2], m[3], m[4]
				d := pkgs[pkg]
				if d == nil {
					continue
				}
				checked++
				id := pkg + "." + name
				switch {
				case !d.top[name]:
					t.Errorf("%s: %s: package %s (%s) declares no %s", p.at(i+1), id, pkg, pkgDirs[pkg], name)
				case mem != "" && !d.has(name, mem, map[string]bool{}):
					t.Errorf("%s: %s.%s: %s has no method or field %s", p.at(i+1), id, mem, id, mem)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d identifiers", checked)
	}
}

// TestTestNames: every TestX, BenchmarkX and FuzzX a page names is a test
// function of the repository.
func TestTestNames(t *testing.T) {
	declared := map[string]bool{}
	funcRE := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)\w*)\(`)
	repoFiles(t, func(rel string) {
		if !strings.HasSuffix(rel, "_test.go") {
			return
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range funcRE.FindAllSubmatch(b, -1) {
			declared[string(m[1])] = true
		}
	})
	nameRE := regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z]\w*`)
	checked := 0
	for _, p := range pages(t) {
		text, _ := os.ReadFile(filepath.Join(root, p.name))
		for i, line := range strings.Split(string(text), "\n") {
			for _, n := range nameRE.FindAllString(line, -1) {
				checked++
				if !declared[n] {
					t.Errorf("%s: no test function %s in the repository", p.at(i+1), n)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked only %d test names", checked)
	}
}

// commands returns the command lines a page shows: its code spans and the
// lines of its code blocks that are not Go, Python or TOML.
func commands(p *page) []item {
	var out []item
	out = append(out, p.spans...)
	for _, b := range p.blocks {
		switch b.lang {
		case "go", "python", "toml", "c":
			continue
		}
		for i, l := range b.lines {
			out = append(out, item{l, b.line + 1 + i})
		}
	}
	return out
}

// TestMakeTargets: every `make TARGET` a page shows is a Makefile target.
func TestMakeTargets(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Za-z][\w-]*):`).FindAllSubmatch(mk, -1) {
		targets[string(m[1])] = true
	}
	makeRE := regexp.MustCompile(`^(?:\$ )?make ([a-z][\w-]*)`)
	checked := 0
	for _, p := range pages(t) {
		for _, c := range commands(p) {
			if m := makeRE.FindStringSubmatch(strings.TrimSpace(c.text)); m != nil {
				checked++
				if !targets[m[1]] {
					t.Errorf("%s: make %s: the Makefile has no target %s", p.at(c.line), m[1], m[1])
				}
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked only %d make targets", checked)
	}
}

// gorunFlags are the flags cmd/gorun defines, in any of its flag sets.
func gorunFlags(t *testing.T) map[string]bool {
	t.Helper()
	files, err := goFiles("cmd/gorun", parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	defining := map[string]int{ // flag.FlagSet method: the argument that names the flag
		"String": 0, "Int": 0, "Bool": 0, "Float64": 0, "Uint64": 0, "Duration": 0, "Func": 0,
		"StringVar": 1, "IntVar": 1, "BoolVar": 1, "Float64Var": 1, "Uint64Var": 1, "DurationVar": 1, "Var": 1,
	}
	out := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			i, ok := defining[sel.Sel.Name]
			if !ok || len(call.Args) <= i {
				return true
			}
			if lit, ok := call.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					out[s] = true
				}
			}
			return true
		})
	}
	for _, f := range []string{"cluster", "devices", "set", "out", "resume", "dry-run", "prompt"} {
		if !out[f] {
			t.Fatalf("found the flags %v in cmd/gorun, not --%s: has the flag parsing changed?", out, f)
		}
	}
	return out
}

// TestGorunFlags: every flag a gorun command line on a page gives is one
// cmd/gorun defines.
func TestGorunFlags(t *testing.T) {
	known := gorunFlags(t)
	cmdRE := regexp.MustCompile(`(?:^|[\s($])(?:\./)?(?:bin/)?gorun(?:-cuda)?\s+(.*)`)
	flagRE := regexp.MustCompile(`(?:^|\s)--?([A-Za-z][\w-]*)`)
	checked := 0
	for _, p := range pages(t) {
		for _, c := range commands(p) {
			m := cmdRE.FindStringSubmatch(c.text)
			if m == nil {
				continue
			}
			rest, _, _ := strings.Cut(m[1], "|")
			rest, _, _ = strings.Cut(rest, "#")
			for _, f := range flagRE.FindAllStringSubmatch(rest, -1) {
				checked++
				if !known[f[1]] {
					t.Errorf("%s: gorun has no flag -%s (%s)", p.at(c.line), f[1], strings.TrimSpace(c.text))
				}
			}
		}
	}
	if checked < 15 {
		t.Errorf("checked only %d gorun flags", checked)
	}
}

// TestQuotes: a code block whose first line is "// from PATH" or "# from
// PATH" quotes that file: its lines (compared without their indentation)
// appear there in order and contiguous, but where a line "..." leaves
// some out.
func TestQuotes(t *testing.T) {
	fromRE := regexp.MustCompile(`^(?://|#)\s*from\s+(\S+)\s*$`)
	quotes := 0
	for _, p := range pages(t) {
		for _, b := range p.blocks {
			if len(b.lines) == 0 {
				continue
			}
			m := fromRE.FindStringSubmatch(strings.TrimSpace(b.lines[0]))
			if m == nil {
				continue
			}
			quotes++
			src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m[1])))
			if err != nil {
				t.Errorf("%s: a quote from %s: %v", p.at(b.line), m[1], err)
				continue
			}
			var file []string
			for _, l := range strings.Split(string(src), "\n") {
				file = append(file, strings.TrimSpace(l))
			}
			var segs [][]string
			seg := []string{}
			for _, l := range b.lines[1:] {
				switch l = strings.TrimSpace(l); l {
				case "...", "…", "// ...", "# ...":
					segs = append(segs, seg)
					seg = []string{}
				default:
					seg = append(seg, l)
				}
			}
			segs = append(segs, seg)
			at := 0
			for _, s := range segs {
				for len(s) > 0 && s[0] == "" {
					s = s[1:]
				}
				for len(s) > 0 && s[len(s)-1] == "" {
					s = s[:len(s)-1]
				}
				if len(s) == 0 {
					continue
				}
				found := -1
				for i := at; i+len(s) <= len(file); i++ {
					if slices.Equal(file[i:i+len(s)], s) {
						found = i
						break
					}
				}
				if found < 0 {
					t.Errorf("%s: the quote from %s is not in the file (after line %d) as written:\n%s", p.at(b.line), m[1], at, strings.Join(s, "\n"))
					break
				}
				at = found + len(s)
			}
		}
	}
	if quotes < 10 {
		t.Errorf("found only %d quotes", quotes)
	}
}

// TestPackageMap: the package map of architecture.md lists every Go
// package of the repository, and each imports only the gorun packages its
// row allows (its non-test files, every build tag's).
func TestPackageMap(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n## Package map\n")
	if !ok {
		t.Fatal("architecture.md has no section \"## Package map\"")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	rowRE := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|.*\\| ([^|]+) \\|$")
	allowed := map[string][]string{} // nil: any
	for _, m := range rowRE.FindAllStringSubmatch(table, -1) {
		dir := strings.TrimSuffix(m[1], "/")
		cell := strings.TrimSpace(m[2])
		switch cell {
		case "any":
			allowed[dir] = nil
		case "nothing":
			allowed[dir] = []string{}
		default:
			for _, s := range spanRE.FindAllStringSubmatch(cell, -1) {
				allowed[dir] = append(allowed[dir], s[1])
			}
			if allowed[dir] == nil {
				t.Errorf("package map: %s: the last column says %q; want package paths in backquotes, \"nothing\" or \"any\"", dir, cell)
			}
		}
	}

	pkgs := map[string]bool{}
	repoFiles(t, func(rel string) {
		if strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			pkgs[path.Dir(rel)] = true
		}
	})
	for dir := range pkgs {
		if _, ok := allowed[dir]; !ok {
			t.Errorf("architecture.md's package map has no row for the package %s/", dir)
		}
	}
	for dir, may := range allowed {
		if !pkgs[dir] {
			t.Errorf("architecture.md's package map lists %s/, which is not a Go package", dir)
			continue
		}
		if may == nil {
			continue
		}
		files, err := goFiles(dir, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		bad := map[string]bool{}
		for _, f := range files {
			for _, imp := range f.Imports {
				ip, _ := strconv.Unquote(imp.Path.Value)
				rel, ok := strings.CutPrefix(ip, "gorun/")
				if ok && !slices.Contains(may, rel) && !bad[rel] {
					bad[rel] = true
					t.Errorf("%s imports %s, which architecture.md's package map does not allow it (%v)", dir, rel, may)
				}
			}
		}
	}
	if len(allowed) < 20 {
		t.Errorf("the package map has %d rows", len(allowed))
	}
}

// TestPartitionHowto: every Python (Starlark) block of the partition
// how-to parses as gorun parses scripts; a block that opens with a
// "# NAME.star" line is that file, and each such file that calls train()
// is loaded through package script (load() finding the other blocks'
// files, then gorun's library), compiled for 1, 2 and 3 devices, and its
// partition strategy run through the engine's checks for two epochs.
func TestPartitionHowto(t *testing.T) {
	const name = "docs/howto/add-a-partition-strategy.md"
	var p *page
	for _, q := range pages(t) {
		if q.name == name {
			p = q
		}
	}
	if p == nil {
		t.Fatalf("no %s", name)
	}
	opts := &syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: true, Recursion: true}
	nameRE := regexp.MustCompile(`^#\s*([\w-]+\.star)\s*$`)
	fsys := fstest.MapFS{}
	var scriptNames []string
	for _, b := range p.blocks {
		if b.lang != "python" || len(b.lines) == 0 || strings.HasPrefix(strings.TrimSpace(b.lines[0]), "# from ") {
			continue
		}
		src := strings.Join(b.lines, "\n") + "\n"
		m := nameRE.FindStringSubmatch(strings.TrimSpace(b.lines[0]))
		file := "block"
		if m != nil {
			file = m[1]
		}
		if _, err := opts.Parse(file, src, 0); err != nil {
			t.Errorf("%s: the block does not parse (its lines count from the one after the fence): %v", p.at(b.line), err)
			continue
		}
		if m == nil {
			continue
		}
		fsys[m[1]] = &fstest.MapFile{Data: []byte(src)}
		if bytes.Contains([]byte(src), []byte("train(")) {
			scriptNames = append(scriptNames, m[1])
		}
	}
	if len(fsys) < 2 || len(scriptNames) == 0 {
		t.Fatalf("%s: %d Starlark files, %d of them training scripts; want a strategy's file and a script that loads it", name, len(fsys), len(scriptNames))
	}
	ds, err := datasets.Synthetic("train", 1000, []int{1, 28, 28}, 10, 0.1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, sn := range scriptNames {
		s, err := script.Load(sn, script.WithFileReader(fsys), script.WithLibrary(scripts.Library))
		if err != nil {
			t.Errorf("%s: %s: %v", name, sn, err)
			continue
		}
		if s.Partition == nil {
			t.Errorf("%s: %s has no partition strategy", name, sn)
			continue
		}
		for world := 1; world <= 3; world++ {
			c := engine.DefaultCluster()
			c.Devices = world
			plan, err := engine.Compile(s, c)
			if err != nil {
				t.Fatalf("%s: %s on %d devices: %v", name, sn, world, err)
			}
			for epoch := range 2 {
				shards, _, err := plan.Shards(epoch, ds)
				if err != nil {
					t.Errorf("%s: %s on %d devices, epoch %d: %v", name, sn, world, epoch, err)
				} else if len(shards) != world {
					t.Errorf("%s: %s on %d devices: %d shards", name, sn, world, len(shards))
				}
			}
		}
	}
}
