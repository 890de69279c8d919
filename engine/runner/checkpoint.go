package runner

import (
	"encoding/binary"
	"errors"
	"fmt"
	"gorun/datasets"
	"gorun/datasets/userfile"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gorun/comm"
	"gorun/engine"
	"gorun/engine/spec"
	"gorun/ops"
	"gorun/safetensors"
)

// Checkpoint files, inside a run's --out folder:
//
//	checkpoints/step-00000938/model.safetensors  parameters, PyTorch state_dict names
//	checkpoints/step-00000938/state.safetensors  optimizer state, RNG states, progress
//	best.safetensors                             parameters with the best eval accuracy
//	model.safetensors                            the final parameters
//
// A checkpoint is a folder written as one unit: its files go into a
// temporary folder beside it (.step-00000938.tmp-NNN), each synced, and
// the folder, synced, is renamed into place; a checkpoint of the same
// step already there is first renamed aside (.step-00000938.old-NNN) and
// removed once the new one is in. A checkpoint is thus whole or absent:
// a full disk or a crash leaves at most a temporary folder, which readers
// pass over and TidyCheckpoints removes. Run folders of earlier gorun
// versions hold flat checkpoints (step-00000938.safetensors and
// step-00000938.state.safetensors, the state written first); they resume
// as before. The other files are written atomically (temporary file,
// fsync, rename).
const (
	CheckpointDir = "checkpoints"
	BestFile      = "best.safetensors"
	ModelFile     = "model.safetensors"
	stateSuffix   = ".state.safetensors"
	ckptFormat    = "gorun-checkpoint-1"
	// The files of a checkpoint folder.
	ckptParams = "model.safetensors"
	ckptState  = "state.safetensors"
)

// checkpointDir is the folder of the checkpoint at step.
func checkpointDir(dir string, step int) string {
	return filepath.Join(dir, CheckpointDir, fmt.Sprintf("step-%08d", step))
}

// checkpointPath is the parameter file of the checkpoint at step, as this
// gorun writes it (checkpointFiles finds an earlier gorun's too).
func checkpointPath(dir string, step int) string {
	return filepath.Join(checkpointDir(dir, step), ckptParams)
}

// legacyCheckpointPath is the parameter file of a flat checkpoint (earlier
// gorun versions).
func legacyCheckpointPath(dir string, step int) string {
	return filepath.Join(dir, CheckpointDir, fmt.Sprintf("step-%08d.safetensors", step))
}

// statePath is the state file that goes with the parameter file params,
// in either layout.
func statePath(params string) string {
	if filepath.Base(params) == ckptParams {
		return filepath.Join(filepath.Dir(params), ckptState)
	}
	return strings.TrimSuffix(params, ".safetensors") + stateSuffix
}

// checkpointFiles is the parameter file of the checkpoint at step: the
// folder's, or else the flat one an earlier gorun wrote.
func checkpointFiles(dir string, step int) string {
	if p := checkpointPath(dir, step); exists(p) {
		return p
	}
	if p := legacyCheckpointPath(dir, step); exists(p) {
		return p
	}
	return checkpointPath(dir, step)
}

