package ops

import (
	"fmt"
	"math"
	"slices"

	"gorun/ops/internal/vec"
)

// Fused scaled dot-product attention that never holds a T×T matrix: the
// scores are made, normalised and used one tile of query rows at a time
// (FlashAttention-2's recipe). The forward op keeps only the output and
// each row's logsumexp; the backward op recomputes each tile's
// probabilities from them.
//
// Attention and AttentionGrad read q, k and v packed as the attention's
// input projection writes them, qkv[N,T,3,H,dh] (nn.MultiheadAttention's
// in_proj: q, k and v for every head of one position in one row), and
// write the output joined by heads, o[N,T,H·dh], ready for the output
// projection: no permute is needed on either side. AttentionHeads and its
// gradient take q, k and v apart, [N,...,T,dh], as a script that writes
// attention out with nn.matmul has them.
//
// The CPU kernels tile the query rows by attnTile: a tile's scores against
// every key it may see (its first attnTile·T elements of Ctx.Work, fewer
// with Causal: keys after the tile's last row are skipped) are one GEMM,
// their softmax one pass of the vectorised row softmax, and the tile's
// output one more GEMM. The key dimension is not tiled on the CPU: one
// core gains nothing from FlashAttention's online rescaling there, and the
// tile's memory, attnTile·T, is already O(T·dh), not O(T²). The CUDA
// kernels (cuda/kernels/attention.cu) tile keys too, with the online
// softmax.

const (
	// Attention: in qkv[N,T,3,H,dh]; out o[N,T,H·dh] = softmax(q·kᵀ/√dh
	// + mask)·v for each sample and head (q = qkv[:,:,0], k = qkv[:,:,1],
	// v = qkv[:,:,2]), and lse[N,H,T]: each query row's logsumexp of its
	// scaled, masked scores (what the backward recomputes the
	// probabilities from). With Attrs.Causal, row i sees keys j ≤ i only.
	// The scale is 1/√dh, PyTorch's. With Attrs.Precision = BF16 the
	// products take bfloat16 operands and accumulate in float32, p
	// rounded to bfloat16 before p·v (ops/attention_bf16.go says exactly
	// what is rounded where): PyTorch's scaled_dot_product_attention
	// under autocast on a GPU. Attrs: Causal, Precision.
	Attention Op = "attention"

	// AttentionGrad: in do[N,T,H·dh], qkv, o, lse (from Attention); out
	// dqkv[N,T,3,H,dh]: with P = exp(q·kᵀ/√dh − lse) recomputed tile by
	// tile, D = rowsum(do∘o) and dS = P∘(do·vᵀ − D), dq = dS·k/√dh, dk =
	// dSᵀ·q/√dh, dv = Pᵀ·do. (The CPU kernel sums D as Σ P∘(do·vᵀ), the
	// same value, to round as the unfused ops do: attnBackward.) With
	// Attrs.Precision = BF16, as ops/attention_bf16.go defines it. Attrs:
	// Causal, Precision.
	AttentionGrad Op = "attention_grad"

	// AttentionHeads: in q, k, v [N,...,T,dh] (one shape, rank ≥ 3: each
	// matrix of the leading dimensions one attention); out o (q's shape) =
	// softmax(Alpha·q·kᵀ + mask)·v per matrix and lse[N,...,T], as
	// Attention's. The compiler fuses a script's own batch_matmul →
	// (scale →) softmax → batch_matmul into it (engine's fuseAttention).
	// Attrs: Causal, Alpha (the scores' scale, used as given).
	AttentionHeads Op = "attention_heads"

	// AttentionHeadsGrad: in do, q, k, v, o, lse (from AttentionHeads);
	// out dq, dk, dv, as AttentionGrad's (dk and dv left off together:
	// dq alone, for the gradient checks). Attrs: Causal, Alpha.
	AttentionHeadsGrad Op = "attention_heads_grad"
)

// AttentionMaxHeadDim is the largest head dimension dh Attention takes:
// the CUDA kernels keep a thread's share of a row of dh in registers
// (cuda/kernels/attention.cu, GORUN_ATT_DMAX). The compiler builds wider
// heads from primitives (engine's fusedAttention).
const AttentionMaxHeadDim = 128

