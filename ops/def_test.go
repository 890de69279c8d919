package ops

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestEveryOpConstantIsDefined parses the package's files and requires a
// Def for every Op constant they declare, and no Def without a constant:
// a new op's constant without its Def (or a family table left out of the
// registry) fails here.
func TestEveryOpConstantIsDefined(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	declared := map[Op]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Op" {
					continue
				}
				for i, n := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok {
						t.Errorf("%s: Op constant %s is not a string literal", name, n.Name)
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					declared[Op(v)] = n.Name + " (" + name + ")"
				}
			}
		}
	}
	if len(declared) < 2 {
		t.Fatalf("found %d Op constants: the parse went wrong", len(declared))
	}
	for op, where := range declared {
		if op != Invalid && Lookup(op) == nil {
			t.Errorf("op %s, declared as %s, has no Def in the registry", op, where)
		}
	}
	for _, op := range All() {
		if _, ok := declared[op]; !ok {
			t.Errorf("op %s has a Def but no constant", op)
		}
	}
}

// TestDefs checks every defined op's definition: a consistent signature,
// a shape rule for forward ops, a gradient rule or no differentiable
// output, both kernels, and flags that fit together.
func TestDefs(t *testing.T) {
	all := All()
	if !slices.IsSorted(all) || len(all) == 0 {
		t.Fatalf("All() = %v: want every op, sorted", all)
	}
	if Lookup(Invalid) != nil || Lookup("no_such_op") != nil || slices.Contains(all, Invalid) {
		t.Error("Invalid or an unknown op has a Def")
	}
	for _, op := range all {
		d := Lookup(op)
		if d == nil || d.Op != op {
			t.Errorf("%v: Lookup gives %v", op, d)
			continue
		}
		if d.Kernel32 == nil || d.Kernel64 == nil {
			t.Errorf("%v: missing a kernel (float32 %v, float64 %v)", op, d.Kernel32 != nil, d.Kernel64 != nil)
		}
		// Signature.
		if len(d.In) == 0 || d.MinIn() == 0 {
			t.Errorf("%v: no required input", op)
		}
		for i, in := range d.In {
			if in.Name == "" {
				t.Errorf("%v: input %d has no name", op, i)
			}
		}
		if d.InPlace != (len(d.Out) == 0) {
			t.Errorf("%v: InPlace %v with %d outputs", op, d.InPlace, len(d.Out))
		}
		for i, o := range d.Out {
			if o.Name == "" {
				t.Errorf("%v: output %d has no name", op, i)
			}
			if i == 0 && o.Optional || i > 0 && d.Out[i-1].Optional && !o.Optional {
				t.Errorf("%v: output %d: only outputs at the end, after the first, may be optional", op, i)
			}
		}
		// Rules and flags.
		differentiable := false
		for _, o := range d.Out {
			differentiable = differentiable || !o.Int && !o.NoGrad
		}
		switch {
		case d.Forward():
			if d.InPlace {
				t.Errorf("%v: a forward op that updates its inputs", op)
			}
			if d.Grad == nil && differentiable && !d.EvalOnly {
				t.Errorf("%v: a forward op with a differentiable output and no gradient rule", op)
			}
			if d.EvalOnly && d.Grad != nil {
				t.Errorf("%v: an evaluation op with a gradient rule", op)
			}
		default:
			if d.Grad != nil {
				t.Errorf("%v: a gradient rule without a shape rule", op)
			}
			if d.Random || d.EvalCopy || d.EvalOnly || d.Alias {
				t.Errorf("%v: Random, EvalCopy, EvalOnly and Alias are for forward ops", op)
			}
		}
		if (d.Alias || d.ReuseInput || d.EvalCopy) && len(d.Out) == 0 {
			t.Errorf("%v: Alias, ReuseInput and EvalCopy need an output 0", op)
		}
	}
}

// TestDefsAgreeWithFixtures compares the facts of the Defs with the
// gradient checks' own description of each op: which forward inputs and
// outputs hold indices, which outputs are batched, which kernels honour
// Attrs.Accumulate; and requires every shape rule to give one shape per
// output on the checks' inputs.
func TestDefsAgreeWithFixtures(t *testing.T) {
	for _, gc := range gradCases {
		out, err := Infer(gc.op, &gc.attrs, gc.in)
		if err != nil {
			t.Errorf("%s: %v", gc.name, err)
		} else if n := len(Lookup(gc.op).Out); len(out) != n {
			t.Errorf("%s: %d output shapes for %d outputs", gc.name, len(out), n)
		}
	}
	for _, op := range All() {
		d := Lookup(op)
		if got, want := d.Accumulates, accumulates(op) || isLoss(op); got != want {
			t.Errorf("%v: Accumulates %v, the fixtures say %v", op, got, want)
		}
		if !d.Forward() {
			continue
		}
		for i, in := range d.In {
			// Positions reads only its input's shape, of any element type.
			if op != Positions && in.Int != idxIn(op, i) {
				t.Errorf("%v: input %d Int %v, the fixtures say %v", op, i, in.Int, idxIn(op, i))
			}
		}
		for i, o := range d.Out {
			if o.Int != idxOut(op, i) {
				t.Errorf("%v: output %d Int %v, the fixtures say %v", op, i, o.Int, idxOut(op, i))
			}
			if o.Unbatched == batchedOut(op, i) {
				t.Errorf("%v: output %d Unbatched %v, the fixtures say batched %v", op, i, o.Unbatched, batchedOut(op, i))
			}
		}
	}
}

