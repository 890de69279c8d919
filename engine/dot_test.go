package engine

import (
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestDot checks the Graphviz output: every step is a node, collectives
// follow the backward steps that fill their bucket and precede the
// optimizer steps that read it, and Graphviz itself accepts the file.
func TestDot(t *testing.T) {
	p := compile(t, loadSpec(t, mnistScript, "sync=sync.allreduce(bucket_mb=0.02)"), 2)
	var b bytes.Buffer
	if err := p.Dot(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	steps := len(p.Devices[0].Steps) + len(p.Devices[1].Steps)
	if n := strings.Count(out, "[label="); n != steps {
		t.Errorf("%d nodes for %d steps", n, steps)
	}
	// Find bucket 0's all-reduce on device 0 and check its neighbours.
	var coll string
	for i, st := range p.Devices[0].Steps {
		if st.Kind == CollectiveStep && st.Collective.Tag == "bucket 0" {
			coll = "d0s" + itoa(i)
		}
	}
	if !strings.Contains(out, "-> "+coll+";") || !strings.Contains(out, coll+" -> ") {
		t.Errorf("bucket 0's all-reduce (%s) has no edge in or out:\n%s", coll, out)
	}
	if !strings.Contains(out, "style=dashed") {
		t.Error("the ranks of a collective are not joined")
	}
	if _, err := exec.LookPath("dot"); err != nil {
		t.Skip("SKIP: Graphviz's dot not found (install graphviz) to check the file renders")
	}
	cmd := exec.Command("dot", "-Tsvg")
	cmd.Stdin = &b
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("dot rejects the plan: %v\n%.500s", err, msg)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
