package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gorun/comm"
	"gorun/datasets"
	"gorun/engine/runner"
	"gorun/engine/spec"
)

// Several hosts need no shared filesystem: every process reads the data
// sets and the --resume checkpoint itself, from its own host's copy at
// the path the script and flags give, while only rank 0's process reads
// --init and writes the run folder. Copies that differ would train each
// rank on other data, or resume ranks from other states, silently; so at
// start the processes of a run that spans hosts compare their copies'
// sha256 with rank 0's, and a host whose copy differs or is missing is
// named before step 1 (checkCopies).

// hostCopy is one thing every host reads its own copy of: a data file or
// folder, or the --resume checkpoint.
type hostCopy struct {
	what string // "data.tensors file", "--resume checkpoint"
	path string
	// paths are the files read, in order (a folder's or a checkpoint's);
	// nil: path itself.
	paths []string
}

// hostCopies lists what each process of a run reads from its host's
// files: the training and evaluation data's files, and the newest complete
// checkpoint of resume (when given).
func hostCopies(s *spec.Spec, resume string) []hostCopy {
	var out []hostCopy
	for _, d := range []*spec.Data{&s.Data, s.Eval} {
		if d != nil {
			out = append(out, dataCopies(d)...)
		}
	}
	if resume != "" {
		c := hostCopy{what: "--resume checkpoint", path: resume}
		if ck, err := runner.NewestRunCheckpoint(resume); err == nil {
			c.path = ck.Name
			if st, err := os.Stat(ck.Name); err == nil && st.IsDir() {
				c.paths = folderFiles(ck.Name, nil)
			} else { // an earlier gorun's flat checkpoint: parameters and state
				c.paths = []string{ck.Name, strings.TrimSuffix(ck.Name, ".safetensors") + ".state.safetensors"}
			}
		}
		out = append(out, c)
	}
	return out
}

// dataCopies are the files a data set reads, as datasets.Load finds them.
func dataCopies(d *spec.Data) []hostCopy {
	what := "data." + d.Kind
	switch d.Kind {
	case "mnist", "fashion_mnist":
		dir := d.Dir
		if dir == "" && d.Kind == "mnist" {
			dir, _ = datasets.MNISTDefaultDir()
		} else if dir == "" {
			dir = datasets.FashionMNISTDir
		}
		prefix := map[string]string{"train": "train", "test": "t10k"}[d.Split]
		var out []hostCopy
		for _, kind := range []string{"images-idx3-ubyte", "labels-idx1-ubyte"} {
			out = append(out, hostCopy{what: what + " file", path: idxFile(dir, prefix, kind)})
		}
		return out
	case "tensors":
		if d.File != "" {
			return []hostCopy{{what: what + " file", path: d.File}}
		}
		return []hostCopy{{what: what + " x file", path: d.X}, {what: what + " y file", path: d.Y}}
	case "text":
		if st, err := os.Stat(d.File); err == nil && st.IsDir() {
			// datasets.ReadText: the folder's regular files, but fortune's
			// .dat indexes, in name order.
			return []hostCopy{{what: what + " folder", path: d.File, paths: folderFiles(d.File, func(name string) bool { return !strings.HasSuffix(name, ".dat") })}}
		}
		return []hostCopy{{what: what + " file", path: d.File}}
	case "images":
		// Every file of the tree: the class folders' images (and names).
		return []hostCopy{{what: what + " folder", path: d.Dir, paths: treeFiles(d.Dir)}}
	case "csv":
		out := []hostCopy{{what: what + " file", path: d.File}}
		if d.TestFile != "" {
			out = append(out, hostCopy{what: what + " test file", path: d.TestFile})
		}
		return out
	}
	return nil // synthetic: nothing read
}

// treeFiles are the regular files under dir, at any depth, in path order.
func treeFiles(dir string) []string {
	var out []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	if err != nil || len(out) == 0 {
		return []string{dir} // read as a file: the error says what is wrong
	}
	return out
}

// idxFile is the IDX file of an MNIST-layout data set that its reader
// picks in dir (datasets.MNIST: stem-kind or stem.kind, gzipped or not),
// or the first of those names when none is there.
func idxFile(dir, stem, kind string) string {
	dot := strings.Replace(kind, "-", ".", 1)
	cands := []string{stem + "-" + kind + ".gz", stem + "-" + kind, stem + "." + dot + ".gz", stem + "." + dot}
	for _, c := range cands {
		if st, err := os.Stat(filepath.Join(dir, c)); err == nil && st.Mode().IsRegular() {
			return filepath.Join(dir, c)
		}
	}
	return filepath.Join(dir, cands[0])
}

// folderFiles are the regular files of dir that keep accepts (nil: all),
// in name order.
func folderFiles(dir string, keep func(string) bool) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []string{dir} // read as a file: the error says what is wrong
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() && (keep == nil || keep(e.Name())) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(out)
	return out
}

// copyDigest is what a host holds of one hostCopy: its sha256 (of the
// file, or of each file's name and contents in order), or why it has none.
type copyDigest struct {
	sum     [sha256.Size]byte
	missing string // "" when read; else what went wrong ("no such file")
}