// checkpointName is how messages name the checkpoint at step: its folder,
// or a flat checkpoint's parameter file.
func checkpointName(dir string, step int) string {
	p := checkpointFiles(dir, step)
	if filepath.Base(p) == ckptParams {
		return filepath.Dir(p)
	}
	return p
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// parseStep reads the step of a checkpoint's name: "step-00000938" (a
// folder) or "step-00000938.safetensors" (a flat parameter file).
func parseStep(name string, folder bool) (int, bool) {
	rest, ok := strings.CutPrefix(name, "step-")
	if !folder {
		if strings.HasSuffix(rest, stateSuffix) {
			return 0, false
		}
		rest, ok = strings.CutSuffix(rest, ".safetensors")
	}
	if !ok || rest == "" || strings.Trim(rest, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil
}

// checkpointWriter writes one file of a checkpoint; tests fail it
// (RunOptions.writeTensors).
type checkpointWriter func(path string, ts []safetensors.Tensor, meta map[string]string) error

// progress is where a run stands: what a checkpoint restores.
type progress struct {
	Step  int // optimizer steps taken
	Epoch int // 0-based epoch under way (or next, when Micro is 0)
	Micro int // micro-steps of Epoch already done
	// Accumulators of the epoch under way, so its epoch line is whole.
	GlobalLoss, GlobalCount, TrainSeconds float64
	RankLoss, RankCount                   []float64
	// Skipped counts the epoch's steps that on_nonfinite = "skip" skipped
	// (agreed by every rank).
	Skipped      int
	BestAccuracy float64
	Samples      int64
	// FromDevices and FromSync are the devices and the sync kind of the
	// run that wrote the checkpoint a resumed run starts from (not saved:
	// the metrics' resume line).
	FromDevices int
	FromSync    string
}

// params reads device d's parameters, by Graph.Params: from its
// parameter arena, or, where parameters are sharded, from what the ranks
// last gathered (gatherParams).
func (rs *runState) params(d *worker) ([][]float32, error) {
	p := rs.plan
	all := d.whole
	if !paramsSharded(p) {
		var err error
		if all, err = download(d, d.prog.ParamArena); err != nil {
			return nil, err
		}
	} else if all == nil {
		return nil, fmt.Errorf("%s: the parameters were not gathered", d.dev.Name())
	}
	out := make([][]float32, len(p.Graph.Params))
	for i, prm := range p.Graph.Params {
		out[i] = all[p.ParamOffset(i):][:prm.Value.Elems()]
	}
	return out, nil
}

// paramTensors are rank 0's parameters under their state_dict names.
func (rs *runState) paramTensors() ([]safetensors.Tensor, error) {
	vals, err := rs.params(rs.workers[0])
	if err != nil {
		return nil, err
	}
	var ts []safetensors.Tensor
	for i, prm := range rs.plan.Graph.Params {
		ts = append(ts, safetensors.F32(prm.Name, prm.Value.Shape, vals[i]))
		for _, alias := range prm.Aliases { // a tied weight, under each of PyTorch's names
			ts = append(ts, safetensors.F32(alias, prm.Value.Shape, vals[i]))
		}
	}
	d := rs.workers[0]
	if d.prog.StatArena == nil {
		return ts, nil
	}
	all, err := download(d, d.prog.StatArena)
	if err != nil {
		return nil, err
	}
	for i, st := range rs.plan.Graph.Stats {
		b := d.prog.Stats[i]
		ts = append(ts, safetensors.F32(st.Name, statShape(st), all[b.Offset-d.prog.StatArena.Offset:][:b.Elems()]))
	}
	return ts, nil
}

// statShape is the shape a statistic is saved with: PyTorch's
// num_batches_tracked is a 0-dimensional tensor.
func statShape(st *engine.Stat) []int {
	if strings.HasSuffix(st.Name, ".num_batches_tracked") {
		return []int{}
	}
	return st.Value.Shape
}

// setStats uploads the running statistics of file f to every device.
func (rs *runState) setStats(path string, f *safetensors.File, known map[string]bool) error {
	for i, st := range rs.plan.Graph.Stats {
		known[st.Name] = true
		t, ok := f.Get(st.Name)
		if !ok {
			return fmt.Errorf("%s: no tensor %q for the running statistic %s %v", path, st.Name, st.Name, statShape(st))
		}
		if !slices.Equal(t.Shape, statShape(st)) && !slices.Equal(t.Shape, st.Value.Shape) {
			return fmt.Errorf("%s: running statistic %s: shape %v, the model has %v", path, st.Name, t.Shape, statShape(st))
		}
		v, err := t.Float32s()
		if err != nil {
			return fmt.Errorf("%s: running statistic %s: %v", path, st.Name, err)
		}
		for j, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("%s: running statistic %s holds %v at element %d: it must be finite", path, st.Name, x, j)
			}
		}
		for _, d := range rs.workers {
			b := d.prog.Stats[i]
			if err := d.dev.UploadF32(d.prog.StatArena, b.Offset-d.prog.StatArena.Offset, v[:b.Elems()]); err != nil {
				return err
			}
		}
	}
	return nil
}

// download reads a whole float buffer of device d.
func download(d *worker, b *engine.Buffer) ([]float32, error) {
	v := make([]float32, b.Elems())
	return v, d.dev.DownloadF32(b, 0, v)
}

// saveCheckpoint writes a checkpoint of every rank's state, on rank 0,
// from what gatherState brought there. The ranks must be stopped (the
// caller holds them at a barrier).
func (rs *runState) saveCheckpoint(d *worker, pr *progress, g *gathered) error {
	p := rs.plan
	dir := rs.opts.Out
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(dir, CheckpointDir), 0o755); err != nil {
		return err
	}
	var state []safetensors.Tensor
	for r := 0; r < p.World; r++ {
		state = append(state, safetensors.U8(fmt.Sprintf("rank%d/rng", r), []int{len(g.rng[r])}, g.rng[r]))
		if r > 0 && p.Sync.OwnParams() {
			for i, prm := range p.Graph.Params {
				b := d.prog.Params[i]
				v := g.params[r][b.Offset-d.prog.ParamArena.Offset:][:b.Elems()]
				state = append(state, safetensors.F32(fmt.Sprintf("rank%d/%s", r, prm.Name), prm.Value.Shape, v))
			}
		}
		for _, st := range g.state[r] {
			state = append(state, safetensors.F32(fmt.Sprintf("rank%d/optim/%s", r, st.name), st.shape, st.vals))
		}
	}
	pr.RankLoss, pr.RankCount = g.rankLoss, g.rankCount
	meta := map[string]string{
		"format":        ckptFormat,
		"step":          strconv.Itoa(pr.Step),
		"epoch":         strconv.Itoa(pr.Epoch),
		"micro":         strconv.Itoa(pr.Micro),
		"devices":       strconv.Itoa(p.World),
		"sync":          string(p.Sync.Kind()),
		"seed":          strconv.FormatInt(p.Spec.Seed, 10),
		"global_loss":   fmtF(pr.GlobalLoss),
		"global_count":  fmtF(pr.GlobalCount),
		"train_seconds": fmtF(pr.TrainSeconds),
		"best_accuracy": fmtF(pr.BestAccuracy),
		"samples":       strconv.FormatInt(pr.Samples, 10),
		"skipped_steps": strconv.Itoa(pr.Skipped),
		"rank_loss":     fmtFs(pr.RankLoss),
		"rank_count":    fmtFs(pr.RankCount),
		"plan":          planKey(p.ResumeKey()),
		"plan_format":   engine.ResumeKeyFormat,
		"epochs":        strconv.Itoa(p.Spec.Epochs),
		"max_batch":     strconv.Itoa(p.MaxBatch),
	}
	if w := rs.workers[0]; w.amp.on {
		// fp16: the dynamic loss scale goes on where it was.
		meta["loss_scale"], meta["loss_scale_clean"] = fmtF(w.amp.scale), strconv.Itoa(w.amp.clean)
	}
	ts, err := rs.paramTensors()
	if err != nil {
		return err
	}
	write := rs.opts.writeTensors
	if write == nil {
		write = safetensors.WriteFile
	}
	err = writeCheckpoint(dir, pr.Step, func(tmp string) error {
		if err := write(filepath.Join(tmp, ckptState), state, meta); err != nil {
			return err
		}
		return write(filepath.Join(tmp, ckptParams), ts, rs.paramsMeta(map[string]string{"step": meta["step"]}))
	})
	if err != nil {
		return err
	}
	return rs.pruneCheckpoints()
}

