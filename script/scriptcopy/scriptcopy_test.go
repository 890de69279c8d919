package scriptcopy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorun/script"
)

// writeCopy writes a copy of files (path → text; main is the script)
// into dir, with its manifest, as cmd/gorun lays it out.
func writeCopy(t *testing.T, dir string, main string, files map[string]string) {
	t.Helper()
	m := Manifest{Script: main, SearchPath: []string{}}
	for _, p := range append([]string{main}, otherKeys(files, main)...) {
		rel, err := filepath.Rel(filepath.Dir(main), p)
		if err != nil {
			t.Fatal(err)
		}
		data := []byte(files[p])
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, rel), data, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		m.Files = append(m.Files, File{Path: p, Copy: filepath.ToSlash(rel), SHA256: hex.EncodeToString(sum[:])})
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func otherKeys(files map[string]string, not string) []string {
	var out []string
	for p := range files {
		if p != not {
			out = append(out, p)
		}
	}
	return out
}

// TestReadEvaluatesTheCopy: a copy whose originals are gone evaluates as
// they did, its load() served from the copy; a changed copy is refused.
func TestReadEvaluatesTheCopy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), Dir)
	const main = "/gone/train.star"
	writeCopy(t, dir, main, map[string]string{
		main:                   `load("lib/width.star", "W")` + "\n" + `train(model = nn.linear(4, W, name = "fc"), loss = "cross_entropy", data = data.synthetic(size = 8, shape = (4,), classes = W), optimizer = optim.sgd(lr = 0.1), batch_size = 4, epochs = 1)`,
		"/gone/lib/width.star": "W = 3\n",
	})
	m, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := script.Load(m.Script, m.LoadOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	if s.Data.Classes != 3 {
		t.Errorf("classes %d: the loaded W = 3 did not reach the script", s.Data.Classes)
	}
	if got := m.ChangedSince(); len(got) != 2 || !strings.HasSuffix(got[0], "(removed)") {
		t.Errorf("ChangedSince = %v, want both originals removed", got)
	}
	os.WriteFile(filepath.Join(dir, "lib", "width.star"), []byte("W = 4\n"), 0o644)
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "the copy was changed") {
		t.Errorf("a changed copy: %v", err)
	}
}
