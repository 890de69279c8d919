package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gorun/comm"
	"gorun/engine/spec"
)

// runCopies runs checkCopies on 3 in-process ranks, rank r on host
// hosts[r] reading its copy from files[r] (each rank's copy of the same
// path, as on hosts without a shared filesystem); it returns each rank's
// error.
func runCopies(t *testing.T, hosts []string, paths []string, files []string) []error {
	t.Helper()
	g, err := comm.NewInProc(len(hosts), comm.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for r := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := []hostCopy{{what: "data.tensors file", path: paths[r], paths: []string{files[r]}}}
			errs[r] = checkCopies(g.Rank(r), hosts[r], c)
		}()
	}
	wg.Wait()
	return errs
}

// TestCheckCopies: ranks on several hosts compare their copies of the
// data with rank 0's; a host whose copy differs or is missing is named on
// every rank, with the file and the hashes.
func TestCheckCopies(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, a2, b := write("a", "the data"), write("a2", "the data"), write("b", "other data")
	gone := filepath.Join(dir, "gone")
	hosts := []string{"h1", "h2", "h3"}
	same := []string{"/data/x.safetensors", "/data/x.safetensors", "/data/x.safetensors"}
	for r, err := range runCopies(t, hosts, same, []string{a, a2, a}) {
		if err != nil {
			t.Errorf("the same copies: rank %d: %v", r, err)
		}
	}
	for r, err := range runCopies(t, hosts, same, []string{a, a2, b}) {
		want := "rank 2 (host h3) has another data.tensors file /data/x.safetensors than rank 0 (host h1): sha256 "
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "… on rank 0's host; every host reads its own copy") {
			t.Errorf("a copy that differs: rank %d: %v", r, err)
		}
	}
	for r, err := range runCopies(t, hosts, same, []string{a, gone, b}) {
		want := "rank 1 (host h2) has no data.tensors file /data/x.safetensors"
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "which rank 0 (host h1) has") {
			t.Errorf("a missing copy: rank %d: %v", r, err)
		}
		if r == 1 && !strings.Contains(err.Error(), "(no such file)") {
			t.Errorf("rank 1 does not say why: %v", err)
		}
	}
	// Rank 0 lacks it too: the data's reader says so, on every host.
	for r, err := range runCopies(t, hosts, same, []string{gone, gone, b}) {
		if err != nil {
			t.Errorf("missing on rank 0: rank %d: %v", r, err)
		}
	}
	// One machine: one copy, nothing compared.
	for r, err := range runCopies(t, []string{"h", "h", "h"}, same, []string{a, gone, b}) {
		if err != nil {
			t.Errorf("one host: rank %d: %v", r, err)
		}
	}
	// Another path on some rank: the plan's fingerprint names that.
	for r, err := range runCopies(t, hosts, []string{"/data/x", "/data/y", "/data/x"}, []string{a, b, a}) {
		if err != nil {
			t.Errorf("other paths: rank %d: %v", r, err)
		}
	}
}

// TestHostCopies: the files of each data kind and the newest checkpoint
// of --resume are what each host must hold.
func TestHostCopies(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.txt", "a.txt", "x.dat"} {
		os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644)
	}
	s := &spec.Spec{
		Data: spec.Data{Kind: "mnist", Split: "train"},
		Eval: &spec.Data{Kind: "text", File: dir},
	}
	got := hostCopies(s, "")
	if len(got) != 3 || !strings.HasSuffix(got[0].path, "train-images-idx3-ubyte.gz") || !strings.HasSuffix(got[1].path, "train-labels-idx1-ubyte.gz") {
		t.Fatalf("mnist: %+v", got)
	}
	if d := got[0].digest(); d.missing != "" {
		t.Errorf("the MNIST file that ships with GoMNIST: %s", d.missing)
	}
	if got[2].what != "data.text folder" || len(got[2].paths) != 2 || filepath.Base(got[2].paths[0]) != "a.txt" {
		t.Errorf("text folder: %+v", got[2])
	}
	// An image tree, every file at any depth; a CSV table and its test file.
	for _, n := range []string{"cat/1.png", "dog/2.png", "dog/sub/3.png"} {
		os.MkdirAll(filepath.Join(dir, "img", filepath.Dir(n)), 0o755)
		os.WriteFile(filepath.Join(dir, "img", n), []byte(n), 0o644)
	}
	s = &spec.Spec{Data: spec.Data{Kind: "images", Dir: filepath.Join(dir, "img")}, Eval: &spec.Data{Kind: "csv", File: "t.csv", TestFile: "u.csv"}}
	got = hostCopies(s, "")
	if len(got) != 3 || len(got[0].paths) != 3 || !strings.HasSuffix(got[0].paths[2], "dog/sub/3.png") || got[2].path != "u.csv" {
		t.Errorf("images and csv: %+v", got)
	}
	before := got[0].digest()
	os.Rename(filepath.Join(dir, "img", "dog", "2.png"), filepath.Join(dir, "img", "cat", "2.png")) // same bytes, another class
	if after := hostCopies(s, "")[0].digest(); after.sum == before.sum {
		t.Error("an image moved to another class folder leaves the folder's digest unchanged")
	}
	s = &spec.Spec{Data: spec.Data{Kind: "tensors", X: "x.npy", Y: "y.npy"}, Eval: &spec.Data{Kind: "synthetic"}}
	if got := hostCopies(s, filepath.Join(dir, "norun")); len(got) != 3 || got[0].path != "x.npy" || got[1].path != "y.npy" || got[2].what != "--resume checkpoint" {
		t.Errorf("tensors and resume: %+v", got)
	} else if d := got[2].digest(); d.missing == "" {
		t.Errorf("a --resume folder without checkpoints has a digest")
	}
	// A run's newest checkpoint: its folder's files.
	out := filepath.Join(t.TempDir(), "run")
	if code, _, stderr := gorun(t, writeScript(t, small), "--set", "epochs=1", "--out", out, "-q"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got = hostCopies(s, out)
	if c := got[2]; len(c.paths) != 2 || !strings.HasSuffix(c.paths[0], "/model.safetensors") || !strings.HasSuffix(c.paths[1], "/state.safetensors") {
		t.Errorf("resume: %+v", c)
	} else if d := c.digest(); d.missing != "" {
		t.Errorf("resume: %s", d.missing)
	}
}