// TestReuseInput runs every op that may write output 0 over input 0
// (Def.ReuseInput) that way, on its gradient checks' buffers, in float32
// and float64, and requires the bits of the separate buffers.
func TestReuseInput(t *testing.T) {
	seen := map[Op]bool{}
	t.Run("float32", func(t *testing.T) { checkReuseInput(t, Kernels32, seen) })
	t.Run("float64", func(t *testing.T) { checkReuseInput(t, Kernels64, seen) })
	for _, op := range All() {
		if Lookup(op).ReuseInput && !seen[op] {
			t.Errorf("%v: ReuseInput is not checked", op)
		}
	}
}

func checkReuseInput[T Float](t *testing.T, k map[Op]Kernel[T], seen map[Op]bool) {
	// run calls kernel op on in and out, then on in and out with out[0]
	// a copy of in[0] given as both, and compares every output.
	run := func(name string, op Op, c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
		t.Helper()
		seen[op] = true
		rng := func() {
			if c.RNG != nil {
				c.RNG = rand.New(rand.NewPCG(11, 13))
			}
		}
		rng()
		k[op](c, a, in, out)
		want := make([][]T, len(out))
		for i, o := range out {
			want[i] = slices.Clone(o.Data[:o.Len()])
		}
		shared := &Buf[T]{Data: slices.Clone(in[0].Data), Shape: out[0].Shape}
		sin := append([]*Buf[T]{{Data: shared.Data, Shape: in[0].Shape}}, in[1:]...)
		sout := append([]*Buf[T]{shared}, out[1:]...)
		rng()
		k[op](c, a, sin, sout)
		for i, o := range sout {
			for j, v := range o.Data[:o.Len()] {
				if w := want[i][j]; math.Float64bits(float64(v)) != math.Float64bits(float64(w)) {
					t.Errorf("%s: %v output %d over input 0: element %d = %v, want %v", name, op, i, j, v, w)
					break
				}
			}
		}
	}
	for i := range gradCases {
		gc := &gradCases[i]
		f := newFixture(t, gc, k)
		if Lookup(gc.op).Random {
			f.c.RNG = rand.New(rand.NewPCG(11, 13))
		}
		f.forward()
		if Lookup(gc.op).ReuseInput {
			run(gc.name, gc.op, f.c, &gc.attrs, f.in, f.out)
		}
		for j := range gc.bwd {
			st := &gc.bwd[j]
			f.backward(j, &gc.attrs)
			if Lookup(st.op).ReuseInput {
				run(gc.name, st.op, f.c, st.attrsOr(&gc.attrs), f.bin[j], []*Buf[T]{f.bout[j]})
			}
		}
	}
}

// A fakeValue and a fakeNode make a graph for fakeGrad, the GradBuilder of
// TestGradRules.
type fakeValue struct {
	name      string
	shape     []int
	batched   bool
	needsGrad bool
	producer  *fakeNode
}

type fakeNode struct {
	op        Op
	attrs     Attrs
	in, out   []*fakeValue
	allReduce bool
}

type fakeGrad struct {
	attrs         Attrs
	in, out, dOut []*fakeValue
	nodes         []*fakeNode
}

func fv(v Value) *fakeValue {
	if v == nil {
		return nil
	}
	return v.(*fakeValue)
}

func asValue(v *fakeValue) Value {
	if v == nil {
		return nil
	}
	return v
}

func (g *fakeGrad) Attrs() Attrs { return g.attrs }
func (g *fakeGrad) In(i int) Value {
	if i < 0 || i >= len(g.in) {
		return nil
	}
	return asValue(g.in[i])
}
func (g *fakeGrad) Out(i int) Value         { return asValue(g.out[i]) }
func (g *fakeGrad) OutGrad(i int) Value     { return asValue(g.dOut[i]) }
func (g *fakeGrad) NeedsGrad(v Value) bool  { return fv(v) != nil && fv(v).needsGrad }
func (g *fakeGrad) Shape(v Value) []int     { return fv(v).shape }
func (g *fakeGrad) Name(v Value) string     { return fv(v).name }
func (g *fakeGrad) Batched(v Value) bool    { return fv(v).batched }
func (g *fakeGrad) AllReduced(v Value) bool { return fv(v).producer != nil && fv(v).producer.allReduce }
func (g *fakeGrad) AllReduce(v Value)       { fv(v).producer.allReduce = true }
func (g *fakeGrad) add(n *fakeNode, in []Value) {
	for _, v := range in {
		n.in = append(n.in, fv(v))
	}
	for _, v := range n.out {
		v.producer = n
	}
	g.nodes = append(g.nodes, n)
}
func (g *fakeGrad) Grad(op Op, a Attrs, wrt Value, in ...Value) Value {
	p := fv(wrt)
	v := &fakeValue{name: "grad " + p.name, shape: p.shape, batched: p.batched}
	g.add(&fakeNode{op: op, attrs: a, out: []*fakeValue{v}}, in)
	return v
}
func (g *fakeGrad) Grads(op Op, a Attrs, wrt []Value, in ...Value) []Value {
	n := &fakeNode{op: op, attrs: a}
	out := make([]Value, len(wrt))
	for i, w := range wrt {
		if p := fv(w); p != nil {
			v := &fakeValue{name: "grad " + p.name, shape: p.shape, batched: p.batched}
			n.out = append(n.out, v)
			out[i] = v
		}
	}
	g.add(n, in)
	return out
}
func (g *fakeGrad) Temp(op Op, a Attrs, name string, shape []int, batched bool, in ...Value) Value {
	v := &fakeValue{name: name, shape: shape, batched: batched}
	g.add(&fakeNode{op: op, attrs: a, out: []*fakeValue{v}}, in)
	return v
}