// attnTile is the number of query rows the CPU kernels handle at once.
const attnTile = 64

var attentionOps = []*Def{
	{
		Op: Attention, In: []Input{{Name: "qkv"}}, Autocast: AutocastLower,
		Out:   []Output{{Name: "o"}, {Name: "lse", NoGrad: true}},
		Shape: attentionShape,
		Workspace: func(a *Attrs, in, out [][]int) int {
			t := in[0][1]
			return attnWork(t, 1)
		},
		Grad: func(b GradBuilder) []Value {
			qkv := b.In(0)
			return []Value{b.Grad(AttentionGrad, b.Attrs(), qkv, b.OutGrad(0), qkv, b.Out(0), b.Out(1))}
		},
		Kernel32: attention[float32], Kernel64: attention[float64],
	},
	{
		// AutocastLower: autocast rewrites forward ops only; for this
		// gradient op it says that its Attrs.Precision is its products'
		// operands' format, as `gorun plan` prints it (engine.StepDtype).
		Op: AttentionGrad, In: []Input{{Name: "do"}, {Name: "qkv"}, {Name: "o"}, {Name: "lse"}}, Autocast: AutocastLower,
		Out: []Output{{Name: "dqkv"}},
		Workspace: func(a *Attrs, in, out [][]int) int {
			t := in[1][1]
			return attnWork(t, 2)
		},
		Kernel32: attentionGrad[float32], Kernel64: attentionGrad[float64],
	},
	{
		Op: AttentionHeads, In: []Input{{Name: "q"}, {Name: "k"}, {Name: "v"}},
		Out:   []Output{{Name: "o"}, {Name: "lse", NoGrad: true}},
		Shape: attentionHeadsShape,
		Workspace: func(a *Attrs, in, out [][]int) int {
			return attnWork(in[0][len(in[0])-2], 1)
		},
		Grad: func(b GradBuilder) []Value {
			q, k, v := b.In(0), b.In(1), b.In(2)
			return b.Grads(AttentionHeadsGrad, b.Attrs(), []Value{q, k, v}, b.OutGrad(0), q, k, v, b.Out(0), b.Out(1))
		},
		Kernel32: attentionHeads[float32], Kernel64: attentionHeads[float64],
	},
	{
		Op: AttentionHeadsGrad, In: []Input{{Name: "do"}, {Name: "q"}, {Name: "k"}, {Name: "v"}, {Name: "o"}, {Name: "lse"}},
		Out: []Output{{Name: "dq"}, {Name: "dk", Optional: true}, {Name: "dv", Optional: true}},
		Workspace: func(a *Attrs, in, out [][]int) int {
			return attnWork(in[1][len(in[1])-2], 2)
		},
		Kernel32: attentionHeadsGrad[float32], Kernel64: attentionHeadsGrad[float64],
	},
}

// attnWork is the scratch the kernels need for T positions: mats tiles of
// attnTile×T scores, and 2·attnTile elements for per-row statistics.
func attnWork(t, mats int) int { return mats*min(attnTile, t)*t + 2*attnTile }

// attentionShape is Attention's shape rule.
func attentionShape(a *Attrs, in [][]int) ([][]int, error) {
	x := in[0]
	if len(x) != 5 || x[2] != 3 {
		return nil, fmt.Errorf("attention: qkv must be [N T 3 H dh] (q, k and v of every head, packed), got %v", x)
	}
	n, t, h, dh := x[0], x[1], x[3], x[4]
	if t < 1 || h < 1 || dh < 1 {
		return nil, fmt.Errorf("attention: qkv %v has an empty sequence, head count or head dimension", x)
	}
	if dh > AttentionMaxHeadDim {
		return nil, fmt.Errorf("attention: qkv %v has heads of %d, more than the fused attention's %d (AttentionMaxHeadDim)", x, dh, AttentionMaxHeadDim)
	}
	return [][]int{{n, t, h * dh}, {n, h, t}}, nil
}

