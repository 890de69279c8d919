package script

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"go.starlark.net/starlark"

	"gorun/engine/spec"
	"gorun/ops"
)

// trainParams are train()'s parameters, each overridable with --set.
var trainParams = []string{
	"model", "loss", "data", "eval", "partition", "sync", "optimizer",
	"batch_size", "epochs", "seed", "max_steps", "shuffle", "accumulate", "uneven", "keep",
	"on_nonfinite", "label_smoothing", "schedule", "clip_grad_norm", "ignore_index",
	"precision",
}

// maxEpochs bounds train(epochs = ...): the runner keeps a few words per
// epoch, and epochs × steps per epoch must not overflow the schedules'
// step counts. A run meant to stop earlier says so with max_steps.
const maxEpochs = 1_000_000

func isTrainParam(name string) bool {
	for _, p := range trainParams {
		if p == name {
			return true
		}
	}
	return false
}

// trainBuiltin implements train(**kwargs): it records the Spec on the
// thread's state, after applying --set overrides.
func trainBuiltin(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	st := stateOf(thread)
	if st == nil || st.loader == nil || thread.Name != "main" {
		return nil, fmt.Errorf("%s: only the main script may call train(...), not a loaded file", b.Name())
	}
	if st.spec != nil {
		return nil, fmt.Errorf("%s: called twice (first at %s)", b.Name(), st.spec.Pos)
	}
	if len(args) > 0 {
		return nil, fmt.Errorf("%s: takes keyword arguments only (train(model = ..., data = ...))", b.Name())
	}
	kw, err := applyOverrides(thread, kwargs, st.overrides)
	if err != nil {
		return nil, err
	}

	var (
		model, partition starlark.Value = starlark.None, starlark.None
		dataV, evalV     starlark.Value = starlark.None, starlark.None
		syncV, optV      starlark.Value = starlark.None, starlark.None
		lossV            starlark.Value
		batch, epochs    = 64, 1
		seed             int64
		maxSteps         int
		shuffle          = true
		accumulate       = 1
		uneven           = "pad"
		keep             = 3
		onNonFinite      = "stop"
		labelSmoothing   number
		scheduleV        = starlark.Value(starlark.None)
		clipNorm         number
		ignoreV          = starlark.Value(starlark.None)
		precision        = "fp32"
	)
	if err := starlark.UnpackArgs(b.Name(), nil, kw,
		"model", &model, "loss", &lossV, "data", &dataV, "optimizer", &optV,
		"eval?", &evalV, "partition?", &partition, "sync?", &syncV,
		"batch_size?", &batch, "epochs?", &epochs, "seed?", &seed, "max_steps?", &maxSteps,
		"shuffle?", &shuffle, "accumulate?", &accumulate, "uneven?", &uneven, "keep?", &keep,
		"on_nonfinite?", &onNonFinite, "label_smoothing?", &labelSmoothing, "schedule?", &scheduleV, "clip_grad_norm?", &clipNorm, "ignore_index?", &ignoreV,
		"precision?", &precision); err != nil {
		return nil, err
	}
	loss, lc, err := lossOf(b, lossV)
	if err != nil {
		return nil, err
	}
	if lc.Kind != "" {
		if labelSmoothing != 0 || ignoreV != starlark.None {
			return nil, fmt.Errorf("%s: give label_smoothing and ignore_index to the loss, %s, not to train", b.Name(), lossV.String())
		}
		labelSmoothing = number(lc.LabelSmoothing)
		if lc.IgnoreIndex != nil {
			ignoreV = starlark.MakeInt(*lc.IgnoreIndex)
		}
	}
	s := &spec.Spec{
		Loss: loss, BatchSize: batch, Epochs: epochs, Seed: seed, MaxSteps: maxSteps,
		Shuffle: shuffle, Accumulate: accumulate, Uneven: uneven, Keep: keep, OnNonFinite: onNonFinite, LabelSmoothing: float64(labelSmoothing), ClipGradNorm: float64(clipNorm), Pos: position(thread),
	}
	if s.Precision, err = ops.ParsePrecision(precision); err != nil {
		return nil, fmt.Errorf("%s: %v", b.Name(), err)
	}
	tr, err := traceOf(thread)
	if err != nil {
		return nil, err
	}
	switch m := model.(type) {
	case *Layer:
		s.Model = spec.SequentialModel(m.L)
		err = tr.resolve(m.L)
	case *Tensor:
		s.Model, err = tr.model(m)
	default:
		return nil, fmt.Errorf("%s: model: got %s, want a layer such as nn.sequential(...) or the tensor a model computes from data.input()", b.Name(), model.Type())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: model: %w", b.Name(), err)
	}
	if loss != "nll" && loss != "cross_entropy" && loss != "mse" {
		return nil, fmt.Errorf("%s: loss must be \"nll\", \"cross_entropy\" or \"mse\", got %q", b.Name(), loss)
	}
	d, err := configOf[spec.Data](b, "data", dataV, "data.mnist(...)")
	if err != nil {
		return nil, err
	}
	s.Data = d
	if evalV != starlark.None {
		e, err := configOf[spec.Data](b, "eval", evalV, "data.mnist(...) or None")
		if err != nil {
			return nil, err
		}
		if len(e.Transforms) > 0 {
			return nil, fmt.Errorf("%s: eval: transforms are for training data (evaluation sees each sample as it is); drop transforms= from the eval set", b.Name())
		}
		s.Eval = &e
	}
	if s.Optimizer, err = configOf[spec.Optimizer](b, "optimizer", optV, "optim.sgd(...) or optim.adam(...)"); err != nil {
		return nil, err
	}
	if ignoreV != starlark.None {
		var ig int
		if err := starlark.AsInt(ignoreV, &ig); err != nil {
			return nil, fmt.Errorf("%s: ignore_index: got %s, want an int (such as -100) or None", b.Name(), ignoreV.Type())
		}
		if loss == "mse" {
			return nil, fmt.Errorf("%s: ignore_index applies to the class losses (\"cross_entropy\", \"nll\"), not %q", b.Name(), loss)
		}
		s.IgnoreIndex = &ig
	}
	if scheduleV != starlark.None {
		sc, err := configOf[spec.Schedule](b, "schedule", scheduleV, "sched.step(...), sched.cosine(...), sched.linear_warmup(...) or sched.onecycle(...)")
		if err != nil {
			return nil, err
		}
		s.Schedule = &sc
	}
	if syncV == starlark.None {
		s.Sync = spec.Sync{Kind: spec.SyncAllReduce, Op: "mean", BucketMB: 25, Overlap: true, BroadcastBuffers: true, Pos: s.Pos}
	} else if s.Sync, err = configOf[spec.Sync](b, "sync", syncV, "sync.allreduce(...), sync.parameter_server(...), sync.local_sgd(...), sync.none(), sync.zero(...) or sync.fsdp(...)"); err != nil {
		return nil, err
	}
	if partition != starlark.None {
		fn, ok := partition.(starlark.Callable)
		if !ok {
			return nil, fmt.Errorf("%s: partition: got %s, want a function", b.Name(), partition.Type())
		}
		if err := partitionTakesOneArgument(fn); err != nil {
			return nil, fmt.Errorf("%s: partition: %v", b.Name(), err)
		}
		s.Partition = newPartition(st.loader, fn)
	}
	switch {
	case batch < 1:
		return nil, fmt.Errorf("%s: batch_size must be ≥ 1, got %d", b.Name(), batch)
	case epochs < 1 || epochs > maxEpochs:
		return nil, fmt.Errorf("%s: epochs must be in [1, %d], got %d (max_steps stops a run early)", b.Name(), maxEpochs, epochs)
	case maxSteps < 0:
		return nil, fmt.Errorf("%s: max_steps must be ≥ 0, got %d", b.Name(), maxSteps)
	case accumulate < 1:
		return nil, fmt.Errorf("%s: accumulate must be ≥ 1, got %d", b.Name(), accumulate)
	case keep < 0:
		return nil, fmt.Errorf("%s: keep must be ≥ 0 (0 keeps every checkpoint), got %d", b.Name(), keep)
	case uneven != "pad" && uneven != "drop" && uneven != "zero":
		return nil, fmt.Errorf("%s: uneven must be \"pad\", \"drop\" or \"zero\", got %q", b.Name(), uneven)
	case clipNorm < 0:
		return nil, fmt.Errorf("%s: clip_grad_norm must be > 0 (or 0 for none), got %g", b.Name(), float64(clipNorm))
	case labelSmoothing < 0 || labelSmoothing >= 1:
		return nil, fmt.Errorf("%s: label_smoothing must be in [0, 1), got %g", b.Name(), float64(labelSmoothing))
	case labelSmoothing != 0 && loss != "cross_entropy":
		return nil, fmt.Errorf("%s: label_smoothing applies to loss = \"cross_entropy\", not %q", b.Name(), loss)
	case onNonFinite != "stop" && onNonFinite != "skip":
		return nil, fmt.Errorf("%s: on_nonfinite must be \"stop\" or \"skip\", got %q", b.Name(), onNonFinite)
	}
	st.spec = s
	return starlark.None, nil
}