// TestGradRules runs the gradient rule of every gradient check's forward
// op against a recording GradBuilder, with the inputs that check
// differentiates needing a gradient (and again without input 0, a first
// layer), and requires a gradient of the input's shape for each of them,
// and backward nodes of defined ops whose inputs and outputs fit their
// signatures.
func TestGradRules(t *testing.T) {
	seen := map[Op]bool{}
	for i := range gradCases {
		gc := &gradCases[i]
		d := Lookup(gc.op)
		if d.Grad == nil {
			continue
		}
		var wrt []int
		for _, st := range gc.bwd {
			if st.tmp == nil && !slices.Contains(wrt, st.wrt) {
				wrt = append(wrt, st.wrt)
			}
		}
		variants := [][]int{wrt}
		if len(wrt) > 1 && slices.Contains(wrt, 0) {
			variants = append(variants, slices.DeleteFunc(slices.Clone(wrt), func(i int) bool { return i == 0 }))
		}
		for _, need := range variants {
			seen[gc.op] = true
			checkGradRule(t, gc, d, need)
		}
	}
	for _, op := range All() {
		if d := Lookup(op); d.Grad != nil && !seen[op] {
			t.Errorf("%v: its gradient rule is not checked", op)
		}
	}
}

func checkGradRule(t *testing.T, gc *gradCase, d *Def, need []int) {
	t.Helper()
	outShapes, err := Infer(gc.op, &gc.attrs, gc.in)
	if err != nil {
		t.Fatalf("%s: %v", gc.name, err)
	}
	g := &fakeGrad{attrs: gc.attrs}
	for i, s := range gc.in {
		var v *fakeValue
		if s != nil {
			v = &fakeValue{name: "in" + strconv.Itoa(i), shape: s, batched: batchedIn(gc.op, i), needsGrad: slices.Contains(need, i)}
		}
		g.in = append(g.in, v)
	}
	for i, s := range outShapes {
		g.out = append(g.out, &fakeValue{name: "out" + strconv.Itoa(i), shape: s, batched: batchedOut(gc.op, i)})
		var dy *fakeValue
		if i == 0 {
			dy = &fakeValue{name: "dy", shape: s, batched: batchedOut(gc.op, 0)}
		}
		g.dOut = append(g.dOut, dy)
	}
	grads := d.Grad(g)
	name := fmt.Sprintf("%s (inputs %v need gradients)", gc.name, need)
	for i := len(gc.in); i < len(grads); i++ {
		if grads[i] != nil {
			t.Errorf("%s: a gradient for input %d of %d", name, i, len(gc.in))
		}
	}
	for _, i := range need {
		if i >= len(grads) || grads[i] == nil {
			t.Errorf("%s: no gradient for input %d", name, i)
			continue
		}
		if got := fv(grads[i]).shape; !slices.Equal(got, gc.in[i]) {
			t.Errorf("%s: gradient of input %d has shape %v, want %v", name, i, got, gc.in[i])
		}
	}
	for _, n := range g.nodes {
		bd := Lookup(n.op)
		if bd == nil {
			t.Errorf("%s: backward node of unknown op %q", name, string(n.op))
			continue
		}
		if len(n.in) < bd.MinIn() || len(n.in) > len(bd.In) {
			t.Errorf("%s: %v node with %d inputs, want %d to %d", name, n.op, len(n.in), bd.MinIn(), len(bd.In))
		}
		for i, v := range n.in {
			if v == nil && i < len(bd.In) && !bd.In[i].Optional {
				t.Errorf("%s: %v node without its input %d (%s)", name, n.op, i, bd.In[i].Name)
			}
		}
		required := 0
		for _, o := range bd.Out {
			if !o.Optional {
				required++
			}
		}
		if len(n.out) < required || len(n.out) > len(bd.Out) {
			t.Errorf("%s: %v node with %d outputs, want %d to %d", name, n.op, len(n.out), required, len(bd.Out))
		}
	}
}
