package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gorun/engine/spec"
	"gorun/ops"
)

// TestSyncStrategies: every sync.* kind has a strategy, and each answers
// the runner's questions as its file documents, on one device and on
// three.
func TestSyncStrategies(t *testing.T) {
	for _, c := range []struct {
		set        string
		kind       spec.SyncKind
		describe   string
		scale3     float64 // LossScale on 3 devices
		local3     bool    // LocalLoss and OwnParams on 3 devices
		shared3    bool    // SharedGradients on 3 devices
		overlap    bool
		shareState bool
		state3     []int // StateRanks on 3 devices
		updaters   []int // the ranks (of 3) that run the optimizer
	}{
		{"sync.allreduce()", spec.SyncAllReduce, "allreduce(op=mean, bucket_mb=25, overlap=true)", 1, false, true, true, true, []int{0}, []int{0, 1, 2}},
		{"sync.allreduce(op='sum', overlap=False)", spec.SyncAllReduce, "allreduce(op=sum, bucket_mb=25, overlap=false)", 3, false, true, false, true, []int{0}, []int{0, 1, 2}},
		{"sync.parameter_server(root=2)", spec.SyncParameterServer, "parameter_server(root=2)", 1, false, true, false, false, []int{2}, []int{2}},
		{"sync.local_sgd(every=4)", spec.SyncLocalSGD, "local_sgd(every=4)", 1, true, false, false, true, []int{0, 1, 2}, []int{0, 1, 2}},
		{"sync.none()", spec.SyncNone, "none", 1, true, false, false, true, []int{0, 1, 2}, []int{0, 1, 2}},
		{"sync.zero(stage=1)", spec.SyncZero, "zero(stage=1, bucket_mb=25, overlap=true)", 1, false, true, true, false, []int{0, 1, 2}, []int{0, 1, 2}},
		{"sync.zero(stage=2, overlap=False)", spec.SyncZero, "zero(stage=2, bucket_mb=25, overlap=false [buckets of at most 16000 values: a quarter of a rank's shard or the largest gradient])", 1, false, true, false, false, []int{0, 1, 2}, []int{0, 1, 2}},
		{"sync.fsdp(prefetch=2)", spec.SyncZero, "zero(stage=3, bucket_mb=25, overlap=true, prefetch=2)", 1, false, true, true, false, []int{0, 1, 2}, []int{0, 1, 2}},
	} {
		p := compile(t, loadSpec(t, mnistScript, "sync="+c.set), 3)
		s := p.Sync
		if s.Kind() != c.kind || s.Describe(p) != c.describe {
			t.Errorf("%s: kind %s, described %q; want %s, %q", c.set, s.Kind(), s.Describe(p), c.kind, c.describe)
		}
		if s.LossScale() != c.scale3 || s.LocalLoss() != c.local3 || s.OwnParams() != c.local3 || s.SharedGradients() != c.shared3 ||
			s.Overlap() != c.overlap || s.ShareState() != c.shareState || !slices.Equal(s.StateRanks(), c.state3) {
			t.Errorf("%s on 3 devices: scale %g, local loss %v, own params %v, shared gradients %v, overlap %v, share state %v, state ranks %v",
				c.set, s.LossScale(), s.LocalLoss(), s.OwnParams(), s.SharedGradients(), s.Overlap(), s.ShareState(), s.StateRanks())
		}
		var updaters []int
		for _, prog := range p.Devices {
			if slices.ContainsFunc(prog.Steps, func(st *Step) bool { return st.Op == ops.SGDStep }) {
				updaters = append(updaters, prog.Rank)
			}
		}
		if !slices.Equal(updaters, c.updaters) {
			t.Errorf("%s: ranks %v run the optimizer, want %v", c.set, updaters, c.updaters)
		}
		if err := s.Resumes(c.kind, 3); err != nil {
			t.Errorf("%s refuses its own checkpoints: %v", c.set, err)
		}
		// Another device count: allreduce's and a parameter server's
		// state is rank 0's (the root's), every rank's the same; sync
		// none's and local SGD's is every rank's own.
		err := s.Resumes(c.kind, 2)
		if own := c.kind == spec.SyncNone || c.kind == spec.SyncLocalSGD; own != (err != nil) ||
			own && !strings.Contains(err.Error(), "the checkpoint was made with 2 devices, this run has 3: under sync "+string(c.kind)) {
			t.Errorf("%s on 3 devices resuming its own checkpoint of 2: %v", c.set, err)
		}
		other := spec.SyncNone
		if c.kind == other {
			other = spec.SyncAllReduce
		}
		if err := s.Resumes(other, 3); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("made with sync %s, the script now says %s", other, c.kind)) {
			t.Errorf("%s resumes a checkpoint of sync %s: %v", c.set, other, err)
		}

		// One device: nothing is shared, and no collective is placed.
		if c.kind == spec.SyncParameterServer {
			continue // root 2 is not a rank of one device
		}
		one := compile(t, loadSpec(t, mnistScript, "sync="+c.set), 1)
		s = one.Sync
		if s.LossScale() != 1 || s.LocalLoss() || s.OwnParams() || s.SharedGradients() || !slices.Equal(s.StateRanks(), []int{0}) {
			t.Errorf("%s on 1 device: scale %g, local loss %v, own params %v, shared gradients %v, state ranks %v",
				c.set, s.LossScale(), s.LocalLoss(), s.OwnParams(), s.SharedGradients(), s.StateRanks())
		}
		for _, st := range one.Devices[0].Steps {
			if st.Kind == CollectiveStep {
				t.Errorf("%s on 1 device: a collective %s %s", c.set, st.Collective, st.Layer)
			}
		}
	}
	// A kind no strategy registered is refused at compile time.
	s := loadSpec(t, mnistScript)
	s.Sync.Kind = "gossip"
	if _, err := Compile(s, DefaultCluster()); err == nil || !strings.Contains(err.Error(), `unknown sync strategy "gossip" (gorun has allreduce, local_sgd, none, parameter_server, zero)`) {
		t.Errorf("unknown sync kind: %v", err)
	}
}

// TestNoSyncKindOutsideTheStrategies: the sync kinds are named only where
// a script builds them (script/, spec) and in the strategies' own files
// (engine/sync_*.go); the compiler, the runner and the backends ask the
// strategy instead.
func TestNoSyncKindOutsideTheStrategies(t *testing.T) {
	kinds := regexp.MustCompile(`\bspec\.Sync(AllReduce|ParameterServer|LocalSGD|None|Zero)\b|\.Sync\.Kind([^(\w]|$)`)
	root := ".."
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "script" || rel == "engine/spec" || rel != "." && strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			(filepath.Dir(rel) == "engine" && strings.HasPrefix(d.Name(), "sync")) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if kinds.MatchString(line) {
				t.Errorf("%s:%d names a sync kind outside the strategies: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