// attentionHeadsShape is AttentionHeads' shape rule.
func attentionHeadsShape(a *Attrs, in [][]int) ([][]int, error) {
	q := in[0]
	if len(q) < 3 {
		return nil, fmt.Errorf("attention_heads: q must be [N ... T dh] with at least 3 dimensions, got %v", q)
	}
	for i, name := range []string{"k", "v"} {
		if !slices.Equal(in[i+1], q) {
			return nil, fmt.Errorf("attention_heads: %s has shape %v, q %v: want the same", name, in[i+1], q)
		}
	}
	r := len(q)
	if q[r-2] < 1 || q[r-1] < 1 {
		return nil, fmt.Errorf("attention_heads: q %v has an empty sequence or head dimension", q)
	}
	if q[r-1] > AttentionMaxHeadDim {
		return nil, fmt.Errorf("attention_heads: q %v has heads of %d, more than the fused attention's %d (AttentionMaxHeadDim)", q, q[r-1], AttentionMaxHeadDim)
	}
	if math.IsNaN(a.Alpha) || math.IsInf(a.Alpha, 0) {
		return nil, fmt.Errorf("attention_heads: the scale must be finite, got %v", a.Alpha)
	}
	return [][]int{clone(q), clone(q[:r-1])}, nil
}

// attnMatrices is how many attention matrices q[N,...,T,dh] holds at its
// live batch.
func attnMatrices[T Float](q *Buf[T]) int {
	r := len(q.Shape)
	return q.Len() / (q.Shape[r-2] * q.Shape[r-1])
}

// attentionHeads: in q, k, v [N,...,T,dh]; out o, lse: attnForward for
// each matrix.
func attentionHeads[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	q := in[0]
	b := attnBufs[T]{q: q.Data, k: in[1].Data, v: in[2].Data, o: out[0].Data, lse: out[1].Data}
	for m := range attnMatrices(q) {
		g := attnHeadsAt(q.Shape, m, a.Alpha)
		attnForward(c, &g, &b, a.Causal)
	}
}

// attentionHeadsGrad: in do, q, k, v, o, lse; out dq, dk, dv:
// attnBackward for each matrix.
func attentionHeadsGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	q := in[1]
	b := attnBufs[T]{q: q.Data, k: in[2].Data, v: in[3].Data, lse: in[5].Data, do: in[0].Data, dq: out[0].Data}
	if len(out) > 2 {
		b.dk, b.dv = out[1].Data, out[2].Data
	}
	for m := range attnMatrices(q) {
		g := attnHeadsAt(q.Shape, m, a.Alpha)
		attnBackward(c, &g, &b, a.Causal)
	}
}

// attnGeom is where one attention matrix's (one sample's and one head's)
// q, k, v and o rows are in their buffers (qkv, or q, k and v apart).
type attnGeom struct {
	t, dh      int
	ld, ldo    int // row strides of q, k, v and of o
	q, k, v, o int // offsets of row 0
	lse        int // offset of the T logsumexps
	scale      float64
}

// attnAt returns the geometry of sample n, head hd for packed qkv's shape
// [N,T,3,H,dh].
func attnAt(shape []int, n, hd int) attnGeom {
	t, h, dh := shape[1], shape[3], shape[4]
	g := attnGeom{t: t, dh: dh, ld: 3 * h * dh, ldo: h * dh, scale: 1 / math.Sqrt(float64(dh))}
	base := n * t * g.ld
	g.q, g.k, g.v = base+hd*dh, base+h*dh+hd*dh, base+2*h*dh+hd*dh
	g.o = n*t*g.ldo + hd*dh
	g.lse = (n*h + hd) * t
	return g
}

// attnHeadsAt returns the geometry of matrix m of AttentionHeads' q, k, v
// and o [B...,T,dh], with the given scale.
func attnHeadsAt(shape []int, m int, scale float64) attnGeom {
	r := len(shape)
	t, dh := shape[r-2], shape[r-1]
	off := m * t * dh
	return attnGeom{t: t, dh: dh, ld: dh, ldo: dh, q: off, k: off, v: off, o: off, lse: m * t, scale: scale}
}

// attnBufs are the slices one attention reads and writes: q, k and v (the
// same qkv for the packed op), o and lse; for the backward do, dq, dk and
// dv too.
type attnBufs[T Float] struct {
	q, k, v, o, lse []T
	do, dq, dk, dv  []T
}

// keys is how many keys the tile of rows q0 … q0+br-1 sees.
func (g *attnGeom) keys(causal bool, q0, br int) int {
	if causal {
		return q0 + br
	}
	return g.t
}