// writeCheckpoint writes the checkpoint of step as one unit: fill writes
// its files into a temporary folder beside the checkpoints, which is
// synced and renamed into place (a checkpoint of the same step there is
// renamed aside first, and removed after). On failure the temporary
// folder is removed and the checkpoints are as they were.
func writeCheckpoint(dir string, step int, fill func(tmp string) error) (err error) {
	parent := filepath.Join(dir, CheckpointDir)
	final := checkpointDir(dir, step)
	base := filepath.Base(final)
	tmp, err := os.MkdirTemp(parent, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing the checkpoint of step %d: %w", step, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := fill(tmp); err != nil {
		return err
	}
	if err := userfile.SyncDir(tmp); err != nil {
		return fmt.Errorf("writing %s: syncing %s: %w", final, tmp, err)
	}
	var aside string
	if _, err := os.Lstat(final); err == nil {
		// The same step again (a resumed run stopped before its first
		// step): the new checkpoint replaces the old.
		// A fresh name (os.Rename does not replace a folder, even empty).
		if aside, err = os.MkdirTemp(parent, "."+base+".old-*"); err != nil {
			return fmt.Errorf("writing %s: %w", final, err)
		}
		os.Remove(aside)
		if err := os.Rename(final, aside); err != nil {
			return fmt.Errorf("writing %s: moving the old one aside: %w", final, err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		if aside != "" {
			os.Rename(aside, final)
		}
		return fmt.Errorf("writing %s: %w", final, err)
	}
	if err := userfile.SyncDir(parent); err != nil {
		return fmt.Errorf("%s written, but syncing %s failed: %w", final, parent, err)
	}
	if aside != "" {
		os.RemoveAll(aside)
	}
	// A flat checkpoint of the same step (an earlier gorun's) is replaced too.
	legacy := legacyCheckpointPath(dir, step)
	os.Remove(legacy)
	os.Remove(statePath(legacy))
	return nil
}

// TidyCheckpoints clears what an interrupted checkpoint write left in the
// run folder dir: temporary folders are removed; a checkpoint that was
// moved aside to be replaced goes back into place when its replacement
// never arrived, and is removed otherwise. It returns what it did, a line
// per folder. The run folder must be the caller's (gorun holds its lock).
func TidyCheckpoints(dir string) ([]string, error) {
	parent := filepath.Join(dir, CheckpointDir)
	entries, err := os.ReadDir(parent)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var done []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, ".step-") {
			continue
		}
		p := filepath.Join(parent, name)
		base, kind, ok := strings.Cut(name[1:], ".")
		if _, isStep := parseStep(base, true); !ok || !isStep {
			continue
		}
		final := filepath.Join(parent, base)
		switch {
		case strings.HasPrefix(kind, "tmp-"):
			if err := os.RemoveAll(p); err != nil {
				return done, err
			}
			done = append(done, "removed "+p+" (a checkpoint cut short)")
		case strings.HasPrefix(kind, "old-"):
			if _, err := os.Lstat(final); errors.Is(err, os.ErrNotExist) {
				if err := os.Rename(p, final); err != nil {
					return done, err
				}
				done = append(done, "restored "+final+" (its replacement was cut short)")
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				return done, err
			}
			done = append(done, "removed "+p+" (a replaced checkpoint)")
		}
	}
	return done, nil
}

