package script

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorun/engine/spec"
)

// Tests for issue 29 (hostile input, round two): load() and --set.

// TestLoadConfined: load() reads only .star files under its roots. An
// absolute path, a path through "..", and a file that is not a .star file
// are refused before anything is read, and no error shows a word of the
// file (before, load("secret.txt") failed with "undefined: hunter2", and an
// absolute path read any file, /proc/self/environ included).
func TestLoadConfined(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "w")
	other := filepath.Join(root, "other")
	for _, d := range []string{dir, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "hunter2"
	for _, p := range []string{filepath.Join(dir, "secret.txt"), filepath.Join(other, "secret.star"), filepath.Join(dir, "secret")} {
		if err := os.WriteFile(p, []byte(secret+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct{ module, want string }{
		{"secret.txt", `load("secret.txt"): not a .star file; load() reads .star files from the loading script's folder, the GORUN_PATH folders and the library shipped with gorun`},
		{"secret", `load("secret"): not a .star file`},
		{filepath.Join(other, "secret.star"), `: an absolute path; load() reads .star files from the loading script's folder, the GORUN_PATH folders and the library shipped with gorun: give the path from one of them`},
		{"/proc/self/environ", `load("/proc/self/environ"): an absolute path`},
		{"../other/secret.star", `load("../other/secret.star"): the path leaves its folder (through "..")`},
		{"", `load(""): an empty path`},
	}
	for _, c := range cases {
		script := filepath.Join(dir, "train.star")
		src := "load(" + strQuote(c.module) + ", \"x\")\n"
		if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		// GORUN_PATH holds the folder with secret.star: it may be loaded
		// by its name, never by its absolute path.
		_, err := Load(script, WithSearchPath(other))
		if err == nil {
			t.Errorf("load(%q): no error", c.module)
			continue
		}
		got := errorText(err)
		if !strings.Contains(got, c.want) || strings.Contains(got, secret) {
			t.Errorf("load(%q):\n%s\nwant %q and not %q", c.module, got, c.want, secret)
		}
	}
	// By its name, from GORUN_PATH, secret.star is a script like any other
	// (its errors may name what it holds: it is Starlark).
	os.WriteFile(filepath.Join(other, "secret.star"), []byte("x = 1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "train.star"), []byte("load(\"./secret.star\", \"x\")\n"+`train(model = nn.linear(784, 10), loss = "nll", data = data.mnist(), optimizer = optim.sgd(lr = 0.1))`), 0o644)
	if _, err := Load(filepath.Join(dir, "train.star"), WithSearchPath(other)); err != nil {
		t.Errorf("load(\"./secret.star\") from GORUN_PATH: %v", errorText(err))
	}
}

func strQuote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// TestSetSeesLoadedNames: a --set expression sees the names the script
// load()ed, as it sees those the script defines (before: "undefined:
// net").
func TestSetSeesLoadedNames(t *testing.T) {
	fs := memFS{
		"/w/train.star": `load("lib.star", "net", width = "hidden")
train(model = net(width), loss = "nll", data = data.mnist(), optimizer = optim.sgd(lr = 0.1))`,
		"/w/lib.star": `hidden = 32
def net(n):
    return nn.sequential(nn.flatten(), nn.linear(784, n, name = "fc1"), nn.relu(), nn.linear(n, 10, name = "fc2"))`,
	}
	o, err := ParseOverride("model=net(width * 2)")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Load("/w/train.star", WithFileReader(fs), WithOverrides(o))
	if err != nil {
		t.Fatal(errorText(err))
	}
	var widths []int
	var walk func(l *spec.Layer)
	walk = func(l *spec.Layer) {
		if l.Name == "fc1" {
			widths = append(widths, l.Out)
		}
		for _, c := range l.Layers {
			walk(c)
		}
	}
	for _, n := range s.Model.Nodes {
		walk(n.Layer)
	}
	if len(widths) != 1 || widths[0] != 64 {
		t.Errorf("fc1 widths %v, want [64] (net(width * 2) with width = 32 loaded as an alias)", widths)
	}
}