// configOf extracts the spec value of type T from a Config argument.
func configOf[T any](b *starlark.Builtin, param string, v starlark.Value, want string) (T, error) {
	var zero T
	c, ok := v.(*Config)
	if ok {
		if t, ok := c.Value.(T); ok {
			return t, nil
		}
	}
	return zero, fmt.Errorf("%s: %s: got %s, want %s", b.Name(), param, v.Type(), want)
}

// applyOverrides returns kwargs with the --set overrides applied in order.
func applyOverrides(thread *starlark.Thread, kwargs []starlark.Tuple, overrides []Override) ([]starlark.Tuple, error) {
	kw := append([]starlark.Tuple(nil), kwargs...)
	find := func(name string) int {
		for i, t := range kw {
			if string(t[0].(starlark.String)) == name {
				return i
			}
		}
		return -1
	}
	for _, o := range overrides {
		param, field, dotted := strings.Cut(o.Name, ".")
		if !isTrainParam(param) {
			return nil, fmt.Errorf("--set %s: train() has no parameter %q (it has %s)", o.Name, param, strings.Join(trainParams, ", "))
		}
		v, err := evalOverride(thread, o)
		if err != nil {
			return nil, err
		}
		i := find(param)
		if dotted {
			if i < 0 {
				return nil, fmt.Errorf("--set %s: the script gives no %s to change; set the whole value with --set %s=...", o.Name, param, param)
			}
			c, ok := kw[i][1].(*Config)
			if !ok {
				return nil, fmt.Errorf("--set %s: %s is a %s, which has no fields to set", o.Name, param, kw[i][1].Type())
			}
			if sv, ok := v.(starlark.String); ok && field == "dir" && sv != "" && !filepath.IsAbs(string(sv)) {
				// A folder on the command line is relative to the
				// working folder, not to the script.
				if abs, err := filepath.Abs(string(sv)); err == nil {
					v = starlark.String(abs)
				}
			}
			nc, err := c.with(thread, field, v)
			if err != nil {
				return nil, fmt.Errorf("--set %s: %v", o.Name, err)
			}
			v = nc
		}
		t := starlark.Tuple{starlark.String(param), v}
		if i < 0 {
			kw = append(kw, t)
		} else {
			kw[i] = t
		}
	}
	return kw, nil
}