// pruneCheckpoints keeps the newest Keep checkpoints.
func (rs *runState) pruneCheckpoints() error {
	keep := rs.plan.Spec.Keep
	if keep <= 0 {
		return nil
	}
	steps, err := listCheckpoints(rs.opts.Out)
	if err != nil {
		return err
	}
	for i := 0; i < len(steps)-keep; i++ {
		if err := os.RemoveAll(checkpointDir(rs.opts.Out, steps[i])); err != nil {
			return err
		}
		legacy := legacyCheckpointPath(rs.opts.Out, steps[i])
		for _, f := range []string{legacy, statePath(legacy)} {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// listCheckpoints returns the steps of the complete checkpoints in a run
// folder, oldest first: folders holding both files, and flat checkpoints
// of earlier gorun versions whose parameter file has its state file.
// Temporary folders (their names begin with a dot) are passed over.
func listCheckpoints(dir string) ([]int, error) {
	entries, err := os.ReadDir(filepath.Join(dir, CheckpointDir))
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var steps []int
	for _, e := range entries {
		n, ok := parseStep(e.Name(), e.IsDir())
		if !ok || seen[n] {
			continue
		}
		params := legacyCheckpointPath(dir, n)
		if e.IsDir() {
			params = checkpointPath(dir, n)
		}
		if exists(params) && exists(statePath(params)) {
			seen[n] = true
			steps = append(steps, n)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

// saveParams writes rank 0's parameters to path (model.safetensors,
// best.safetensors).
func (rs *runState) saveParams(name string, meta map[string]string) error {
	if rs.opts.Out == "" {
		return nil
	}
	ts, err := rs.paramTensors()
	if err != nil {
		return err
	}
	return safetensors.WriteFile(filepath.Join(rs.opts.Out, name), ts, rs.paramsMeta(meta))
}

// paramsMeta is the metadata of a parameters file: the format, what the
// model must know of its training data (datasets.Metadata: a text's
// vocabulary, which gorun sample decodes with; class names; how an image
// or a CSV row became a sample; and datasets.MetaData: the sample shape
// and targets the Plan was compiled for, with which package model
// compiles it again without the data), and meta.
func (rs *runState) paramsMeta(meta map[string]string) map[string]string {
	m := datasets.Metadata(rs.train)
	p := rs.plan
	m[datasets.MetaData] = datasets.DataMeta{Kind: p.Spec.Data.Kind, Sample: p.Sample, Classes: p.Classes, Target: p.Target, Tokens: p.Tokens}.String()
	m["format"] = "pt"
	for k, v := range meta {
		m[k] = v
	}
	return m
}

// loadParams sets rank 0's parameters from a safetensors file of PyTorch
// state_dict names (--init). Like load_state_dict(strict=True), every
// parameter must be there with its shape, and nothing else.
func (rs *runState) loadParams(path string) error {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return err
	}
	return rs.setParams(rs.workers[0], path, f, "")
}

// setParams uploads the parameters of a safetensors file (names prefixed
// with prefix) to device d.
func (rs *runState) setParams(d *worker, path string, f *safetensors.File, prefix string) error {
	p := rs.plan
	known := map[string]bool{}
	for _, prm := range p.Graph.Params {
		known[prm.Name] = true
		for _, alias := range prm.Aliases {
			known[alias] = true // the same tensor again (weight tying)
		}
		t, ok := f.Get(prefix + prm.Name)
		if !ok {
			return fmt.Errorf("%s: no tensor %q for parameter %s %v", path, prefix+prm.Name, prm.Name, prm.Value.Shape)
		}
		v, err := t.Float32s()
		if err != nil {
			return fmt.Errorf("%s: parameter %s: %v", path, prm.Name, err)
		}
		for i, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("%s: parameter %s holds %v at element %d: weights must be finite", path, prm.Name, x, i)
			}
		}
		if err := setParam(d, prm.Name, t.Shape, v); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
	}
	if prefix == "" {
		if err := rs.setStats(path, f, known); err != nil {
			return err
		}
		for _, name := range f.Names() {
			if !known[name] {
				return fmt.Errorf("%s: tensor %q is not a parameter of the model (it has %s)", path, name, paramList(p))
			}
		}
	}
	return nil
}

// setParam uploads values into parameter name of device d (into d.whole
// where parameters are sharded: the first broadcast shares them out).
func setParam(d *worker, name string, shape []int, values []float32) error {
	for i, b := range d.prog.Params {
		if b.Value.Param.Name != name {
			continue
		}
		if !slices.Equal(shape, b.Max) {
			return fmt.Errorf("parameter %s: shape %v, the model has %v", name, shape, b.Max)
		}
		if d.whole != nil {
			copy(d.whole[d.plan.ParamOffset(i):], values[:b.Elems()])
			return nil
		}
		return d.dev.UploadF32(d.prog.ParamArena, b.Offset-d.prog.ParamArena.Offset, values[:b.Elems()])
	}
	return fmt.Errorf("the model has no parameter %s", name)
}

func paramList(p *engine.Plan) string {
	var names []string
	for _, prm := range p.Graph.Params {
		names = append(names, prm.Name)
	}
	return strings.Join(names, ", ")
}

// loadCheckpoint restores the newest complete checkpoint of a run folder
// into every rank and returns where the run stood.
func (rs *runState) loadCheckpoint(dir string) (*progress, error) {
	p := rs.plan
	params, pf, sf, err := rs.newestCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	m := sf.Metadata
	if m["format"] != ckptFormat {
		return nil, fmt.Errorf("%s: not a gorun checkpoint state (format %q)", statePath(params), m["format"])
	}
	savedWorld, err := strconv.Atoi(m["devices"])
	if err != nil {
		return nil, fmt.Errorf("%s: bad metadata: devices %q", statePath(params), m["devices"])
	}
	if err := p.Sync.Resumes(spec.SyncKind(m["sync"]), savedWorld); err != nil {
		return nil, fmt.Errorf("--resume %s: %w", dir, err)
	}
	// A checkpoint of another world or strategy that this one resumes
	// (a sharded run's, or allreduce's into a sharded one) is compared
	// but for its sync settings and buckets, at its batch a device; one
	// of the same unsharded strategy on another world (allreduce's, a
	// parameter server's) in full, at its batch a device.
	sameKind := spec.SyncKind(m["sync"]) == p.Sync.Kind()
	across := savedWorld != p.World || !sameKind || p.Sharding != nil
	if across {
		if err := resumesAcross(p, m, savedWorld, sameKind && p.Sharding == nil); err != nil {
			return nil, fmt.Errorf("--resume %s: %w", dir, err)
		}
	} else if err := comparePlanKey(m["plan"], m["plan_format"], p); err != nil {
		return nil, fmt.Errorf("--resume %s: %w", dir, err)
	}
	ep, err1 := strconv.Atoi(m["epoch"])
	step, err2 := strconv.Atoi(m["step"])
	switch {
	case err1 != nil || err2 != nil:
	case m["micro"] == "0" && ep >= p.Spec.Epochs:
		return nil, fmt.Errorf("--resume %s: the run finished its %d epochs; nothing is left to train (give more with --set epochs=N)", dir, ep)
	case p.Spec.MaxSteps > 0 && step >= p.Spec.MaxSteps:
		return nil, fmt.Errorf("--resume %s: the checkpoint is at step %d and max_steps is %d; nothing is left to train (raise max_steps, or leave it out)", dir, step, p.Spec.MaxSteps)
	}
	if err := rs.setParams(rs.workers[0], params, pf, ""); err != nil {
		return nil, err
	}
	pr := &progress{FromDevices: savedWorld, FromSync: m["sync"]}
	var errs []error
	atoi := func(k string) int {
		n, err := strconv.Atoi(m[k])
		errs = append(errs, err)
		return n
	}
	pr.Step, pr.Epoch, pr.Micro = atoi("step"), atoi("epoch"), atoi("micro")
	pr.GlobalLoss, pr.GlobalCount = parseF(m["global_loss"]), parseF(m["global_count"])
	pr.TrainSeconds, pr.BestAccuracy = parseF(m["train_seconds"]), parseF(m["best_accuracy"])
	pr.Samples = int64(atoi("samples"))
	pr.RankLoss, pr.RankCount = parseFs(m["rank_loss"]), parseFs(m["rank_count"])
	if _, ok := m["skipped_steps"]; ok { // absent from checkpoints before it was kept
		pr.Skipped = atoi("skipped_steps")
	}
	// fp16's loss scale, when the checkpoint has one (an fp16 run's); a
	// run of another precision, or a checkpoint without it, starts afresh.
	var amp lossScaler
	if _, ok := m["loss_scale"]; ok && p.Spec.Precision == ops.FP16 {
		amp = lossScaler{on: true, scale: parseF(m["loss_scale"]), clean: atoi("loss_scale_clean")}
		if !(amp.scale > 0) || math.IsInf(amp.scale, 0) {
			errs = append(errs, fmt.Errorf("loss_scale %q", m["loss_scale"]))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s: bad metadata: %v", statePath(params), err)
	}
	if savedWorld != p.World {
		// The epoch's loss by rank goes on from the ranks that are left.
		pr.RankLoss, pr.RankCount = foldRanks(pr.RankLoss, p.World), foldRanks(pr.RankCount, p.World)
	}
	for _, d := range rs.workers {
		prog, r := d.prog, d.rank
		d.amp = amp
		if t, ok := sf.Get(fmt.Sprintf("rank%d/rng", r)); ok {
			if err := d.dev.SetRNGState(t.Data); err != nil {
				return nil, fmt.Errorf("%s: rank %d rng: %v", statePath(params), r, err)
			}
		} else if r < savedWorld {
			return nil, fmt.Errorf("%s: no RNG state for rank %d", statePath(params), r)
		} // a rank the checkpoint's world lacked keeps its fresh seed
		if p.Sharding != nil {
			if err := setStateShards(p, d, sf, statePath(params)); err != nil {
				return nil, err
			}
			d.step = pr.Step
			continue
		}
		if r > 0 && p.Sync.OwnParams() {
			if err := rs.setParams(d, statePath(params), sf, fmt.Sprintf("rank%d/", r)); err != nil {
				return nil, fmt.Errorf("%s: parameters of rank %d: %v", statePath(params), r, err)
			}
		}
		for _, st := range prog.State {
			for _, b := range st {
				if t, ok := sf.Get(fmt.Sprintf("rank%d/optim/%s", r, b.Name)); ok {
					v, err := t.Float32s()
					if err != nil || len(v) != b.Elems() {
						return nil, fmt.Errorf("%s: optimizer state %s of rank %d does not fit", statePath(params), b.Name, r)
					}
					if err := d.dev.UploadF32(b, 0, v); err != nil {
						return nil, err
					}
				}
			}
		}
		d.step = pr.Step
	}
	return pr, nil
}

func fmtF(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func parseF(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

func fmtFs(fs []float64) string {
	var parts []string
	for _, f := range fs {
		parts = append(parts, fmtF(f))
	}
	return strings.Join(parts, ",")
}

func parseFs(s string) []float64 {
	if s == "" {
		return nil
	}
	var out []float64
	for _, part := range strings.Split(s, ",") {
		out = append(out, parseF(part))
	}
	return out
}

// checkpoint saves a checkpoint with every rank stopped at a barrier: after
// every epoch, and where a run stops inside one. Every rank takes part:
// what rank 0 writes of the others (RNG states, loss counts, their own
// parameters and optimizer state where ranks differ) travels to it through
// collectives, so ranks may be goroutines or processes alike.
func (rs *runState) checkpoint(d *worker, pr *progress) error {
	if rs.opts.Out == "" {
		return nil
	}
	if err := d.barrier("checkpoint", d.step); err != nil {
		return err
	}
	g, err := rs.gatherState(d, pr)
	if err != nil {
		return fmt.Errorf("checkpoint at step %d: %w", pr.Step, err)
	}
	if d.rank == 0 {
		all := *pr
		if err := rs.saveCheckpoint(d, &all, g); err != nil {
			return fmt.Errorf("checkpoint at step %d: %w", pr.Step, err)
		}
	}
	return d.barrier("checkpoint saved", d.step)
}

// gathered is every rank's state as rank 0 writes it into a checkpoint.
type gathered struct {
	rng                 [][]byte  // by rank
	rankLoss, rankCount []float64 // by rank
	params              [][]float32
	// state[r] holds rank r's optimizer state tensors, for the ranks
	// whose state the checkpoint keeps: its buffers (Program.State) by
	// name, or, in a sharded plan, every rank's shards put together into
	// whole tensors, saved as rank 0's (what allreduce saves).
	state map[int][]stateTensor
}

// stateTensor is one optimizer state tensor of a checkpoint: its name
// ("fc.weight.exp_avg"), shape and values.
type stateTensor struct {
	name  string
	shape []int
	vals  []float32
}

// rngWords bounds a device's RNG state (bytes in float32 words).
const rngWords = 32

// gatherState brings every rank's checkpoint state to every rank (rank 0
// uses it): one all-gather of the RNG states and loss counts, an
// all-gather of the parameters when ranks hold their own (the sync
// strategy's OwnParams: local SGD, no sync), and the optimizer state of
// the ranks the strategy's StateRanks names: rank 0's as it is, every
// rank's by all-gathers, another single rank's (a parameter server's
// root) by broadcasts from it.
func (rs *runState) gatherState(d *worker, pr *progress) (*gathered, error) {
	p := rs.plan
	world := p.World
	g := &gathered{state: map[int][]stateTensor{}}
	rng, err := d.dev.RNGState()
	if err != nil {
		return nil, err
	}
	if len(rng) > 4*(rngWords-1) {
		return nil, fmt.Errorf("%s: RNG state of %d bytes (at most %d)", d.dev.Name(), len(rng), 4*(rngWords-1))
	}
	const words = rngWords + 4
	send := make([]float32, words)
	send[0] = float32(len(rng))
	for i := 0; i < len(rng); i += 4 {
		var w [4]byte
		copy(w[:], rng[i:])
		send[1+i/4] = math.Float32frombits(binary.LittleEndian.Uint32(w[:]))
	}
	send[rngWords], send[rngWords+1] = splitF64(pr.RankLoss[d.rank])
	send[rngWords+2], send[rngWords+3] = splitF64(pr.RankCount[d.rank])
	all, err := d.gather(send, "checkpoint state")
	if err != nil {
		return nil, err
	}
	for r := 0; r < world; r++ {
		w := all[r*words:][:words]
		b := make([]byte, 4*(rngWords-1))
		for i := 0; i < rngWords-1; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(w[1+i]))
		}
		g.rng = append(g.rng, b[:int(w[0])])
		g.rankLoss = append(g.rankLoss, joinF64(w[rngWords], w[rngWords+1]))
		g.rankCount = append(g.rankCount, joinF64(w[rngWords+2], w[rngWords+3]))
	}
	if p.Sharding != nil {
		if paramsSharded(p) {
			if err := d.gatherParams(p); err != nil {
				return nil, err
			}
		}
		// Every rank's shard of each kind of state, put back together.
		for k, b := range d.prog.StateShards {
			v, err := download(d, b)
			if err != nil {
				return nil, err
			}
			all, err := d.gather(v, fmt.Sprintf("checkpoint optimizer state %d", k))
			if err != nil {
				return nil, err
			}
			flat := p.Unshard(all)
			for i, prm := range p.Graph.Params {
				g.state[0] = append(g.state[0], stateTensor{prm.Name + "." + b.Name, prm.Value.Shape, flat[p.Sharding.ParamAt[i]:][:prm.Value.Elems()]})
			}
		}
		return g, nil
	}
	var local []stateTensor
	for _, st := range d.prog.State {
		for _, b := range st {
			v, err := download(d, b)
			if err != nil {
				return nil, err
			}
			local = append(local, stateTensor{b.Name, b.Max, v})
		}
	}
	if p.Sync.OwnParams() {
		arena, err := download(d, d.prog.ParamArena)
		if err != nil {
			return nil, err
		}
		allp, err := d.gather(arena, "checkpoint parameters")
		if err != nil {
			return nil, err
		}
		n := len(arena)
		for r := 0; r < world; r++ {
			g.params = append(g.params, allp[r*n:][:n])
		}
	}
	switch holders := p.Sync.StateRanks(); {
	case len(holders) == 1 && holders[0] == 0:
		g.state[0] = local
	case len(holders) == world:
		for r := 0; r < world; r++ {
			g.state[r] = make([]stateTensor, 0, len(local))
		}
		for k, st := range local {
			v := st.vals
			allv, err := d.gather(v, fmt.Sprintf("checkpoint optimizer state %d", k))
			if err != nil {
				return nil, err
			}
			for r := 0; r < world; r++ {
				g.state[r] = append(g.state[r], stateTensor{st.name, st.shape, allv[r*len(v):][:len(v)]})
			}
		}
	case len(holders) == 1:
		// One rank's state travels to rank 0.
		root := holders[0]
		for k, st := range local {
			if err := d.host.Broadcast(st.vals, root, comm.Tag{Name: fmt.Sprintf("checkpoint optimizer state %d", k), Step: d.step}); err != nil {
				return nil, err
			}
		}
		g.state[root] = local // now the root's, on every rank
	default:
		return nil, fmt.Errorf("sync %s keeps the optimizer state of ranks %v: a checkpoint saves one rank's or every rank's", p.Sync.Kind(), holders)
	}
	return g, nil
}

// gather all-gathers send from every rank (world 1: send itself).
func (d *worker) gather(send []float32, what string) ([]float32, error) {
	if d.host == nil {
		return send, nil
	}
	recv := make([]float32, len(send)*d.world)
	if err := d.host.AllGather(send, recv, comm.Tag{Name: what, Step: d.step}); err != nil {
		return nil, err
	}
	return recv, nil
}

// newestCheckpoint opens the newest checkpoint of a run folder that reads
// whole. A newer one that is damaged (a crash mid-write, a bad disk) or
// lacks its state file is passed over, saying so on the run's log.
func (rs *runState) newestCheckpoint(dir string) (string, *safetensors.File, *safetensors.File, error) {
	steps, err := listCheckpoints(dir)
	if err != nil || len(steps) == 0 {
		return "", nil, nil, fmt.Errorf("--resume %s: no complete checkpoint in %s", dir, filepath.Join(dir, CheckpointDir))
	}
	if orphans := orphanParams(dir, steps[len(steps)-1]); len(orphans) > 0 {
		fmt.Fprintf(rs.log, "--resume %s: %s has no state file (deleted, or lost in an interrupted write); resuming from the checkpoint of step %d\n",
			dir, orphans[len(orphans)-1], steps[len(steps)-1])
	}
	for i := len(steps) - 1; i >= 0; i-- {
		params := checkpointFiles(dir, steps[i])
		pf, err := safetensors.ReadFile(params)
		if err == nil {
			var sf *safetensors.File
			if sf, err = safetensors.ReadFile(statePath(params)); err == nil {
				return params, pf, sf, nil
			}
		}
		if i == 0 {
			return "", nil, nil, fmt.Errorf("--resume %s: no checkpoint reads whole; the oldest: %w", dir, err)
		}
		fmt.Fprintf(rs.log, "--resume %s: the checkpoint of step %d is damaged (%v); falling back to step %d\n", dir, steps[i], err, steps[i-1])
	}
	panic("unreachable")
}

// orphanParams lists the parameter files of checkpoints newer than step
// that have no state file (deleted, or lost by an earlier gorun's
// interrupted write).
func orphanParams(dir string, step int) []string {
	entries, _ := os.ReadDir(filepath.Join(dir, CheckpointDir))
	var out []string
	for _, e := range entries {
		n, ok := parseStep(e.Name(), e.IsDir())
		if !ok || n <= step {
			continue
		}
		params := legacyCheckpointPath(dir, n)
		if e.IsDir() {
			params = checkpointPath(dir, n)
		}
		if exists(params) && !exists(statePath(params)) {
			out = append(out, params)
		}
	}
	sort.Strings(out)
	return out
}

// planKey writes a Plan's resume key as checkpoint metadata: a line per
// entry, "label: text".
func planKey(key []engine.PlanStep) string {
	var b strings.Builder
	for _, e := range key {
		b.WriteString(e.Label + ": " + e.Text + "\n")
	}
	return b.String()
}

// comparePlanKey reads a checkpoint's resume key (planKey's lines, written
// in format: its "plan_format" metadata) and has the plan name the first
// entry that differs from its own (checkpoints without a key pass).
func comparePlanKey(saved, format string, p *engine.Plan) error {
	if saved == "" {
		return nil
	}
	var key []engine.PlanStep
	for _, line := range strings.Split(strings.TrimSuffix(saved, "\n"), "\n") {
		label, text, _ := strings.Cut(line, ": ")
		key = append(key, engine.PlanStep{Label: label, Text: text})
	}
	return p.CheckResumeKey(format, key)
}

// RunCheckpoint is the newest complete checkpoint of a run folder as far
// as a script is checked against it (gorun sample on a run folder that
// keeps no copy of its script).
type RunCheckpoint struct {
	// Name is the checkpoint: its folder, or an earlier gorun's flat
	// parameter file.
	Name string
	// Step and Devices are the step it was saved at and the devices of
	// the run that saved it.
	Step, Devices int
	// Keyed is set when the checkpoint records its plan's resume key
	// (every gorun since resume keys): CheckPlan can then tell.
	Keyed       bool
	key, format string
}

// NewestRunCheckpoint reads the state of the newest complete checkpoint of
// run folder dir.
func NewestRunCheckpoint(dir string) (*RunCheckpoint, error) {
	steps, err := listCheckpoints(dir)
	if err != nil || len(steps) == 0 {
		return nil, fmt.Errorf("%s: no complete checkpoint in %s", dir, filepath.Join(dir, CheckpointDir))
	}
	step := steps[len(steps)-1]
	params := checkpointFiles(dir, step)
	sf, err := safetensors.ReadFile(statePath(params))
	if err != nil {
		return nil, err
	}
	m := sf.Metadata
	devices, err := strconv.Atoi(m["devices"])
	if err != nil || m["format"] != ckptFormat {
		return nil, fmt.Errorf("%s: not a gorun checkpoint state (format %q, devices %q)", statePath(params), m["format"], m["devices"])
	}
	return &RunCheckpoint{Name: checkpointName(dir, step), Step: step, Devices: devices,
		Keyed: m["plan"] != "", key: m["plan"], format: m["plan_format"]}, nil
}

// CheckPlan compares plan p with the checkpoint's resume key, as --resume
// does: the error names the first entry that differs.
func (c *RunCheckpoint) CheckPlan(p *engine.Plan) error {
	return comparePlanKey(c.key, c.format, p)
}

// resumesAcross compares the resume key of a checkpoint made on another
// world or under another strategy (metadata m) with plan p's, but for the
// sync settings and the buckets (engine.Plan.CheckResumeKeyAcross), at the
// checkpoint's batch a device; with sameSync (the same unsharded strategy
// on another world) the sync settings and buckets too
// (engine.Plan.CheckResumeKeyWorld). A checkpoint made inside an epoch resumes
// on another number of devices only when the run has no partition
// strategy: the default shares out each step's global batch from one
// order, whatever the world, while a strategy's shards depend on it.
func resumesAcross(p *engine.Plan, m map[string]string, savedWorld int, sameSync bool) error {
	batch, err := strconv.Atoi(m["max_batch"])
	if err != nil { // checkpoints before it was kept: an even split
		batch = slices.Max(engine.SplitBatch(p.Spec.BatchSize, nil, savedWorld))
	}
	if savedWorld != p.World && m["micro"] != "0" && p.Spec.Partition != nil {
		return fmt.Errorf("the checkpoint was made inside epoch %s on %d devices, and partition %s shares out the samples by the world: a run on %d devices resumes from a checkpoint made at an epoch's end",
			m["epoch"], savedWorld, p.Spec.Partition.Name, p.World)
	}
	if m["plan"] == "" {
		return nil
	}
	var key []engine.PlanStep
	for _, line := range strings.Split(strings.TrimSuffix(m["plan"], "\n"), "\n") {
		label, text, _ := strings.Cut(line, ": ")
		key = append(key, engine.PlanStep{Label: label, Text: text})
	}
	if sameSync {
		return p.CheckResumeKeyWorld(m["plan_format"], key, batch)
	}
	return p.CheckResumeKeyAcross(m["plan_format"], key, batch)
}

// foldRanks resizes per-rank sums to world ranks: a rank the checkpoint's
// world lacked starts at 0, and the sums of ranks this world lacks go to
// rank r mod world.
func foldRanks(v []float64, world int) []float64 {
	out := make([]float64, world)
	for r, x := range v {
		out[r%world] += x
	}
	return out
}

// setStateShards restores a sharded plan's optimizer state on device d:
// each kind of state of every parameter, whole in the checkpoint (saved
// as rank 0's, by a sharded run or by allreduce), cut to d's shard. A
// tensor the checkpoint lacks leaves its part of the shard at zero, as
// the others do.
func setStateShards(p *engine.Plan, d *worker, sf *safetensors.File, path string) error {
	for _, b := range d.prog.StateShards {
		flat := make([]float32, p.Sharding.FlatElems)
		for i, prm := range p.Graph.Params {
			name := prm.Name + "." + b.Name
			t, ok := sf.Get("rank0/optim/" + name)
			if !ok {
				continue
			}
			v, err := t.Float32s()
			if err != nil || len(v) != prm.Value.Elems() {
				return fmt.Errorf("%s: optimizer state %s does not fit parameter %s %v", path, name, prm.Name, prm.Value.Shape)
			}
			copy(flat[p.Sharding.ParamAt[i]:], v)
		}
		if err := d.dev.UploadF32(b, 0, p.ShardOf(flat, d.rank)); err != nil {
			return err
		}
	}
	return nil
}