// attnScores sets s[br×kn] to the scaled scores of query rows q0 … q0+br-1
// against keys 0 … kn-1 (those Causal masks too: attnSoftmax skips them).
func attnScores[T Float](g *attnGeom, q, k []T, q0, br, kn int, s []T) {
	matmul(false, true, br, kn, g.dh, T(g.scale), q[g.q+q0*g.ld:], g.ld, k[g.k:], g.ld, 0, s, kn)
}

// attnSoftmax normalises the br rows of s[br×kn] (query rows q0 …) in
// place, over the keys each row sees (with causal, row q0+r sees q0+r+1;
// the others are set to 0), and returns each row's maximum m and sum of
// exp(s − m) in ms (2·br elements). float32 runs vec.SoftmaxRows: the
// first tile of a causal attention in one call as the unfused causal
// softmax makes it, later tiles a row at a time (the same bits as that
// softmax either way); float64 sums in float64 with math.Exp.
func attnSoftmax[T Float](s []T, q0, br, kn int, causal bool, ms []T) {
	if is32[T]() {
		switch {
		case !causal:
			vec.SoftmaxRows(view[float32](s[:br*kn]), view[float32](s[:br*kn]), kn, 0, view[float32](ms[:2*br]))
		case q0 == 0: // kn == br: row r keeps columns 0 … r
			vec.SoftmaxRows(view[float32](s[:br*kn]), view[float32](s[:br*kn]), kn, kn, view[float32](ms[:2*br]))
		default:
			for r := range br {
				row, keep := s[r*kn:(r+1)*kn], q0+r+1
				vec.SoftmaxRows(view[float32](row[:keep]), view[float32](row[:keep]), keep, 0, view[float32](ms[2*r:2*r+2]))
				clear(row[keep:])
			}
		}
		return
	}
	for r := range br {
		row, keep := s[r*kn:(r+1)*kn], attnKeep(causal, q0+r, kn)
		m := rowMax(row[:keep])
		var sum float64
		for j, v := range row[:keep] {
			e := math.Exp(float64(v - m))
			row[j] = T(e)
			sum += e
		}
		inv := 1 / sum
		for j := range row[:keep] {
			row[j] = T(float64(row[j]) * inv)
		}
		clear(row[keep:])
		ms[2*r], ms[2*r+1] = m, T(sum)
	}
}

// attnKeep is how many of kn keys query row i sees.
func attnKeep(causal bool, i, kn int) int {
	if causal {
		return min(i+1, kn)
	}
	return kn
}

// attention: in qkv[N,T,3,H,dh]; out o[N,T,H·dh], lse[N,H,T]: attnForward
// for each sample and head.
func attention[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	if a.Precision == BF16 && is32[T]() {
		attentionBF16(any(c).(*Ctx[float32]), a, any(in).([]*Buf[float32]), any(out).([]*Buf[float32]))
		return
	}
	qkv, o, lse := in[0], out[0], out[1]
	b := attnBufs[T]{q: qkv.Data, k: qkv.Data, v: qkv.Data, o: o.Data, lse: lse.Data}
	for i := range qkv.Shape[0] {
		for hd := range qkv.Shape[3] {
			g := attnAt(qkv.Shape, i, hd)
			attnForward(c, &g, &b, a.Causal)
		}
	}
}

// attnForward computes one attention matrix's o and lse, a tile of query
// rows at a time: scores (GEMM), softmax, output (GEMM); lse = m + log Σ.
func attnForward[T Float](c *Ctx[T], g *attnGeom, b *attnBufs[T], causal bool) {
	ms := c.Work[:2*attnTile]
	s := c.Work[2*attnTile:]
	for q0 := 0; q0 < g.t; q0 += attnTile {
		br := min(attnTile, g.t-q0)
		kn := g.keys(causal, q0, br)
		attnScores(g, b.q, b.k, q0, br, kn, s)
		attnSoftmax(s, q0, br, kn, causal, ms)
		for r := range br {
			b.lse[g.lse+q0+r] = ms[2*r] + T(math.Log(float64(ms[2*r+1])))
		}
		matmul(false, false, br, g.dh, kn, 1, s, kn, b.v[g.v:], g.ld, 0, b.o[g.o+q0*g.ldo:], g.ldo)
	}
}

