package ops

import "math"

// Fused attention with bfloat16 products (Attention and AttentionGrad with
// Attrs.Precision = BF16): what PyTorch's F.scaled_dot_product_attention
// computes under torch.autocast on a GPU (its flash kernel), and what the
// CUDA backend's tensor-core kernels compute (cuda/kernels/attention.cu:
// gorun_attention_bf16, gorun_attention_bf16_grad_q and _kv). The engine
// lowers nn.multihead_attention to it under precision "bf16" only for a
// target that runs it (target.Target.FusedBF16: CUDA); the CPU's bf16 plan
// builds attention from its parts, as PyTorch 1.13's CPU autocast does.
//
// Every product takes operands rounded to bfloat16 (RoundBF16) and sums
// their exact products in float32, one term at a time in increasing index
// order; everything else is float32. With br(x) = RoundBF16(x), scale =
// 1/√dh, and the keys a row sees (all, or j ≤ i with Causal):
//
// Forward, per query row i, the keys taken in blocks of AttentionBF16Keys
// (0 … 31, 32 … 63, …) as FlashAttention's online softmax takes them:
//
//	s_j  = (Σ_d br(q_id)·br(k_jd))·scale
//	m'   = max(m, s_j over the block's keys i sees)       (m = −Inf at first)
//	p_j  = exp(s_j − m')                                  (float32, unrounded)
//	a    = exp(m − m') (0 while m = −Inf)
//	l    = l·a + Σ_j p_j                                  (unrounded p)
//	acc  = acc·a + Σ_j br(p_j)·br(v_jd)                   (p rounded for p·v)
//	m    = m'
//
// and then o_i = acc/l, lse_i = m + log l. p is rounded relative to the
// running maximum m' of the blocks seen so far, not the row's final one:
// that is where the key blocks show in the result.
//
// Backward, from lse and D_i = Σ_d do_id·o_id (float32, unrounded do and
// o):
//
//	p_ij  = exp((Σ_d br(q_id)·br(k_jd))·scale − lse_i)
//	dp_ij = Σ_d br(do_id)·br(v_jd)
//	ds_ij = p_ij·(dp_ij − D_i)
//	dq_id = (Σ_j br(ds_ij)·br(k_jd))·scale
//	dk_jd = (Σ_i br(ds_ij)·br(q_id))·scale
//	dv_jd =  Σ_i br(p_ij)·br(do_id)
//
// The CPU kernels below compute exactly this (the float32 ones; the
// float64 ones, for finite differences, ignore the precision, as Round's
// does). The GPU's tensor cores sum each 16-term product in their own
// order, so the CUDA kernels agree with these within float32 rounding, not
// to the bit; the host build of the CUDA kernels (cuda/kernels/hostcheck)
// sums in this order and is checked against these.

// AttentionBF16Keys is how many keys the bf16 fused attention's forward
// takes at a time (the online softmax's blocks): GORUN_ATT_BF16_KEYS in
// cuda/kernels/attention.cu.
const AttentionBF16Keys = 32

// dotBF16 is Σ_d br(a[d·sa])·br(b[d·sb]) over n terms, a float32 sum in
// increasing d of exact products (two bfloat16s multiply exactly in
// float32).
func dotBF16(a, b []float32, n int) float32 {
	var s float32
	for d := range n {
		s += float32(RoundBF16(a[d]) * RoundBF16(b[d]))
	}
	return s
}

// exp32 is exp in float32: e^x correctly rounded but for ties (as
// glibc's and CUDA's expf are, to within an ulp).
func exp32(x float32) float32 { return float32(math.Exp(float64(x))) }

