package runner

import (
	"path/filepath"
	"testing"

	"gorun/datasets"
	"gorun/safetensors"
)

// TestOwnParamsEvaluateTheSavedModel: under strategies whose ranks keep
// parameters of their own (sync.none, local SGD that has not averaged at
// the end), the test accuracy and loss a run reports are those of rank
// 0's parameters — the model.safetensors it saves — over the whole eval
// set. They used to be a mixture: each replica scored its own part of
// the set.
func TestOwnParamsEvaluateTheSavedModel(t *testing.T) {
	for _, sync := range []string{"sync.none()", "sync.local_sgd(every = 1000)"} {
		t.Run(sync, func(t *testing.T) {
			s := loadSpec(t, tinyScript, "sync="+sync, "epochs=1")
			p := compile(t, s, 2)
			out := t.TempDir()
			res, err := Run(p, RunOptions{Out: out})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(out, ModelFile)
			f, err := safetensors.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			e, err := NewEvaluator(p, 0, path, f)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			eval, err := datasets.Load(s.Eval)
			if err != nil {
				t.Fatal(err)
			}
			outs, err := e.Outputs(eval, e.MaxBatch())
			if err != nil {
				t.Fatal(err)
			}
			labels := eval.Labels()
			classes := len(outs) / len(labels)
			correct := 0
			for i, label := range labels {
				row := outs[i*classes : (i+1)*classes]
				best := 0
				for c := range row {
					if row[c] > row[best] {
						best = c
					}
				}
				if int32(best) == label {
					correct++
				}
			}
			want := float64(correct) / float64(len(labels))
			if res.TestAccuracy != want {
				t.Errorf("reported test accuracy %.4f, model.safetensors scores %.4f on the eval set", res.TestAccuracy, want)
			}
		})
	}
}
