package engine

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"gorun/engine/spec"
	"gorun/ops"
)

// Value is one tensor of the graph: an input, a parameter, an activation,
// a gradient or an optimizer state. Shapes are for the planned maximum
// batch; Batched values have the batch as their first dimension.
type Value struct {
	ID      int
	Name    string // "conv1.weight", "conv1", "grad conv1", …
	Shape   []int
	Batched bool
	Int     bool // holds indices (targets, pooling positions), not floats
	// Param is set on parameters; Grad is a parameter's gradient.
	Param    *Param
	Producer *Node
	// needsGrad is true when the loss depends on a parameter through it.
	needsGrad bool
	grad      *Value
	// ids, on an Int value whose elements are ids an embedding may look
	// up, bounds them when the compiler knows how: every id lies in
	// [0, ids) (token data: the vocabulary; data.positions(): the
	// sequence length), and idsFrom says so in words for errors. 0:
	// unknown.
	ids     int
	idsFrom string
	// LowPrecision: under mixed precision (GraphOptions.Precision), the
	// value holds numbers of the low format (bfloat16 or float16) in
	// float32 storage: a cast's output, or what autocast's ops make of
	// them (engine/precision.go).
	LowPrecision bool
	// castInPlace: the value is an output cast's (engine/precision.go),
	// planned in its input's buffer, which the cast rounds in place.
	castInPlace bool
}

// Elems is the number of elements at the maximum batch.
func (v *Value) Elems() int {
	n := 1
	for _, d := range v.Shape {
		n *= d
	}
	return n
}

// Param is a trainable parameter, named as PyTorch's state_dict names it.
type Param struct {
	Name  string // "conv1.weight"
	Value *Value
	Grad  *Value
	// FanIn is the fan-in PyTorch's default initialisation uses.
	FanIn int
	// Bias marks biases (initialised like PyTorch's biases).
	Bias bool
	// FanOut is the fan-out (kaiming_normal's, xavier's).
	FanOut int
	// Aliases are other names the parameter has in PyTorch's state_dict
	// (a tied output projection's "lm_head.weight"); checkpoints write it
	// under each.
	Aliases []string
	// Init, when its Kind is set, replaces the layer's default (batch
	// norm's weight starts at 1 and its bias at 0); else the layer's
	// init= applies to its weight.
	Init  spec.Init
	Layer *spec.Layer
}

// Stat is state a layer saves but does not train (batch norm's running
// mean and variance and its count of batches), named as PyTorch's
// state_dict names the module's buffers.
type Stat struct {
	Name  string // "bn1.running_mean"
	Value *Value
	Fill  float32 // the value it starts at
	Layer *spec.Layer
}

// Node is one op applied to values.
type Node struct {
	Op    ops.Op
	Attrs ops.Attrs
	In    []*Value // nil for an absent optional input
	Out   []*Value
	Layer string   // the layer this node computes (or differentiates)
	Pos   spec.Pos // where that layer was declared
	// AllReduce sums output 0 over every device right after the node
	// (SyncBatchNorm's statistics and their gradients).
	AllReduce bool
	// TrainOnly nodes are left out of evaluation; Eval, when set, replaces
	// the node there (batch norm uses its running statistics).
	TrainOnly bool
	Eval      *Node
}

// Graph is the model's training graph: forward, loss and backward.
type Graph struct {
	Values   []*Value
	Input    *Value // [N, sample shape...]
	Target   *Value // [N] class indices
	Output   *Value // the model's output, before the loss
	Loss     *Value // [1]
	LossSeed *Value // [1], holds 1: d loss / d loss
	Params   []*Param
	Stats    []*Stat
	Forward  []*Node // model layers, then the loss
	Backward []*Node
	// BatchNorms are the model's batch norm applications, for the checks
	// of the batches each device feeds them (checkBatchNorm, CheckBatches).
	BatchNorms []BatchNormUse
}

// BatchNormUse is one application of a batch norm layer in training: PyTorch
// refuses batch statistics over exactly 1 value per channel ("Expected more
// than 1 value per channel when training"), and so does gorun.
type BatchNormUse struct {
	Layer string   // batchnorm1d "bn1"
	Pos   spec.Pos // where it was applied
	// PerSample is the values per channel one sample gives it: 1 for
	// [N, C], L for [N, C, L], H·W for [N, C, H, W].
	PerSample int
	// Sync: SyncBatchNorm, whose statistics count the samples of every
	// device; else each device's own.
	Sync bool
	// EvalBatch: track_running_stats = False, batch statistics in
	// evaluation too (as PyTorch's).
	EvalBatch bool
}

// CompileError is a problem found while compiling a script's model: it
// names the layer and where the script declared it.
type CompileError struct {
	Pos   spec.Pos
	Layer string
	Err   error
}

