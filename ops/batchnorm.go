package ops

import (
	"fmt"
	"math"
	"slices"

	"gorun/ops/internal/vec"
)

const (
	// BatchNormStats: in x[N,C,...]; out stats[3,C]: per channel, row 0 is
	// Σx, row 1 Σx², row 2 the count N·L (L = prod(...), 1 for [N,C]),
	// summed in float64. The engine may all-reduce (sum) stats across
	// devices before BatchNormNorm uses them (SyncBatchNorm).
	BatchNormStats Op = "batch_norm_stats"

	// BatchNormNorm: in x[N,C,...], stats[3,C] (from BatchNormStats),
	// optional gamma[C], optional beta[C]; out y (x's shape) and save[3,C]
	// = (mean, biased variance, count) per channel, derived from stats in
	// float64 (variance Σx²/count - mean², clamped at 0; mean and variance
	// 0 when count is 0). y = (x-mean)/sqrt(var+Eps)·gamma + beta; an
	// absent gamma is 1, an absent beta 0 (affine=False). Attrs: Eps.
	//
	// Fused (the engine's rewrite of batch norm, then an add, then ReLU):
	// an optional fifth input res (x's shape) is added to y, and with
	// Attrs.ReLU the sum goes through ReLU's rule, each element rounded as
	// the separate ops round it. Attrs: ReLU.
	BatchNormNorm Op = "batch_norm_norm"

	// BatchNormEval: in x[N,C,...], running_mean[C], running_var[C],
	// optional gamma[C], optional beta[C], optional res (x's shape); out
	// y = (x-running_mean) / sqrt(running_var+Eps)·gamma + beta, then + res
	// and ReLU as BatchNormNorm's. Attrs: Eps, ReLU.
	BatchNormEval Op = "batch_norm_eval"

	// BatchNormRunning: in save[3,C] (from BatchNormNorm), running_mean[C],
	// running_var[C], num_batches_tracked[1]; updates the last three in
	// place, as PyTorch's training-mode batch_norm with momentum m:
	//
	//	running_mean = (1-m)·running_mean + m·mean
	//	running_var  = (1-m)·running_var  + m·var·count/(count-1)
	//	num_batches_tracked += 1
	//
	// m is Attrs.BNMomentum, or 1/num_batches_tracked (after the
	// increment) when BNMomentum is negative (PyTorch's momentum=None, a
	// cumulative average). A count of 0 changes nothing; a count of 1
	// updates the mean and the counter but not the variance (PyTorch
	// refuses to train with one value per channel).
	BatchNormRunning Op = "batch_norm_running"

	// BatchNormGradStats: in dy[N,C,...], x[N,C,...], save[3,C] (from
	// BatchNormNorm); out gstats[2,C]: row 0 Σdy, row 1 Σdy·(x-mean), per
	// channel, summed in float64. Under SyncBatchNorm the engine may
	// all-reduce (sum) gstats before the ops below use it.
	BatchNormGradStats Op = "batch_norm_grad_stats"

	// BatchNormGradGamma: in gstats[2,C], save[3,C]; out dgamma[C] =
	// gstats[1]/sqrt(var+Eps). Attrs: Eps.
	BatchNormGradGamma Op = "batch_norm_grad_gamma"

	// BatchNormGradBeta: in gstats[2,C]; out dbeta[C] = gstats[0].
	BatchNormGradBeta Op = "batch_norm_grad_beta"

	// BatchNormGradInput: in dy, x, save[3,C], gstats[2,C], optional
	// gamma[C]; out dx = gamma·invstd·(dy - gstats[0]/M -
	// (x-mean)·invstd²·gstats[1]/M), invstd = 1/sqrt(var+Eps), M = save's
	// count (an absent gamma is 1). Attrs: Eps.
	BatchNormGradInput Op = "batch_norm_grad_input"
)

var (
	bnStatsIn = []Input{{Name: "input"}}
	bnNormIn  = []Input{{Name: "input"}, {Name: "stats"}, {Name: "weight", Optional: true}, {Name: "bias", Optional: true},
		{Name: "residual", Optional: true}}
	bnEvalIn = []Input{{Name: "input"}, {Name: "running_mean"}, {Name: "running_var"}, {Name: "weight", Optional: true},
		{Name: "bias", Optional: true}, {Name: "residual", Optional: true}}
)

