package ops

import (
	"math/rand/v2"
	"testing"
)

func TestKernelTablesComplete(t *testing.T) {
	for _, op := range All() {
		if Kernels32[op] == nil || Kernels64[op] == nil {
			t.Errorf("%v has no kernel", op)
		}
	}
	if len(Kernels32) != len(All()) || len(Kernels64) != len(All()) {
		t.Errorf("%d float32 and %d float64 kernels for %d ops", len(Kernels32), len(Kernels64), len(All()))
	}
	if Kernels32[Invalid] != nil || Kernels64[Invalid] != nil {
		t.Error("Invalid has a kernel")
	}
}

// TestKernelsDoNotAllocate makes one representative call of every kernel,
// in float32 and float64, and requires no allocation.
func TestKernelsDoNotAllocate(t *testing.T) {
	seen := map[Op]bool{}
	allocs32 := checkAllocs(t, Kernels32, seen)
	allocs64 := checkAllocs(t, Kernels64, seen)
	for _, op := range All() {
		if !seen[op] {
			t.Errorf("%v: no allocation check", op)
		}
	}
	for _, a := range append(allocs32, allocs64...) {
		t.Error(a)
	}
}

func checkAllocs[T Float](t *testing.T, k map[Op]Kernel[T], seen map[Op]bool) []string {
	var bad []string
	measure := func(name string, op Op, c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
		seen[op] = true
		if n := testing.AllocsPerRun(3, func() { k[op](c, a, in, out) }); n != 0 {
			bad = append(bad, name+": "+op.String()+" allocates")
		}
	}
	for i := range gradCases {
		gc := &gradCases[i]
		f := newFixture(t, gc, k)
		f.c.RNG = rand.New(rand.NewPCG(1, 1))
		for j, d := range gc.derive {
			measure(gc.name, d.op, f.c, &gc.attrs, f.din[j], []*Buf[T]{f.in[d.in]})
		}
		measure(gc.name, gc.op, f.c, &gc.attrs, f.in, f.out)
		for j, st := range gc.bwd {
			measure(gc.name, st.op, f.c, st.attrsOr(&gc.attrs), f.bin[j], []*Buf[T]{f.bout[j]})
		}
	}
	buf := func(n int) *Buf[T] { return &Buf[T]{Shape: []int{n}, Data: make([]T, n)} }
	p, g, s1, s2 := buf(100), buf(100), buf(100), buf(100)
	c := &Ctx[T]{Step: 2}
	save := &Buf[T]{Shape: []int{3, 20}, Data: make([]T, 60)}
	for i := range save.Data {
		save.Data[i] = 5
	}
	measure("batch_norm_running", BatchNormRunning, c, &Attrs{BNMomentum: 0.1}, []*Buf[T]{save, buf(20), buf(20), buf(1)}, nil)
	measure("sgd", SGDStep, c, &Attrs{LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 0.1}, []*Buf[T]{p, g, s1}, nil)
	measure("adam", AdamStep, c, &Attrs{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1}, []*Buf[T]{p, g, s1, s2}, nil)
	measure("adamw", AdamWStep, c, &Attrs{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1}, []*Buf[T]{p, g, s1, s2}, nil)
	measure("clip", ClipGradNorm, c, &Attrs{MaxNorm: 1}, []*Buf[T]{g}, nil)
	measure("norm_sq", GradNormSq, c, &Attrs{}, []*Buf[T]{g, buf(1)}, nil)
	logits, tgt := &Buf[T]{Shape: []int{4, 5}, Data: make([]T, 20)}, &Buf[T]{Shape: []int{4}, Idx: []int32{0, 4, 2, -100}}
	c.Work = make([]T, 8)
	measure("cross_entropy_fused", CrossEntropyFused, c, &Attrs{LabelSmoothing: 0.1, HasIgnore: true, IgnoreIndex: -100},
		[]*Buf[T]{logits, tgt, buf(1)}, []*Buf[T]{buf(1), &Buf[T]{Shape: []int{4, 5}, Data: make([]T, 20)}})
	dyl, wl, prel := &Buf[T]{Shape: []int{4, 3}, Data: make([]T, 12)}, &Buf[T]{Shape: []int{3, 5}, Data: make([]T, 15)}, &Buf[T]{Shape: []int{4, 5}, Data: make([]T, 20)}
	measure("linear_grad_input_gelu", LinearGradInputGELU, c, &Attrs{Approximate: true}, []*Buf[T]{dyl, wl, prel}, []*Buf[T]{{Shape: []int{4, 5}, Data: make([]T, 20)}})
	xl := &Buf[T]{Shape: []int{4, 2}, Data: make([]T, 8)}
	measure("linear_grad_weight_bias", LinearGradWeightBias, c, &Attrs{Accumulate: true}, []*Buf[T]{dyl, xl},
		[]*Buf[T]{{Shape: []int{3, 2}, Data: make([]T, 6)}, {Shape: []int{3}, Data: make([]T, 3)}})
	measure("clip_scale", ClipGradScale, c, &Attrs{MaxNorm: 1}, []*Buf[T]{g, buf(3)}, nil)
	measure("grad_unscale", GradUnscale, c, &Attrs{}, []*Buf[T]{g}, nil)
	return bad
}