func (e *CompileError) Error() string {
	if e.Pos != "" {
		return fmt.Sprintf("%s: %s: %v", e.Pos, e.Layer, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Layer, e.Err)
}

func (e *CompileError) Unwrap() error { return e.Err }

type builder struct {
	g *Graph
	// params holds each applied layer's parameters; paths the layer
	// that owns each parameter name.
	params map[*spec.Layer][]*Value
	paths  map[string]*spec.Layer
	opts   GraphOptions
}

func (b *builder) value(name string, shape []int, batched bool) *Value {
	v := &Value{ID: len(b.g.Values), Name: name, Shape: shape, Batched: batched}
	b.g.Values = append(b.g.Values, v)
	return v
}

// Loss is what a model is trained against: the loss function ("nll",
// "cross_entropy" or "mse"), cross-entropy's label smoothing, where it was
// chosen (the train(...) call), and the data's targets: Classes class
// labels, or float targets of shape Target (regression).
type Loss struct {
	Kind           string
	LabelSmoothing float64
	Pos            spec.Pos
	Classes        int
	Target         []int
	// Tokens: integer inputs, a class target at every input position.
	Tokens bool
	// IgnoreIndex, when set, is the target the class losses skip.
	IgnoreIndex *int
}

// GraphOptions are the rewrites BuildGraph may make.
type GraphOptions struct {
	// Supports reports whether the Plan's backend runs an op (its
	// target.Target's Supports): the compiler fuses into an op that not
	// every backend has (TargetFusions: a convolution, max pooling and
	// ReLU into one Conv2DPool) only when it does. nil: no such fusion.
	Supports func(op ops.Op) bool
	// NoFusion builds the graph as the script wrote it, every op its own
	// node: no fusion at all (cluster.fusion = false).
	NoFusion bool
	// Precision is the script's train(precision = ...): under ops.BF16
	// and ops.FP16 the graph holds torch.autocast's casts as ops.Round
	// nodes (engine/precision.go); ops.FP32 adds none.
	Precision ops.Precision
	// AutocastFP32 are the ops the target runs in float32 under mixed
	// precision beyond their Def.Autocast (target.Target.AutocastFP32).
	AutocastFP32 []ops.Op
	// FusedBF16 are the fused ops the target runs with bfloat16
	// operands (target.Target.FusedBF16): under ops.BF16 the compiler
	// keeps them fused.
	FusedBF16 []ops.Op
}

// BuildGraph infers every shape of the model for the given per-device
// maximum batch and sample shape, then differentiates the loss.
func BuildGraph(model *spec.Model, loss Loss, batch int, sample []int, opts GraphOptions) (*Graph, error) {
	g := &Graph{}
	b := &builder{g: g, params: map[*spec.Layer][]*Value{}, paths: map[string]*spec.Layer{}, opts: opts}
	g.Input = b.value("input", append([]int{batch}, sample...), true)
	switch {
	case loss.Target != nil:
		g.Target = b.value("target", append([]int{batch}, loss.Target...), true)
	case loss.Tokens:
		g.Input.Int = true
		g.Input.ids = loss.Classes
		g.Input.idsFrom = fmt.Sprintf("the token data's vocabulary has %d ids (0 … %d)", loss.Classes, loss.Classes-1)
		g.Target = b.value("target", append([]int{batch}, sample...), true)
		g.Target.Int = true
	default:
		g.Target = b.value("target", []int{batch}, true)
		g.Target.Int = true
	}

	tensors := map[int]*Value{0: g.Input}
	for _, a := range model.Nodes {
		in := make([]*Value, len(a.In))
		for i, id := range a.In {
			if in[i] = tensors[id]; in[i] == nil {
				return nil, &CompileError{Pos: a.Pos, Layer: a.Layer.Label(), Err: fmt.Errorf("input tensor %d is used before it is computed", id)}
			}
		}
		out, err := b.layer(a.Layer, a.Pos, in)
		if err != nil {
			return nil, err
		}
		tensors[a.Out] = out
	}
	if g.Output = tensors[model.Output]; g.Output == nil || g.Output == g.Input {
		return nil, &CompileError{Pos: loss.Pos, Layer: "model", Err: fmt.Errorf("the model computes nothing from its input")}
	}
	if err := b.loss(loss); err != nil {
		return nil, err
	}
	b.autocast(opts.Precision, opts.AutocastFP32)
	if !opts.NoFusion {
		b.fuse()
	}
	if err := b.differentiate(); err != nil {
		return nil, err
	}
	b.markLowGradients()
	if !opts.NoFusion {
		b.fuseBackward()
	}
	return g, nil
}

// layer adds the nodes of l applied to in (at pos, the call) and returns
// its output. A layer applied a second time reuses its parameters.
func (b *builder) layer(l *spec.Layer, pos spec.Pos, in []*Value) (*Value, error) {
	if l.Kind == spec.Sequential {
		if len(in) != 1 {
			return nil, &CompileError{Pos: pos, Layer: l.Label(), Err: fmt.Errorf("takes one tensor, got %d", len(in))}
		}
		x := in[0]
		for _, c := range l.Layers {
			var err error
			if x, err = b.layer(c, c.Pos, []*Value{x}); err != nil {
				return nil, err
			}
		}
		return x, nil
	}
	x := in[0]
	node := &Node{Layer: l.Label(), Pos: pos}
	name := l.Path
	if name == "" {
		name = string(l.Kind)
	}
	params, err := b.paramsOf(l)
	if err != nil {
		return nil, err
	}
	switch {
	case l.Op != "":
		// A layer that is one op (nn.relu, nn.silu, …): the op's own
		// definition checks its input.
		if d := ops.Lookup(l.Op); d == nil || !d.Forward() {
			return nil, &CompileError{Pos: pos, Layer: l.Label(), Err: fmt.Errorf("%q is not a forward op", l.Op)}
		}
		node.Op = l.Op
	case l.Kind == spec.Conv2D:
		node.Op = ops.Conv2D
		node.Attrs = ops.Attrs{Stride: l.Stride, Padding: l.Padding, Groups: l.Groups}
		in = []*Value{x, params[0], params[1]}
	case l.Kind == spec.Linear:
		node.Op = ops.Linear
		in = []*Value{x, params[0], params[1]}
	case l.Kind == spec.MaxPool2D:
		node.Op = ops.MaxPool2D
		node.Attrs = ops.Attrs{Kernel: l.Kernel, Stride: l.Stride}
	case l.Kind == spec.Dropout:
		node.Op = ops.Dropout
		node.Attrs = ops.Attrs{P: l.P}
	case l.Kind == spec.Dropout2D:
		node.Op = ops.Dropout2D
		node.Attrs = ops.Attrs{P: l.P}
	case l.Kind == spec.Softmax || l.Kind == spec.LogSoftmax:
		node.Op = map[spec.LayerKind]ops.Op{spec.Softmax: ops.Softmax, spec.LogSoftmax: ops.LogSoftmax}[l.Kind]
		node.Attrs = ops.Attrs{Causal: l.Causal}
		if dim := softmaxDim(l, len(x.Shape)); dim != len(x.Shape)-1 {
			return b.softmaxOver(node, x, dim, pos, name)
		}
	case l.Kind == spec.Embedding:
		if !x.Int {
			return nil, &CompileError{Pos: pos, Layer: l.Label(), Err: fmt.Errorf("takes integer ids (token data, data.positions()), got a float tensor %v", x.Shape)}
		}
		if x.ids > l.In {
			// PyTorch raises "index out of range in self" at the first
			// such id; here no id is read before the check.
			return nil, &CompileError{Pos: pos, Layer: l.Label(), Err: fmt.Errorf("its table has %d rows (ids 0 … %d), but %s: an id past the table has no row (PyTorch: \"index out of range in self\"); declare nn.embedding(%d, %d)",
				l.In, l.In-1, x.idsFrom, x.ids, l.Out)}
		}
		node.Op = ops.Embedding
		in = []*Value{x, params[0]}
	case l.Kind == spec.LayerNorm:
		node.Op = ops.LayerNorm
		node.Attrs = ops.Attrs{Eps: l.Eps}
		if x.Shape[len(x.Shape)-1] != l.In {
			return nil, &CompileError{Pos: pos, Layer: l.Label(), Err: fmt.Errorf("input has shape %v, the layer normalises a last dimension of %d", x.Shape, l.In)}
		}
		in = []*Value{x, params[0], params[1]}
	case l.Kind == spec.GELU:
		node.Op = ops.GELU
		node.Attrs = ops.Attrs{Approximate: l.Approximate}
	case l.Kind == spec.MultiheadAttention:
		return b.attention(l, pos, x, name, params)
	case l.Kind == spec.MatMulOp:
		node.Op, node.Layer = ops.BatchMatMul, matmulLayer
	case l.Kind == spec.TransposeOp:
		perm, err := transposePerm(len(x.Shape), l.Dims)
		if err != nil {
			return nil, &CompileError{Pos: pos, Layer: "transpose", Err: err}
		}
		node.Op, node.Layer, node.Attrs = ops.Permute, "transpose", ops.Attrs{Perm: perm}
	case l.Kind == spec.PositionsOp:
		node.Op, node.Layer = ops.Positions, "data.positions()"
		if err := b.apply(node, in, name); err != nil {
			return nil, err
		}
		out := node.Out[0]
		out.ids = out.Shape[1]
		out.idsFrom = fmt.Sprintf("data.positions() gives ids 0 … %d (windows of %d tokens)", out.ids-1, out.ids)
		return out, nil
	case l.Kind == spec.Identity:
		return x, nil
	case l.Kind == spec.LeakyReLU:
		node.Op = ops.LeakyReLU
		node.Attrs = ops.Attrs{NegativeSlope: l.Slope}
	case l.Kind == spec.AvgPool2D:
		node.Op = ops.AvgPool2D
		node.Attrs = ops.Attrs{Kernel: l.Kernel, Stride: l.Stride, Padding: l.Padding}
	case l.Kind == spec.MeanOp:
		// x.mean((2, 3)): the planes' means, [N, C, H, W] → [N, C].
		node.Op, node.Layer = ops.GlobalAvgPool2D, ".mean((2, 3))"
		if err := b.apply(node, in, name); err != nil {
			return nil, err
		}
		return b.reshape(node.Out[0], []int{-1}, pos, name)
	case l.Kind == spec.BatchNorm1D || l.Kind == spec.BatchNorm2D:
		return b.batchNorm(l, pos, x, name, params)
	case l.Kind == spec.AddOp || l.Kind == spec.SubOp || l.Kind == spec.MulOp:
		node.Op = map[spec.LayerKind]ops.Op{spec.AddOp: ops.Add, spec.SubOp: ops.Sub, spec.MulOp: ops.Mul}[l.Kind]
		node.Layer = applySymbol[l.Kind]
		if !slices.Equal(in[0].Shape, in[1].Shape) {
			return nil, &CompileError{Pos: pos, Layer: node.Layer, Err: fmt.Errorf("shapes %v and %v differ (broadcasting is not supported)", in[0].Shape[1:], in[1].Shape[1:])}
		}
	case l.Kind == spec.ReshapeOp:
		return b.reshape(x, l.Dims, pos, name)
	case l.Kind == spec.CatOp:
		// nn.cat([a, b, c]): ((a, b), c) along the channels.
		out := in[0]
		for _, v := range in[1:] {
			node := &Node{Op: ops.Concat, Layer: "nn.cat", Pos: pos}
			if err := b.apply(node, []*Value{out, v}, "cat"); err != nil {
				return nil, err
			}
			out = node.Out[0]
		}
		return out, nil
	default:
		return nil, &CompileError{Pos: pos, Layer: l.Label(), Err: fmt.Errorf("unknown layer kind %q", l.Kind)}
	}
	if err := b.apply(node, in, name); err != nil {
		return nil, err
	}
	return node.Out[0], nil
}

// paramsOf returns l's parameters (weight, then bias or nil), made at its
// first application and named after its path.
func (b *builder) paramsOf(l *spec.Layer) ([]*Value, error) {
	if ps, ok := b.params[l]; ok {
		return ps, nil
	}
	var ps []*Value
	param := func(suffix string, shape []int, fanIn int, bias bool) *Value {
		v := b.value(l.Path+"."+suffix, shape, false)
		p := &Param{Name: v.Name, Value: v, FanIn: fanIn, Bias: bias, Layer: l}
		v.Param = p
		v.needsGrad = true
		b.g.Params = append(b.g.Params, p)
		return v
	}
	if l.Kind == spec.Linear && l.Tie != nil {
		// Weight tying: the embedding's weight, applied as this layer's.
		tied, err := b.paramsOf(l.Tie)
		if err != nil {
			return nil, err
		}
		if err := b.claimPath(l); err != nil {
			return nil, err
		}
		tied[0].Param.Aliases = append(tied[0].Param.Aliases, l.Path+".weight")
		ps = []*Value{tied[0], nil}
		if l.Bias {
			ps[1] = param("bias", []int{l.Out}, l.In, true)
		}
		b.params[l] = ps
		return ps, nil
	}
	switch l.Kind {
	case spec.Embedding:
		if err := b.claimPath(l); err != nil {
			return nil, err
		}
		w := param("weight", []int{l.In, l.Out}, l.Out, false)
		w.Param.Init = spec.Init{Kind: "normal", Value: 1} // nn.Embedding's N(0, 1)
		if l.Init != "" {
			w.Param.Init = spec.ParseInit(l.Init)
		}
		ps = []*Value{w}
	case spec.LayerNorm:
		if !l.Affine {
			break
		}
		if err := b.claimPath(l); err != nil {
			return nil, err
		}
		ps = []*Value{param("weight", []int{l.In}, 0, false), param("bias", []int{l.In}, 0, true)}
		ps[0].Param.Init = spec.Init{Kind: "constant", Value: 1}
		ps[1].Param.Init = spec.Init{Kind: "constant"}
	case spec.MultiheadAttention:
		if err := b.claimPath(l); err != nil {
			return nil, err
		}
		d := l.In
		win := param("in_proj_weight", []int{3 * d, d}, d, false)
		win.Param.FanOut = 3 * d
		win.Param.Init = spec.Init{Kind: "xavier_uniform"} // as nn.MultiheadAttention's _reset_parameters
		wout := param("out_proj.weight", []int{d, d}, d, false)
		ps = []*Value{win, nil, wout, nil}
		if l.Bias {
			ps[1] = param("in_proj_bias", []int{3 * d}, d, true)
			ps[1].Param.Init = spec.Init{Kind: "constant"}
			ps[3] = param("out_proj.bias", []int{d}, d, true)
			ps[3].Param.Init = spec.Init{Kind: "constant"}
		}
	case spec.BatchNorm1D, spec.BatchNorm2D:
		if !l.Affine && !l.TrackStats {
			break
		}
		if err := b.claimPath(l); err != nil {
			return nil, err
		}
		ps = []*Value{nil, nil}
		if l.Affine {
			ps[0], ps[1] = param("weight", []int{l.In}, 0, false), param("bias", []int{l.In}, 0, true)
			ps[0].Param.Init = spec.Init{Kind: "constant", Value: 1}
			ps[1].Param.Init = spec.Init{Kind: "constant"}
			if l.Init != "" {
				ps[0].Param.Init = spec.ParseInit(l.Init)
			}
		}
		if l.TrackStats {
			stat := func(suffix string, shape []int, fill float32) *Value {
				v := b.value(l.Path+"."+suffix, shape, false)
				b.g.Stats = append(b.g.Stats, &Stat{Name: v.Name, Value: v, Fill: fill, Layer: l})
				return v
			}
			ps = append(ps, stat("running_mean", []int{l.In}, 0), stat("running_var", []int{l.In}, 1),
				stat("num_batches_tracked", []int{1}, 0))
		}
	case spec.Conv2D, spec.Linear:
		if err := b.claimPath(l); err != nil {
			return nil, err
		}
		shape, fan := []int{l.Out, l.In}, l.In
		if l.Kind == spec.Conv2D {
			groups := max(l.Groups, 1)
			shape = []int{l.Out, l.In / groups, l.Kernel, l.Kernel}
			fan = l.In / groups * l.Kernel * l.Kernel
		}
		ps = []*Value{param("weight", shape, fan, false), nil}
		ps[0].Param.FanOut = shape[0] * fan / shape[1]
		if l.Bias {
			ps[1] = param("bias", []int{l.Out}, fan, true)
		}
	}
	b.params[l] = ps
	return ps, nil
}

// transposePerm is the permutation of x.transpose(d1, d2) on rank dims.
func transposePerm(rank int, dims []int) ([6]int8, error) {
	var perm [6]int8
	if rank > len(perm) {
		return perm, fmt.Errorf("tensors of rank %d: at most %d dimensions", rank, len(perm))
	}
	for i := range perm {
		perm[i] = int8(i)
	}
	a, c := dims[0], dims[1]
	if a < 0 {
		a += rank
	}
	if c < 0 {
		c += rank
	}
	if a <= 0 || c <= 0 || a >= rank || c >= rank {
		return perm, fmt.Errorf("dimensions (%d, %d) of a rank-%d tensor: want two of 1 … %d (the batch stays first)", dims[0], dims[1], rank, rank-1)
	}
	perm[a], perm[c] = int8(c), int8(a)
	return perm, nil
}

// attention adds self-attention by layer l (nn.MultiheadAttention's
// parameters: in_proj_weight and bias, out_proj) over x [N, T, D]: one
// projection to q, k and v, the attention of each head, the heads joined
// and the output projection. The attention of the heads is one fused
// ops.Attention, which never holds the T×T weights (fusedAttention says
// when); otherwise it is built from primitives: split by heads, scaled
// scores q·kᵀ/√dh, softmax (causal when asked), dropout, the weighted sum
// of v.
func (b *builder) attention(l *spec.Layer, pos spec.Pos, x *Value, name string, params []*Value) (*Value, error) {
	label := l.Label()
	if len(x.Shape) != 3 || x.Shape[2] != l.In {
		return nil, &CompileError{Pos: pos, Layer: label, Err: fmt.Errorf("input has shape %v, want [N T %d]", x.Shape, l.In)}
	}
	t, d, h := x.Shape[1], l.In, l.Heads
	dh := d / h
	step := func(op ops.Op, a ops.Attrs, in []*Value, part string) (*Value, error) {
		n := &Node{Op: op, Attrs: a, Layer: label, Pos: pos}
		if err := b.apply(n, in, name+":"+part); err != nil {
			return nil, err
		}
		return n.Out[0], nil
	}
	qkv, err := step(ops.Linear, ops.Attrs{}, []*Value{x, params[0], params[1]}, "qkv")
	if err != nil {
		return nil, err
	}
	if qkv, err = b.reshape(qkv, []int{t, 3, h, dh}, pos, name+":qkv"); err != nil {
		return nil, err
	}
	if b.fusedAttention(l, dh) {
		o, err := step(ops.Attention, ops.Attrs{Causal: l.Causal}, []*Value{qkv}, "attention")
		if err != nil {
			return nil, err
		}
		return step(ops.Linear, ops.Attrs{}, []*Value{o, params[2], params[3]}, "out_proj")
	}
	// [N, T, 3, H, dh] → [N, 3, H, T, dh]: q, k and v are slices of dimension 1.
	if qkv, err = step(ops.Permute, ops.Attrs{Perm: [6]int8{0, 2, 3, 1, 4, 5}}, []*Value{qkv}, "heads"); err != nil {
		return nil, err
	}
	var qkvs [3]*Value
	for i, part := range []string{"q", "k", "v"} {
		v, err := step(ops.Narrow, ops.Attrs{Offset: i, Length: 1}, []*Value{qkv}, part)
		if err != nil {
			return nil, err
		}
		if qkvs[i], err = b.reshape(v, []int{h, t, dh}, pos, name+":"+part); err != nil {
			return nil, err
		}
	}
	scores, err := step(ops.BatchMatMul, ops.Attrs{TransB: true}, []*Value{qkvs[0], qkvs[1]}, "scores")
	if err != nil {
		return nil, err
	}
	if scores, err = step(ops.Scale, ops.Attrs{Alpha: 1 / math.Sqrt(float64(dh))}, []*Value{scores}, "scaled"); err != nil {
		return nil, err
	}
	att, err := step(ops.Softmax, ops.Attrs{Causal: l.Causal}, []*Value{scores}, "weights")
	if err != nil {
		return nil, err
	}
	if l.P > 0 {
		n := &Node{Op: ops.Dropout, Attrs: ops.Attrs{P: l.P}, Layer: label, Pos: pos}
		if err := b.apply(n, []*Value{att}, name+":dropout"); err != nil {
			return nil, err
		}
		att = n.Out[0]
	}
	o, err := step(ops.BatchMatMul, ops.Attrs{}, []*Value{att, qkvs[2]}, "mix")
	if err != nil {
		return nil, err
	}
	if o, err = step(ops.Permute, ops.Attrs{Perm: [6]int8{0, 2, 1, 3, 4, 5}}, []*Value{o}, "join"); err != nil {
		return nil, err
	}
	if o, err = b.reshape(o, []int{t, d}, pos, name+":join"); err != nil {
		return nil, err
	}
	return step(ops.Linear, ops.Attrs{}, []*Value{o, params[2], params[3]}, "out_proj")
}

// matmulLayer labels the nodes of a script's nn.matmul (which
// fuseAttention may fuse; nn.multihead_attention's own products it leaves
// alone).
const matmulLayer = "nn.matmul"

// fusedAttention reports whether attention layer l, with heads of dh,
// lowers to the fused ops.Attention: by default, unless the script asked
// for the unfused path (nn.multihead_attention(..., fused = False)), the
// cluster turned fusion off (fusion = false), the backend lacks the op
// (TargetFusions), the layer has attention dropout (which needs the T×T
// weights) or its heads are wider than ops.AttentionMaxHeadDim, or the
// plan is mixed precision (GraphOptions.Precision) and the target has no
// fused kernels for it: PyTorch 1.13's CPU torch.autocast casts the
// scores and the weights to bfloat16 between the products, which the
// primitives' casts do (engine/precision.go). Under bf16 a target that
// runs the fused attention with bfloat16 operands (GraphOptions.FusedBF16:
// CUDA) keeps it fused, as PyTorch's scaled_dot_product_attention under
// autocast on a GPU is; autocast then gives the node Precision bf16
// (ops.AutocastLower) and ops/attention_bf16.go says what it computes.
func (b *builder) fusedAttention(l *spec.Layer, dh int) bool {
	if l.Unfused || l.P != 0 || dh > ops.AttentionMaxHeadDim || b.opts.NoFusion || !b.opts.supports(ops.Attention, ops.AttentionGrad) {
		return false
	}
	switch b.opts.Precision {
	case ops.FP32:
		return true
	case ops.BF16:
		return slices.Contains(b.opts.FusedBF16, ops.Attention) && slices.Contains(b.opts.FusedBF16, ops.AttentionGrad)
	}
	return false
}

// softmaxDim is the dimension a softmax layer normalises, in a rank-r
// input (the last by default; negative counts from the end).
func softmaxDim(l *spec.Layer, r int) int {
	d := -1
	if len(l.Dims) > 0 {
		d = l.Dims[0]
	}
	if d < 0 {
		d += r
	}
	return d
}

// softmaxOver applies the (log-)softmax node over dimension dim of x, not
// the last: the two swapped by a permute before and after.
func (b *builder) softmaxOver(node *Node, x *Value, dim int, pos spec.Pos, name string) (*Value, error) {
	r := len(x.Shape)
	if dim <= 0 || dim >= r {
		return nil, &CompileError{Pos: pos, Layer: node.Layer, Err: fmt.Errorf("dimension %d of a rank-%d input %v: want one of 1 … %d (not the batch)", dim, r, x.Shape, r-1)}
	}
	if node.Attrs.Causal {
		return nil, &CompileError{Pos: pos, Layer: node.Layer, Err: fmt.Errorf("causal masking applies over the last dimension only")}
	}
	perm, err := transposePerm(r, []int{dim, r - 1})
	if err != nil {
		return nil, &CompileError{Pos: pos, Layer: node.Layer, Err: err}
	}
	swap := func(v *Value, vname string) (*Value, error) {
		n := &Node{Op: ops.Permute, Attrs: ops.Attrs{Perm: perm}, Layer: node.Layer, Pos: pos}
		if err := b.apply(n, []*Value{v}, vname); err != nil {
			return nil, err
		}
		return n.Out[0], nil
	}
	t, err := swap(x, name+":to last")
	if err != nil {
		return nil, err
	}
	if err := b.apply(node, []*Value{t}, name+":over last"); err != nil {
		return nil, err
	}
	return swap(node.Out[0], name) // the layer's output keeps its name
}

// applySymbol names the tensor operators in messages.
var applySymbol = map[spec.LayerKind]string{spec.AddOp: "+", spec.SubOp: "-", spec.MulOp: "*"}

// batchNorm adds batch normalisation of x by layer l: batch statistics
// (summed over every device when l.Sync), the normalisation, and the
// running statistics' update; evaluation normalises with the running
// statistics instead. params are l's weight, bias (nil without affine)
// and, with track_running_stats, its running mean, variance and count.
func (b *builder) batchNorm(l *spec.Layer, pos spec.Pos, x *Value, name string, params []*Value) (*Value, error) {
	label := l.Label()
	fail := func(format string, a ...any) error {
		return &CompileError{Pos: pos, Layer: label, Err: fmt.Errorf(format, a...)}
	}
	want := "[N, C] or [N, C, L]"
	if l.Kind == spec.BatchNorm2D {
		want = "[N, C, H, W]"
	}
	if r := len(x.Shape); (l.Kind == spec.BatchNorm2D && r != 4) || (l.Kind == spec.BatchNorm1D && r != 2 && r != 3) {
		return nil, fail("input has shape %v, want %s", x.Shape, want)
	}
	if x.Shape[1] != l.In {
		return nil, fail("input has %d channels (shape %v), the layer was declared with num_features %d", x.Shape[1], x.Shape, l.In)
	}
	// The batches each device feeds it are checked against it when the
	// Plan knows them (checkBatchNorm, CheckBatches).
	b.g.BatchNorms = append(b.g.BatchNorms, BatchNormUse{Layer: label, Pos: pos, PerSample: x.Elems() / x.Shape[0] / x.Shape[1], Sync: l.Sync, EvalBatch: !l.TrackStats})
	if l.Sync && !l.TrackStats {
		return nil, fail("sync = True needs track_running_stats = True: evaluation batches differ between devices, so they cannot share batch statistics")
	}
	var gamma, beta *Value
	if l.Affine {
		gamma, beta = params[0], params[1]
	}
	eps := ops.Attrs{Eps: l.Eps}
	stats := &Node{Op: ops.BatchNormStats, Layer: label, Pos: pos, AllReduce: l.Sync, TrainOnly: l.TrackStats}
	if err := b.apply(stats, []*Value{x}, name+":stats"); err != nil {
		return nil, err
	}
	norm := &Node{Op: ops.BatchNormNorm, Attrs: eps, Layer: label, Pos: pos}
	if err := b.apply(norm, []*Value{x, stats.Out[0], gamma, beta}, name); err != nil {
		return nil, err
	}
	y := norm.Out[0]
	if l.TrackStats {
		rm, rv, count := params[2], params[3], params[4]
		b.g.Forward = append(b.g.Forward, &Node{Op: ops.BatchNormRunning, Attrs: ops.Attrs{BNMomentum: l.Momentum},
			In: []*Value{norm.Out[1], rm, rv, count}, Layer: label, Pos: pos, TrainOnly: true})
		norm.Eval = &Node{Op: ops.BatchNormEval, Attrs: eps, In: []*Value{x, rm, rv, gamma, beta}, Out: []*Value{y}, Layer: label, Pos: pos}
	}
	return y, nil
}

// claimPath refuses two layers with parameters under one name.
func (b *builder) claimPath(l *spec.Layer) error {
	if l.Path == "" {
		return &CompileError{Pos: l.Pos, Layer: l.Label(), Err: fmt.Errorf("a layer with parameters needs a name")}
	}
	if prev, dup := b.paths[l.Path]; dup && prev != l {
		return &CompileError{Pos: l.Pos, Layer: l.Label(),
			Err: fmt.Errorf("name %q is already used by the %s declared at %s", l.Path, prev.Kind, prev.Pos)}
	}
	b.paths[l.Path] = l
	return nil
}

// reshape views x with the sample shape dims (one may be -1).
func (b *builder) reshape(x *Value, dims []int, pos spec.Pos, name string) (*Value, error) {
	have := 1
	for _, d := range x.Shape[1:] {
		have *= d
	}
	shape, free, known := []int{x.Shape[0]}, -1, 1
	for i, d := range dims {
		if d == -1 {
			free = i
			continue
		}
		known *= d
	}
	shape = append(shape, dims...)
	if free >= 0 && known > 0 && have%known == 0 {
		shape[1+free] = have / known
		known = have
	}
	if known != have {
		return nil, &CompileError{Pos: pos, Layer: "reshape", Err: fmt.Errorf("cannot view samples of shape %v (%d values) as %v (after the batch)", x.Shape[1:], have, dims)}
	}
	// A view: the Flatten op's buffer aliasing, with the asked shape.
	node := &Node{Op: ops.Flatten, In: []*Value{x}, Layer: "reshape", Pos: pos}
	v := b.value(name, shape, x.Batched)
	v.Producer = node
	v.needsGrad = x.needsGrad
	node.Out = []*Value{v}
	b.g.Forward = append(b.g.Forward, node)
	return v, nil
}

// apply infers the output shapes of node with inputs in and adds it to the
// forward pass. Its outputs are batched when in[0] is, and need a gradient
// when an input does, as far as the op's definition allows (ops.Output).
func (b *builder) apply(node *Node, in []*Value, name string) error {
	shapes := make([][]int, len(in))
	for i, v := range in {
		if v != nil {
			shapes[i] = v.Shape
		}
	}
	out, err := ops.Infer(node.Op, &node.Attrs, shapes)
	if err != nil {
		return &CompileError{Pos: node.Pos, Layer: node.Layer, Err: err}
	}
	node.In = in
	needsGrad := false
	for _, x := range in {
		if x != nil && x.needsGrad {
			needsGrad = true
		}
	}
	def := ops.Lookup(node.Op)
	for i, s := range out {
		vn := name
		if i > 0 {
			vn = fmt.Sprintf("%s:%d", name, i)
		}
		o := def.Out[i]
		v := b.value(vn, s, in[0].Batched && !o.Unbatched)
		v.Producer = node
		v.Int = o.Int
		v.needsGrad = needsGrad && !o.Int && !o.NoGrad
		node.Out = append(node.Out, v)
	}
	b.g.Forward = append(b.g.Forward, node)
	return nil
}

func (b *builder) loss(l Loss) error {
	g := b.g
	out := g.Output
	node := &Node{Layer: "loss " + strconv.Quote(l.Kind), Pos: l.Pos}
	switch l.Kind {
	case "nll":
		node.Op = ops.NLLLoss
	case "cross_entropy":
		node.Op = ops.CrossEntropy
		node.Attrs.LabelSmoothing = l.LabelSmoothing
	case "mse":
		node.Op = ops.MSELoss
	default:
		return fmt.Errorf("unknown loss %q (want \"nll\", \"cross_entropy\" or \"mse\")", l.Kind)
	}
	switch {
	case l.Kind == "mse" && l.Target == nil:
		return &CompileError{Pos: l.Pos, Layer: node.Layer,
			Err: fmt.Errorf("mse needs float targets (regression data, such as data.tensors with a float y); this dataset has %d classes: use \"cross_entropy\"", l.Classes)}
	case l.Kind == "mse" && !slices.Equal(out.Shape[1:], l.Target):
		return &CompileError{Pos: l.Pos, Layer: node.Layer,
			Err: fmt.Errorf("the model's output has shape %v, want [N %s] (the shape of one sample's target)", out.Shape, strings.Trim(fmt.Sprint(l.Target), "[]"))}
	case l.Kind != "mse" && l.Target != nil:
		return &CompileError{Pos: l.Pos, Layer: node.Layer,
			Err: fmt.Errorf("the data have float targets of shape %v (regression): use loss = \"mse\"", l.Target)}
	case l.Kind != "mse" && l.Tokens && !slices.Equal(out.Shape, append(slices.Clone(g.Target.Shape), l.Classes)):
		return &CompileError{Pos: l.Pos, Layer: node.Layer,
			Err: fmt.Errorf("the model's output has shape %v, want %v (a score for each of the %d tokens of the vocabulary at every position)",
				out.Shape, append(slices.Clone(g.Target.Shape), l.Classes), l.Classes)}
	case l.Kind != "mse" && !l.Tokens && (len(out.Shape) != 2 || out.Shape[1] != l.Classes):
		return &CompileError{Pos: l.Pos, Layer: node.Layer,
			Err: fmt.Errorf("the model's output has shape %v, want [N %d] (one score per class of the dataset)", out.Shape, l.Classes)}
	}
	if l.IgnoreIndex != nil {
		node.Attrs.HasIgnore, node.Attrs.IgnoreIndex = true, *l.IgnoreIndex
	}
	if err := b.apply(node, []*Value{out, g.Target}, "loss"); err != nil {
		return err
	}
	g.Loss = node.Out[0] // unbatched, [1]
	return nil
}