var batchNormOps = []*Def{
	{
		Op: BatchNormStats, In: bnStatsIn,
		// The gradient flows through BatchNormNorm's rule.
		Out: []Output{{Name: "stats", NoGrad: true, Unbatched: true}},
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			return inferBatchNorm(BatchNormStats, bnStatsIn, a, in)
		},
		Kernel32: batchNormStats[float32], Kernel64: batchNormStats[float64],
	},
	{
		Op: BatchNormNorm, In: bnNormIn, Out: []Output{{Name: "y"}, {Name: "save", NoGrad: true, Unbatched: true}},
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			return inferBatchNorm(BatchNormNorm, bnNormIn, a, in)
		},
		Grad:     batchNormGrad,
		StepName: bnStepName(BatchNormNorm, 4),
		Kernel32: batchNormNorm[float32], Kernel64: batchNormNorm[float64],
	},
	{
		Op: BatchNormEval, In: bnEvalIn, Out: []Output{{Name: "y"}}, EvalOnly: true, StepName: bnStepName(BatchNormEval, 5),
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			return inferBatchNorm(BatchNormEval, bnEvalIn, a, in)
		},
		Kernel32: batchNormEval[float32], Kernel64: batchNormEval[float64],
	},
	{
		Op: BatchNormRunning, InPlace: true,
		In:       []Input{{Name: "save"}, {Name: "running_mean"}, {Name: "running_var"}, {Name: "num_batches_tracked"}},
		Kernel32: batchNormRunning[float32], Kernel64: batchNormRunning[float64],
	},
	{
		Op: BatchNormGradStats, In: []Input{{Name: "dy"}, {Name: "x"}, {Name: "save"}}, Out: []Output{{Name: "gstats"}},
		Kernel32: batchNormGradStats[float32], Kernel64: batchNormGradStats[float64],
	},
	{
		Op: BatchNormGradGamma, In: []Input{{Name: "gstats"}, {Name: "save"}}, Out: []Output{{Name: "dgamma"}}, Accumulates: true,
		Kernel32: batchNormGradGamma[float32], Kernel64: batchNormGradGamma[float64],
	},
	{
		Op: BatchNormGradBeta, In: []Input{{Name: "gstats"}}, Out: []Output{{Name: "dbeta"}}, Accumulates: true,
		Kernel32: batchNormGradBeta[float32], Kernel64: batchNormGradBeta[float64],
	},
	{
		Op: BatchNormGradInput, In: []Input{{Name: "dy"}, {Name: "x"}, {Name: "save"}, {Name: "gstats"}, {Name: "gamma", Optional: true}},
		Out:      []Output{{Name: "dx"}},
		Kernel32: batchNormGradInput[float32], Kernel64: batchNormGradInput[float64],
	},
}

// bnStepName names a step of op as plans print it: "+add" when it was
// given a residual (input res), "+relu" with Attrs.ReLU.
func bnStepName(op Op, res int) func(a *Attrs, given func(int) bool) string {
	return func(a *Attrs, given func(int) bool) string {
		name := string(op)
		if given(res) {
			name += "+add"
		}
		if a.ReLU {
			name += "+relu"
		}
		return name
	}
}

// batchNormGrad differentiates BatchNormNorm (in x, stats, gamma, beta
// and, fused, a residual; out y, save): fused with a ReLU, dy first goes
// through ReLU's gradient, which is also the residual's; the per-channel
// sums of dy and dy·(x−mean) give the weight and bias gradients; under
// SyncBatchNorm (the statistics all-reduced) a copy of those sums is summed
// over every device first for the input gradient, as torch.nn.SyncBatchNorm
// does.
func batchNormGrad(b GradBuilder) []Value {
	a := b.Attrs()
	x, stats, gamma, beta := b.In(0), b.In(1), b.In(2), b.In(3)
	y, save := b.Out(0), b.Out(1)
	dy := b.OutGrad(0)
	c := b.Shape(x)[1]
	out := make([]Value, 5)
	if a.ReLU { // fused: ReLU's gradient first, the residual's too
		dy = b.Temp(ReLUGrad, Attrs{}, "grad "+b.Name(y)+" (before relu)", b.Shape(y), b.Batched(y), dy, y)
		if b.In(4) != nil {
			out[4] = dy
		}
	}
	gstats := b.Temp(BatchNormGradStats, a, "grad stats "+b.Name(y), []int{2, c}, false, dy, x, save)
	if b.NeedsGrad(gamma) {
		out[2] = b.Grad(BatchNormGradGamma, a, gamma, gstats, save)
	}
	if b.NeedsGrad(beta) {
		out[3] = b.Grad(BatchNormGradBeta, a, beta, gstats)
	}
	if b.NeedsGrad(x) {
		global := gstats
		if b.AllReduced(stats) {
			global = b.Temp(Scale, Attrs{Alpha: 1}, "grad stats (all devices) "+b.Name(y), []int{2, c}, false, gstats)
			b.AllReduce(global)
		}
		out[0] = b.Grad(BatchNormGradInput, a, x, dy, x, save, global, gamma)
	}
	return out
}