// evalOverride evaluates an override's value as a Starlark expression with
// the builtins and the script's globals (those defined or loaded before
// train(...) is called) in scope, so --set partition=strided works after
// load("partition.star", "strided"). A bare word that does not evaluate
// (nll, cross-entropy) is a string; anything else that fails is an error.
func evalOverride(thread *starlark.Thread, o Override) (starlark.Value, error) {
	env := stateOf(thread).loader.predeclared()
	if thread.CallStackDepth() > 1 {
		if fn, ok := thread.DebugFrame(1).Callable().(*starlark.Function); ok {
			for k, v := range fn.Globals() {
				env[k] = v
			}
		}
	}
	v, err := starlark.EvalOptions(fileOptions, thread, "--set "+o.Name, o.Value, env)
	if err == nil {
		return v, nil
	}
	if isPlainWord(o.Value) {
		return starlark.String(o.Value), nil
	}
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		return nil, fmt.Errorf("--set %s=%s: %s", o.Name, o.Value, ee.Msg)
	}
	return nil, fmt.Errorf("--set %s=%s: %v", o.Name, o.Value, err)
}

func failBuiltin(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var parts []string
	for _, a := range args {
		if s, ok := starlark.AsString(a); ok {
			parts = append(parts, s)
		} else {
			parts = append(parts, a.String())
		}
	}
	if len(kwargs) > 0 {
		return nil, fmt.Errorf("fail: unexpected keyword arguments")
	}
	return nil, errors.New(strings.Join(parts, " "))
}

