package engine

import (
	"fmt"
	"io"

	"gorun/ops"
)

// Dot writes the Plan as a Graphviz digraph: one cluster per device with
// its memory, a node per step (ops as boxes, collectives as orange
// hexagons with their bytes per step, parameter buckets named), edges for
// the data each step reads from an earlier one, and dashed edges joining
// the ranks of each collective.
func (p *Plan) Dot(w io.Writer) error {
	ew := &errWriter{w: w}
	ew.printf("digraph plan {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n")
	ew.printf("  label=%q;\n", fmt.Sprintf("%s: %d devices, global batch %d, %d parameters", p.Spec.Script, p.World, p.Spec.BatchSize, p.NumParam))
	for _, prog := range p.Devices {
		ew.printf("  subgraph cluster_%d {\n    label=%q;\n", prog.Rank,
			fmt.Sprintf("device %d: batch %d, memory %s", prog.Rank, p.LocalBatch[prog.Rank], humanBytes(prog.MemoryBytes())))
		writer := map[*Buffer]string{} // the step that last wrote a buffer's memory
		for i, st := range prog.Steps {
			id := fmt.Sprintf("d%ds%d", prog.Rank, i)
			switch st.Kind {
			case CollectiveStep:
				c := st.Collective
				label := fmt.Sprintf("%s %s\n%s\n%s/step", c.Kind, c.OpName(), c.Tag, humanBytes(c.Bytes))
				if st.Every > 0 {
					label += fmt.Sprintf("\nevery %d steps", st.Every)
				}
				ew.printf("    %s [label=%q, shape=hexagon, style=filled, fillcolor=orange];\n", id, label)
				// It follows the steps that wrote its part of the arena, and
				// whatever reads that part next follows it.
				seen := map[string]bool{}
				for _, b := range prog.Buffers {
					rel := b.Offset - c.Buffer.Offset // b's place in the arena
					if b.View != c.Buffer || rel+b.Elems() <= c.Offset || rel >= c.Offset+c.Elems {
						continue
					}
					if src, ok := writer[b]; ok && !seen[src] {
						seen[src] = true
						ew.printf("    %s -> %s;\n", src, id)
					}
					writer[b] = id
				}
			default:
				fill := map[Phase]string{PhaseForward: "lightblue", PhaseBackward: "lightpink", PhaseUpdate: "palegreen"}[st.Phase]
				ew.printf("    %s [label=%q, shape=box, style=filled, fillcolor=%s];\n", id,
					fmt.Sprintf("%s\n%s\n%s", st.OpName(), dotShapes(st.Out), st.Layer), fill)
				seen := map[string]bool{}
				for _, b := range st.In {
					if b == nil {
						continue
					}
					if src, ok := writer[root(b)]; ok && !seen[src] {
						seen[src] = true
						ew.printf("    %s -> %s;\n", src, id)
					}
				}
				for _, b := range st.Out {
					writer[root(b)] = id
				}
				if st.Phase == PhaseUpdate && len(st.In) > 0 {
					writer[root(st.In[0])] = id // optimizers update their parameter in place
				}
			}
		}
		ew.printf("  }\n")
	}
	// Join the ranks of each collective.
	if len(p.Devices) > 1 {
		for i, st := range p.Devices[0].Steps {
			if st.Kind != CollectiveStep {
				continue
			}
			for _, prog := range p.Devices[1:] {
				for j, o := range prog.Steps {
					if o.Kind == CollectiveStep && o.Collective.Tag == st.Collective.Tag {
						ew.printf("  d0s%d -> d%ds%d [style=dashed, dir=both, color=orange, constraint=false];\n", i, prog.Rank, j)
					}
				}
			}
		}
	}
	ew.printf("}\n")
	return ew.err
}

// root is the buffer that owns b's memory: gradients and parameters are
// views of their arenas, but a step writes only its own slice, so a view
// of an arena is its own node in the data flow.
func root(b *Buffer) *Buffer {
	if b.View != nil && b.Value != nil && b.Value.Producer != nil && ops.Lookup(b.Value.Producer.Op).Alias {
		return root(b.View)
	}
	return b
}

func dotShapes(bs []*Buffer) string {
	if len(bs) == 0 {
		return "in place"
	}
	return shapes(bs)
}