// attentionGrad: in do, qkv, o, lse; out dqkv: attnBackward for each
// sample and head.
func attentionGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	if a.Precision == BF16 && is32[T]() {
		attentionGradBF16(any(c).(*Ctx[float32]), a, any(in).([]*Buf[float32]), any(out).([]*Buf[float32]))
		return
	}
	do, qkv, lse, dqkv := in[0], in[1], in[3], out[0]
	b := attnBufs[T]{q: qkv.Data, k: qkv.Data, v: qkv.Data, lse: lse.Data, do: do.Data, dq: dqkv.Data, dk: dqkv.Data, dv: dqkv.Data}
	for i := range qkv.Shape[0] {
		for hd := range qkv.Shape[3] {
			g := attnAt(qkv.Shape, i, hd)
			attnBackward(c, &g, &b, a.Causal)
		}
	}
}

// attnBackward computes one attention matrix's dq, dk and dv. Each tile of
// query rows recomputes its probabilities P, then dP = do·vᵀ, dS =
// P∘(dP − D)·scale, and adds the tile's parts: dv += Pᵀ·do, dq = dS·k, dk
// += dSᵀ·q. float64 recomputes P as exp(S − lse); float32 as the forward
// computed it, with vec.SoftmaxRows (the same bits as the forward's
// probabilities).
//
// A tile holds whole rows of P, so D = Σⱼ P∘dP (equal to FlashAttention's
// rowsum(do∘o), which the CUDA kernel uses), summed in float64, and dS is
// rounded as SoftmaxGrad and Scale round it: with T ≤ attnTile (one tile)
// the gradient is bit for bit the unfused path's, so a fused plan trains
// as the unfused one does (and resumes its checkpoints). Beyond one tile,
// dk and dv are sums over the tiles, in another order.
func attnBackward[T Float](c *Ctx[T], g *attnGeom, b *attnBufs[T], causal bool) {
	t, dh := g.t, g.dh
	ms := c.Work[:2*attnTile]
	tile := min(attnTile, t) * t
	p := c.Work[2*attnTile:][:tile]
	dp := c.Work[2*attnTile+tile:][:tile]
	for r := range t { // dk and dv are sums over the tiles
		if b.dk != nil {
			clear(b.dk[g.k+r*g.ld:][:dh])
		}
		if b.dv != nil {
			clear(b.dv[g.v+r*g.ld:][:dh])
		}
	}
	for q0 := 0; q0 < t; q0 += attnTile {
		br := min(attnTile, t-q0)
		kn := g.keys(causal, q0, br)
		attnScores(g, b.q, b.k, q0, br, kn, p)
		if is32[T]() {
			attnSoftmax(p, q0, br, kn, causal, ms)
		} else {
			for r := range br {
				l := float64(b.lse[g.lse+q0+r])
				row, keep := p[r*kn:(r+1)*kn], attnKeep(causal, q0+r, kn)
				for j, v := range row[:keep] {
					row[j] = T(math.Exp(float64(v) - l))
				}
				clear(row[keep:])
			}
		}
		dot := b.do[g.o+q0*g.ldo:]
		matmul(false, true, br, kn, dh, 1, dot, g.ldo, b.v[g.v:], g.ld, 0, dp, kn)
		sc := T(g.scale)
		for r := range br {
			pr, dpr := p[r*kn:(r+1)*kn], dp[r*kn:(r+1)*kn]
			var s float64
			for j, pv := range pr {
				s += float64(dpr[j]) * float64(pv)
			}
			d := T(s)
			for j, pv := range pr {
				dpr[j] = sc * (pv * (dpr[j] - d))
			}
		}
		if b.dv != nil {
			matmul(true, false, kn, dh, br, 1, p, kn, dot, g.ldo, 1, b.dv[g.v:], g.ld)
		}
		matmul(false, false, br, dh, kn, 1, dp, kn, b.k[g.k:], g.ld, 0, b.dq[g.q+q0*g.ld:], g.ld)
		if b.dk != nil {
			matmul(true, false, kn, dh, br, 1, dp, kn, b.q[g.q+q0*g.ld:], g.ld, 1, b.dk[g.k:], g.ld)
		}
	}
}