// lossConfig is what nn.cross_entropy(...), nn.nll_loss(...) and
// nn.mse_loss() make: train(loss = ...) takes one or the loss's name.
type lossConfig struct {
	Kind           string
	LabelSmoothing float64
	IgnoreIndex    *int
}

// lossOf reads train's loss: a name ("cross_entropy", "nll", "mse") or a
// loss value from nn.*_loss / nn.cross_entropy.
func lossOf(b *starlark.Builtin, v starlark.Value) (string, lossConfig, error) {
	if name, ok := starlark.AsString(v); ok {
		return name, lossConfig{}, nil
	}
	if c, ok := v.(*Config); ok {
		if l, ok := c.Value.(lossConfig); ok {
			return l.Kind, l, nil
		}
	}
	return "", lossConfig{}, fmt.Errorf("%s: loss: got %s, want \"cross_entropy\", \"nll\", \"mse\" or nn.cross_entropy(...), nn.nll_loss(...), nn.mse_loss()", b.Name(), v.Type())
}

// lossMaker makes nn.cross_entropy(label_smoothing = 0, ignore_index =
// None), nn.nll_loss(ignore_index = None) and nn.mse_loss(), PyTorch's loss
// modules as values for train(loss = ...).
func lossMaker(name, kind string) *configMaker {
	params := []string{"ignore_index?"}
	switch kind {
	case "cross_entropy":
		params = []string{"label_smoothing?", "ignore_index?"}
	case "mse":
		params = nil
	}
	return &configMaker{name: name, params: params,
		build: func(thread *starlark.Thread, n string, kwargs []starlark.Tuple) (any, error) {
			var smoothing number
			ignore := starlark.Value(starlark.None)
			var pairs []any
			for _, p := range params {
				switch p {
				case "label_smoothing?":
					pairs = append(pairs, p, &smoothing)
				case "ignore_index?":
					pairs = append(pairs, p, &ignore)
				}
			}
			if err := unpack(n, kwargs, pairs...); err != nil {
				return nil, err
			}
			if smoothing < 0 || smoothing >= 1 {
				return nil, fmt.Errorf("%s: label_smoothing must be in [0, 1), got %g", n, float64(smoothing))
			}
			l := lossConfig{Kind: kind, LabelSmoothing: float64(smoothing)}
			if ignore != starlark.None {
				var ig int
				if err := starlark.AsInt(ignore, &ig); err != nil {
					return nil, fmt.Errorf("%s: ignore_index: got %s, want an int or None", n, ignore.Type())
				}
				l.IgnoreIndex = &ig
			}
			return l, nil
		}}
}

func init() {
	nnModule.Members["cross_entropy"] = lossMaker("nn.cross_entropy", "cross_entropy").builtin()
	nnModule.Members["nll_loss"] = lossMaker("nn.nll_loss", "nll").builtin()
	nnModule.Members["mse_loss"] = lossMaker("nn.mse_loss", "mse").builtin()
}