// inferBatchNorm is the shape rule of BatchNormStats, BatchNormNorm and
// BatchNormEval (op, with inputs): x is [N C ...]; the per-channel inputs
// are [C] and the statistics [3 C].
func inferBatchNorm(op Op, inputs []Input, a *Attrs, in [][]int) ([][]int, error) {
	x := in[0]
	if len(x) < 2 {
		return nil, fmt.Errorf("%v: input must be [N C ...], got %v", op, x)
	}
	ch := x[1]
	if op == BatchNormStats {
		return [][]int{{3, ch}}, nil
	}
	if !(a.Eps >= 0) {
		return nil, fmt.Errorf("%v: eps must not be negative, got %v", op, a.Eps)
	}
	for i, s := range in[1:] {
		i++
		want := []int{ch}
		switch {
		case op == BatchNormNorm && i == 1:
			want = []int{3, ch}
		case op == BatchNormNorm && i == 4, op == BatchNormEval && i == 5:
			if s != nil && !slices.Equal(s, x) {
				return nil, fmt.Errorf("%v: residual must have the input's shape %v, got %v", op, x, s)
			}
			continue
		}
		if s != nil && !slices.Equal(s, want) {
			return nil, fmt.Errorf("%v: %s must be %v, one per channel of input %v, got %v", op, inputs[i].Name, want, x, s)
		}
	}
	if op == BatchNormNorm {
		return [][]int{clone(x), {3, ch}}, nil
	}
	return [][]int{clone(x)}, nil
}

// Batch normalisation is split at the points where SyncBatchNorm
// all-reduces: BatchNormStats sums per channel, the engine may sum those
// sums across devices, and BatchNormNorm derives mean and variance from
// them; backward, BatchNormGradStats sums per channel, the engine may sum
// those too, and BatchNormGradInput, BatchNormGradGamma and
// BatchNormGradBeta use the sums. x is [N,C,...], seen as [N,C,L] with L
// the product of the trailing dimensions (1 for [N,C]).

// bnBlock is how many channels a kernel hands package vec at a time (float32
// only): their per-channel values live in arrays on the kernel's stack, as
// kernels never allocate.
const bnBlock = 128

// bnDims returns x's batch, channels and elements per channel per sample.
func bnDims(shape []int) (n, c, l int) {
	return shape[0], shape[1], prod(shape[2:])
}

// batchNormStats: in x[N,C,...]; out stats[3,C] = (Σx, Σx², N·L) per
// channel, summed in float64.
func batchNormStats[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, st := in[0], out[0]
	n, ch, l := bnDims(x.Shape)
	s := st.Data[:3*ch]
	var s1, s2 [bnBlock]float64
	for j0 := 0; j0 < ch; j0 += bnBlock {
		nc := min(bnBlock, ch-j0)
		if is32[T]() {
			vec.BNSums(s1[:nc], s2[:nc], view[float32](x.Data), n, ch, l, j0, nc)
		} else {
			for c := range nc {
				var a, b float64
				for i := 0; i < n; i++ {
					for _, v := range x.Data[(i*ch+j0+c)*l:][:l] {
						f := float64(v)
						a += f
						b += f * f
					}
				}
				s1[c], s2[c] = a, b
			}
		}
		for c := range nc {
			j := j0 + c
			s[j], s[ch+j], s[2*ch+j] = T(s1[c]), T(s2[c]), T(n*l)
		}
	}
}

// bnMoments returns the mean and biased variance of one channel from its
// sums and count: Σx²/count - mean², clamped at 0; both 0 for no count.
func bnMoments(s1, s2, cnt float64) (mean, v float64) {
	if cnt <= 0 {
		return 0, 0
	}
	mean = s1 / cnt
	return mean, max(s2/cnt-mean*mean, 0)
}

