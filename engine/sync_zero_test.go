package engine

import (
	"fmt"
	"strings"
	"testing"
)

// TestZeroPlan: a sharded plan's buckets split into one block per rank,
// its pieces of the parameters cover every parameter once across the
// ranks, and `gorun plan` sets its memory and traffic beside plain
// allreduce's (stage 3 sending 1.5× what allreduce sends, but the first
// layer's weights, which no backward step reads); plans of the other
// strategies say nothing of it.
func TestZeroPlan(t *testing.T) {
	for _, c := range []struct {
		sync    string
		devices int
		ratio   string
	}{
		{"sync.zero(stage=1)", 3, "zero stage 1 sends 1.00× what allreduce sends"},
		{"sync.zero(stage=2)", 4, "zero stage 2 sends 1.00× what allreduce sends"},
		{"sync.fsdp()", 3, "zero stage 3 sends 1.49× what allreduce sends"},
	} {
		p := compile(t, loadSpec(t, mnistScript, "sync="+c.sync), c.devices)
		sh := p.Sharding
		if sh == nil || sh.World != c.devices || sh.FlatElems != sh.ShardElems*c.devices || sh.FlatElems-p.NumParam >= len(p.Buckets)*c.devices {
			t.Fatalf("%s on %d: sharding %+v for %d parameters", c.sync, c.devices, sh, p.NumParam)
		}
		for bi, b := range p.Buckets {
			if (b.Elems+b.Pad)%c.devices != 0 || b.Block*c.devices != b.Elems+b.Pad || b.Pad >= c.devices {
				t.Errorf("%s: bucket %d: %d values, padding %d, blocks of %d", c.sync, bi, b.Elems, b.Pad, b.Block)
			}
		}
		for i, prm := range p.Graph.Params {
			covered := 0
			for r := 0; r < c.devices; r++ {
				lo, hi, at := p.Piece(i, r)
				if lo > hi || at < 0 || at+hi-lo > sh.ShardElems {
					t.Errorf("%s: rank %d's piece of %s: [%d:%d] at %d", c.sync, r, prm.Name, lo, hi, at)
				}
				covered += hi - lo
			}
			if covered != prm.Value.Elems() {
				t.Errorf("%s: the ranks' pieces of %s cover %d of its %d values", c.sync, prm.Name, covered, prm.Value.Elems())
			}
		}
		var b strings.Builder
		if err := p.Describe(&b); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		var squeezed []string // the lines with single spaces
		for _, line := range strings.Split(out, "\n") {
			squeezed = append(squeezed, strings.Join(strings.Fields(line), " "))
		}
		m := p.Devices[0].Memory()
		row := fmt.Sprintf("0 zero stage %d %s %s %s %s", sh.Stage, humanBytes(m.Params), humanBytes(m.Grads), humanBytes(m.State), humanBytes(m.Params+m.Grads+m.State))
		out = strings.Join(squeezed, "\n")
		for _, want := range []string{fmt.Sprintf("sharding (stage %d)", sh.Stage), "memory per device, by what it holds, beside plain allreduce:", row, c.ratio} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: gorun plan lacks %q:\n%s", c.sync, want, out[:min(len(out), 3000)])
			}
		}
		if m.Total() != p.Devices[0].MemoryBytes() {
			t.Errorf("%s: memory by kind adds up to %d, the arena is %d", c.sync, m.Total(), p.Devices[0].MemoryBytes())
		}
	}
	var b strings.Builder
	if err := compile(t, loadSpec(t, mnistScript), 2).Describe(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "sharding") || strings.Contains(b.String(), "beside plain allreduce") {
		t.Error("an allreduce plan describes sharding")
	}
}