// attnForwardBF16 computes one attention matrix's o and lse as the bf16
// fused attention defines them (see above); acc is dh elements of scratch.
func attnForwardBF16(g *attnGeom, b *attnBufs[float32], causal bool, acc []float32) {
	t, dh := g.t, g.dh
	scale := float32(g.scale)
	ninf := float32(math.Inf(-1))
	for i := range t {
		q := b.q[g.q+i*g.ld:][:dh]
		m, l := ninf, float32(0)
		clear(acc[:dh])
		kend := attnKeep(causal, i, t)
		for k0 := 0; k0 < kend; k0 += AttentionBF16Keys {
			k1 := min(k0+AttentionBF16Keys, kend)
			mx := m
			for j := k0; j < k1; j++ {
				mx = max(mx, dotBF16(q, b.k[g.k+j*g.ld:], dh)*scale)
			}
			var sum float32
			for j := k0; j < k1; j++ {
				p := exp32(dotBF16(q, b.k[g.k+j*g.ld:], dh)*scale - mx)
				sum += p
				pr, v := RoundBF16(p), b.v[g.v+j*g.ld:][:dh]
				if j == k0 {
					a := float32(0)
					if m != ninf {
						a = exp32(m - mx)
					}
					l *= a
					for d := range dh {
						acc[d] *= a
					}
				}
				for d := range dh {
					acc[d] += float32(pr * RoundBF16(v[d]))
				}
			}
			l += sum
			m = mx
		}
		o := b.o[g.o+i*g.ldo:][:dh]
		for d := range dh {
			o[d] = acc[d] / l
		}
		b.lse[g.lse+i] = m + float32(math.Log(float64(l)))
	}
}

// attnBackwardBF16 computes one attention matrix's dq, dk and dv as the
// bf16 fused attention defines them (see above), from its o and lse.
func attnBackwardBF16(g *attnGeom, b *attnBufs[float32], causal bool) {
	t, dh := g.t, g.dh
	scale := float32(g.scale)
	for j := range t {
		clear(b.dk[g.k+j*g.ld:][:dh])
		clear(b.dv[g.v+j*g.ld:][:dh])
	}
	for i := range t {
		q, do := b.q[g.q+i*g.ld:][:dh], b.do[g.o+i*g.ldo:][:dh]
		var dd float32
		for d := range dh {
			dd += float32(do[d] * b.o[g.o+i*g.ldo+d])
		}
		lse := b.lse[g.lse+i]
		dq := b.dq[g.q+i*g.ld:][:dh]
		clear(dq)
		for j := range attnKeep(causal, i, t) {
			k, v := b.k[g.k+j*g.ld:][:dh], b.v[g.v+j*g.ld:][:dh]
			p := exp32(dotBF16(q, k, dh)*scale - lse)
			ds := p * (dotBF16(do, v, dh) - dd)
			pr, dsr := RoundBF16(p), RoundBF16(ds)
			dk, dv := b.dk[g.k+j*g.ld:][:dh], b.dv[g.v+j*g.ld:][:dh]
			for d := range dh {
				dq[d] += float32(dsr * RoundBF16(k[d]))
				dk[d] += float32(dsr * RoundBF16(q[d]))
				dv[d] += float32(pr * RoundBF16(do[d]))
			}
		}
		for d := range dh {
			dq[d] *= scale
		}
	}
	for j := range t {
		dk := b.dk[g.k+j*g.ld:][:dh]
		for d := range dh {
			dk[d] *= scale
		}
	}
}

// attentionBF16 is Attention's float32 kernel under Attrs.Precision =
// BF16: attnForwardBF16 for each sample and head.
func attentionBF16(c *Ctx[float32], a *Attrs, in, out []*Buf[float32]) {
	qkv := in[0]
	b := attnBufs[float32]{q: qkv.Data, k: qkv.Data, v: qkv.Data, o: out[0].Data, lse: out[1].Data}
	for i := range qkv.Shape[0] {
		for hd := range qkv.Shape[3] {
			g := attnAt(qkv.Shape, i, hd)
			attnForwardBF16(&g, &b, a.Causal, c.Work)
		}
	}
}

// attentionGradBF16 is AttentionGrad's float32 kernel under
// Attrs.Precision = BF16: attnBackwardBF16 for each sample and head.
func attentionGradBF16(c *Ctx[float32], a *Attrs, in, out []*Buf[float32]) {
	do, qkv, o, lse, dqkv := in[0], in[1], in[2], in[3], out[0]
	b := attnBufs[float32]{q: qkv.Data, k: qkv.Data, v: qkv.Data, o: o.Data, lse: lse.Data, do: do.Data, dq: dqkv.Data, dk: dqkv.Data, dv: dqkv.Data}
	for i := range qkv.Shape[0] {
		for hd := range qkv.Shape[3] {
			g := attnAt(qkv.Shape, i, hd)
			attnBackwardBF16(&g, &b, a.Causal)
		}
	}
}