// invStd is 1/sqrt(v+eps).
func invStd(v, eps float64) float64 { return 1 / math.Sqrt(v+eps) }

// bnApply sets y = (x - mean[c])·scale[c] + shift[c] over channel j0+c of
// every sample, for c < len(scale), then adds res (when not nil) and
// applies ReLU's rule (with relu), each rounded to T in turn.
func bnApply[T Float](x, y, res []T, relu bool, n, ch, l, j0 int, mean, scale, shift []T) {
	if is32[T]() {
		vec.BNApplyAdd(view[float32](y), view[float32](x), view[float32](res), relu, view[float32](mean),
			view[float32](scale), view[float32](shift), n, ch, l, j0, len(scale))
		return
	}
	for c := range scale {
		for i := 0; i < n; i++ {
			o := (i*ch + j0 + c) * l
			yr := y[o:][:l]
			for k, v := range x[o:][:l] {
				t := (v-mean[c])*scale[c] + shift[c]
				if res != nil {
					t += res[o+k]
				}
				if relu && t < 0 {
					t = 0
				}
				yr[k] = t
			}
		}
	}
}

// optAt returns b.Data[j], or def when b is nil.
func optAt[T Float](b *Buf[T], j int, def float64) float64 {
	if b == nil {
		return def
	}
	return float64(b.Data[j])
}

// batchNormNorm: in x[N,C,...], stats[3,C], optional gamma[C], optional
// beta[C], optional res (x's shape); out y and save[3,C] = (mean, biased
// variance, count). y gets + res and ReLU (Attrs.ReLU) when fused.
func batchNormNorm[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, st, gamma, beta := in[0], in[1], optIn(in, 2), optIn(in, 3)
	res := optData(in, 4)
	y, save := out[0], out[1]
	n, ch, l := bnDims(x.Shape)
	s := st.Data[:3*ch]
	sv := save.Data[:3*ch]
	var scale, shift [bnBlock]T
	for j0 := 0; j0 < ch; j0 += bnBlock {
		nc := min(bnBlock, ch-j0)
		for c := range nc {
			j := j0 + c
			cnt := float64(s[2*ch+j])
			mean, v := bnMoments(float64(s[j]), float64(s[ch+j]), cnt)
			sv[j], sv[ch+j], sv[2*ch+j] = T(mean), T(v), T(cnt)
			scale[c] = T(optAt(gamma, j, 1) * invStd(v, a.Eps))
			shift[c] = T(optAt(beta, j, 0))
		}
		bnApply(x.Data, y.Data, res, a.ReLU, n, ch, l, j0, sv[j0:j0+nc], scale[:nc], shift[:nc])
	}
}

// batchNormEval: in x[N,C,...], running_mean[C], running_var[C], optional
// gamma[C], optional beta[C], optional res; out y = (x - running_mean) /
// sqrt(running_var + Eps)·gamma + beta, then + res and ReLU as
// batchNormNorm's.
func batchNormEval[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, rm, rv, gamma, beta := in[0], in[1], in[2], optIn(in, 3), optIn(in, 4)
	res := optData(in, 5)
	n, ch, l := bnDims(x.Shape)
	var scale, shift [bnBlock]T
	for j0 := 0; j0 < ch; j0 += bnBlock {
		nc := min(bnBlock, ch-j0)
		for c := range nc {
			j := j0 + c
			scale[c] = T(optAt(gamma, j, 1) * invStd(float64(rv.Data[j]), a.Eps))
			shift[c] = T(optAt(beta, j, 0))
		}
		bnApply(x.Data, out[0].Data, res, a.ReLU, n, ch, l, j0, rm.Data[j0:j0+nc], scale[:nc], shift[:nc])
	}
}

// batchNormRunning: in save[3,C], running_mean[C], running_var[C],
// num_batches_tracked[1]; updates the last three in place (see
// BatchNormRunning).
func batchNormRunning[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	save, rm, rv, tracked := in[0], in[1], in[2], in[3]
	ch := save.Shape[1]
	sv := save.Data[:3*ch]
	if ch == 0 || !(sv[2*ch] >= 1) {
		return // no samples: nothing to learn from
	}
	t := float64(tracked.Data[0]) + 1
	tracked.Data[0] = T(t)
	m := a.BNMomentum
	if m < 0 {
		m = 1 / t
	}
	for j, mr := range rm.Data[:ch] {
		rm.Data[j] = T((1-m)*float64(mr) + m*float64(sv[j]))
		if cnt := float64(sv[2*ch+j]); cnt > 1 {
			rv.Data[j] = T((1-m)*float64(rv.Data[j]) + m*float64(sv[ch+j])*cnt/(cnt-1))
		}
	}
}