// digest reads a copy.
func (c hostCopy) digest() copyDigest {
	paths := c.paths
	if paths == nil {
		paths = []string{c.path}
	}
	h := sha256.New()
	for _, p := range paths {
		if len(paths) > 1 { // a folder's: its files' names count too
			rel, err := filepath.Rel(c.path, p)
			if err != nil || strings.HasPrefix(rel, "..") {
				rel = filepath.Base(p)
			}
			fmt.Fprintf(h, "%s\x00", rel)
		}
		fh, err := os.Open(p)
		if err != nil {
			why := err.Error()
			if errors.Is(err, fs.ErrNotExist) {
				why = "no such file"
			}
			return copyDigest{missing: why}
		}
		_, err = io.Copy(h, fh)
		fh.Close()
		if err != nil {
			return copyDigest{missing: err.Error()}
		}
	}
	var d copyDigest
	h.Sum(d.sum[:0])
	return d
}

// maxHostName is how much of a host's name travels between ranks.
const maxHostName = 64

// checkCopies compares, across the processes of a run, the copies each
// host reads (hostCopies) with rank 0's; host is this machine's name
// (os.Hostname). All ranks call it, in the same order of collectives,
// before training. On one host (every rank's machine has the same name)
// there is one copy and nothing is read. An
// error names the first rank whose copy differs or is missing, its host,
// the file and both hashes, on every rank alike. Lists that differ in
// their paths are left to the plan's fingerprint, which names the
// difference in the script or flags.
func checkCopies(m comm.Communicator, host string, copies []hostCopy) error {
	tag := comm.Tag{Name: "host copies"}
	n := m.Size()
	// Which machine each rank is on.
	names := make([]float32, n*maxHostName)
	mine := make([]float32, maxHostName)
	for i := 0; i < len(host) && i < maxHostName; i++ {
		mine[i] = float32(host[i])
	}
	if err := m.AllGather(mine, names, tag); err != nil {
		return fmt.Errorf("comparing the hosts' copies of the data: %w", err)
	}
	hostOf := func(r int) string {
		var b []byte
		for _, f := range names[r*maxHostName : (r+1)*maxHostName] {
			if f == 0 {
				break
			}
			b = append(b, byte(f))
		}
		return string(b)
	}
	oneHost := true
	for r := 1; r < n; r++ {
		oneHost = oneHost && hostOf(r) == hostOf(0)
	}
	if oneHost {
		return nil
	}
	// Rank 0's list: the paths' digest, then per copy a status and its
	// sha256, one byte a float.
	const per = 1 + sha256.Size
	pathSum := sha256.New()
	for _, c := range copies {
		fmt.Fprintf(pathSum, "%s\x00%s\x00", c.what, c.path)
	}
	digests := make([]copyDigest, len(copies))
	for i, c := range copies {
		digests[i] = c.digest()
	}
	head := make([]float32, 1+sha256.Size)
	head[0] = float32(len(copies))
	for i, b := range pathSum.Sum(nil) {
		head[1+i] = float32(b)
	}
	mineHead := slices.Clone(head)
	if err := m.Broadcast(head, 0, tag); err != nil {
		return fmt.Errorf("comparing the hosts' copies of the data: %w", err)
	}
	count := int(head[0])
	samePaths := slices.Equal(head, mineHead)
	theirs := make([]float32, count*per)
	if m.Rank() == 0 {
		for i, d := range digests {
			if d.missing != "" {
				theirs[i*per] = 1
			}
			for j, b := range d.sum {
				theirs[i*per+1+j] = float32(b)
			}
		}
	}
	if err := m.Broadcast(theirs, 0, tag); err != nil {
		return fmt.Errorf("comparing the hosts' copies of the data: %w", err)
	}
	// Each rank's verdict: the first copy that differs from rank 0's, and
	// its own status and hash there.
	verdict := make([]float32, 2+8)
	verdict[0] = -1
	if samePaths {
		for i, d := range digests {
			var sum0 [sha256.Size]byte
			for j := range sum0 {
				sum0[j] = byte(theirs[i*per+1+j])
			}
			missing0 := theirs[i*per] != 0
			if missing0 || d.missing == "" && d.sum == sum0 {
				continue // the same, or rank 0 lacks it too (the data's reader says so)
			}
			verdict[0] = float32(i)
			if d.missing != "" {
				verdict[1] = 1
			}
			for j := range 8 {
				verdict[2+j] = float32(d.sum[j])
			}
			break
		}
	}
	all := make([]float32, n*len(verdict))
	if err := m.AllGather(verdict, all, tag); err != nil {
		return fmt.Errorf("comparing the hosts' copies of the data: %w", err)
	}
	for r := 0; r < n; r++ {
		v := all[r*len(verdict) : (r+1)*len(verdict)]
		i := int(v[0])
		if i < 0 || i >= len(copies) {
			continue
		}
		c := copies[i]
		fix := "every host reads its own copy: make them the same (rsync or scp from rank 0's host), or put them on a filesystem every host shares"
		if v[1] != 0 {
			why := ""
			if r == m.Rank() {
				why = " (" + digests[i].missing + ")"
			}
			return fmt.Errorf("rank %d (host %s) has no %s %s%s, which rank 0 (host %s) has: %s", r, hostOf(r), c.what, c.path, why, hostOf(0), fix)
		}
		var there [8]byte
		for j := range there {
			there[j] = byte(v[2+j])
		}
		here := make([]byte, 8)
		for j := range here {
			here[j] = byte(theirs[i*per+1+j])
		}
		return fmt.Errorf("rank %d (host %s) has another %s %s than rank 0 (host %s): sha256 %x… there, %x… on rank 0's host; %s",
			r, hostOf(r), c.what, c.path, hostOf(0), there[:], here, fix)
	}
	return nil
}
