package engine

import (
	"bytes"
	"strings"
	"testing"
)

// TestDescribeNCCLWorld: the plan of a multi-process cluster whose
// transport comes with its backend (nccl) says its collectives run in one
// communicator over every device of every process, not in memory first
// then across processes as over MPI.
func TestDescribeNCCLWorld(t *testing.T) {
	s := loadSpec(t, mnistScript)
	for _, tc := range []struct {
		backend, transport string
		want, not          []string
	}{
		{"cuda", "nccl", []string{
			"processes 2 × 2 devices; this plan shows process 1 (ranks 2–3): collectives run in one nccl communicator over every device of every process, one rank a device",
			"in one nccl communicator over the 4 devices of the 2 processes"}, []string{"reduce in memory"}},
		{"cuda", "mpi", []string{"collectives reduce in memory inside a process, then once across processes (mpi)"}, []string{"nccl communicator"}},
	} {
		c := DefaultCluster()
		c.Backend, c.Transport, c.Devices, c.Processes = tc.backend, tc.transport, 2, 2
		p, err := CompileProcess(s, c, 1)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := p.Describe(&b); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: plan lacks %q:\n%s", tc.transport, w, out)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(out, w) {
				t.Errorf("%s: plan says %q", tc.transport, w)
			}
		}
	}
}