// batchNormGradStats: in dy, x, save[3,C]; out gstats[2,C] = (Σdy,
// Σdy·(x-mean)) per channel, summed in float64.
func batchNormGradStats[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, x, save, gs := in[0], in[1], in[2], out[0]
	n, ch, l := bnDims(x.Shape)
	g := gs.Data[:2*ch]
	var s0, s1 [bnBlock]float64
	for j0 := 0; j0 < ch; j0 += bnBlock {
		nc := min(bnBlock, ch-j0)
		mean := save.Data[j0 : j0+nc]
		if is32[T]() {
			vec.BNGradSums(s0[:nc], s1[:nc], view[float32](dy.Data), view[float32](x.Data), view[float32](mean),
				n, ch, l, j0, nc)
		} else {
			for c, m := range mean {
				var a, b float64
				for i := 0; i < n; i++ {
					o := (i*ch + j0 + c) * l
					xr := x.Data[o:][:l]
					for k, d := range dy.Data[o:][:l] {
						a += float64(d)
						b += float64(d) * float64(xr[k]-m)
					}
				}
				s0[c], s1[c] = a, b
			}
		}
		for c := range nc {
			g[j0+c], g[ch+j0+c] = T(s0[c]), T(s1[c])
		}
	}
}

// setGrad writes v into a parameter gradient, or adds it with
// Attrs.Accumulate.
func setGrad[T Float](a *Attrs, dst *T, v float64) {
	if a.Accumulate {
		*dst += T(v)
	} else {
		*dst = T(v)
	}
}

// batchNormGradGamma: in gstats[2,C], save[3,C]; out dgamma[C] =
// gstats[1]/sqrt(var+Eps).
func batchNormGradGamma[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	gs, save, dg := in[0], in[1], out[0]
	ch := gs.Shape[1]
	for j := range dg.Data[:ch] {
		setGrad(a, &dg.Data[j], float64(gs.Data[ch+j])*invStd(float64(save.Data[ch+j]), a.Eps))
	}
}

// batchNormGradBeta: in gstats[2,C]; out dbeta[C] = gstats[0].
func batchNormGradBeta[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	gs, db := in[0], out[0]
	ch := gs.Shape[1]
	for j, v := range gs.Data[:ch] {
		setGrad(a, &db.Data[j], float64(v))
	}
}

// batchNormGradInput: in dy, x, save[3,C], gstats[2,C], optional gamma[C];
// out dx = gamma·invstd·(dy - gstats[0]/M - (x-mean)·invstd²·gstats[1]/M).
func batchNormGradInput[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, x, save, gs, gamma, dx := in[0], in[1], in[2], in[3], optIn(in, 4), out[0]
	n, ch, l := bnDims(x.Shape)
	var k, sub, slope [bnBlock]T
	for j0 := 0; j0 < ch; j0 += bnBlock {
		nc := min(bnBlock, ch-j0)
		for c := range nc {
			j := j0 + c
			is := invStd(float64(save.Data[ch+j]), a.Eps)
			var m0, m1 float64 // gstats/M
			if cnt := float64(save.Data[2*ch+j]); cnt > 0 {
				m0 = float64(gs.Data[j]) / cnt
				m1 = float64(gs.Data[ch+j]) / cnt * is * is
			}
			k[c], sub[c], slope[c] = T(optAt(gamma, j, 1)*is), T(m0), T(m1)
		}
		mean := save.Data[j0 : j0+nc]
		if is32[T]() {
			vec.BNGradInput(view[float32](dx.Data), view[float32](dy.Data), view[float32](x.Data), view[float32](mean),
				view[float32](k[:nc]), view[float32](sub[:nc]), view[float32](slope[:nc]), n, ch, l, j0, nc)
			continue
		}
		for c, m := range mean {
			for i := 0; i < n; i++ {
				o := (i*ch + j0 + c) * l
				xr, dr := x.Data[o:][:l], dx.Data[o:][:l]
				for q, d := range dy.Data[o:][:l] {
					dr[q] = k[c] * (d - sub[c] - (xr[q]-m)*slope[c])
				}
			}
		}
	}
}
