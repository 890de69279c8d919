package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Tests for issue 29 (hostile input, round two) on the command line: the
// engine's refusals of runs that would train to meaningless numbers, and
// of a --resume of another model, are one located line, exit 1.

// TestHostileEngineScripts: each script would have trained without
// complaint; each is refused before step 1 with one line naming the layer
// or setting and the script line.
func TestHostileEngineScripts(t *testing.T) {
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("hostile input, round two. ", 40)), 0o644); err != nil {
		t.Fatal(err)
	}
	bytesModel := `
x = data.input()
h = nn.embedding(10, 8, name = "tok")(x) + nn.embedding(EMB, 8, name = "pos")(data.positions())
train(model = nn.linear(8, 256, name = "head")(h), loss = "cross_entropy",
      data = data.text("TEXT", seq_len = 16), optimizer = optim.sgd(lr = 0.1), batch_size = 4)
`
	bytesModel = strings.Replace(bytesModel, "TEXT", text, 1)
	bn := strings.Replace(small, `nn.relu(),`, `nn.batchnorm2d(4, name = "bn"), nn.relu(),`, 1)
	bn1d := strings.Replace(small, `nn.log_softmax(),`, `nn.batchnorm1d(3, name = "bn"), nn.log_softmax(),`, 1)
	cases := []struct {
		src  string
		args []string
		want string
	}{
		{strings.Replace(bytesModel, "EMB", "16", 1), nil,
			`:3:38: embedding "tok": its table has 10 rows (ids 0 … 9), but the token data's vocabulary has 256 ids (0 … 255): an id past the table has no row (PyTorch: "index out of range in self"); declare nn.embedding(256, 8)`},
		{strings.Replace(strings.Replace(bytesModel, "EMB", "4", 1), "embedding(10,", "embedding(256,", 1), nil,
			`:3:77: embedding "pos": its table has 4 rows (ids 0 … 3), but data.positions() gives ids 0 … 15 (windows of 16 tokens)`},
		{bn1d, []string{"--devices", "2", "--set", "batch_size=3"},
			`batchnorm1d "bn": rank 1 takes 1 sample of every batch (batch_size 3 over 2 devices: 2 + 1), which gives it 1 value per channel in training, and PyTorch refuses this ("Expected more than 1 value per channel when training")`},
		{small, []string{"--set", "model=nn.sequential(nn.flatten(), nn.log_softmax())", "--set", "eval=None",
			"--set", "data=data.synthetic(size = 300, shape = (1, 1, 3), classes = 3)"},
			`:2:6: train: the model has no trainable parameters (its layers: flatten "0", log_softmax "1"): training would change nothing`},
		{small, []string{"--set", `optimizer=optim.sgd(lr = 0.05, groups = [optim.group("*.bais", weight_decay = 0)])`},
			`optim.group: pattern "*.bais" matches no parameter of the model; its parameters are conv.weight, conv.bias, fc.weight, fc.bias`},
	}
	for _, c := range cases {
		script := writeScript(t, c.src)
		args := append([]string{"plan", script}, c.args...)
		code, _, stderr := gorun(t, args...)
		if code != 1 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("gorun %s: exit %d, stderr:\n%s\nwant exit 1 and one line with %q", strings.Join(args, " "), code, stderr, c.want)
		}
	}
	// A last batch of 1 + 1 samples: found when the epoch's batches are
	// made, before step 1.
	out := filepath.Join(t.TempDir(), "run")
	code, _, stderr := gorun(t, writeScript(t, bn1d), "--devices", "2", "--out", out, "-q", "--set", "data=data.synthetic(size = 302, shape = (1, 8, 8), classes = 3, noise = 0.5)")
	want := `batchnorm1d "bn": epoch 1, batch 11 of 11: rank 0 feeds 1 sample (the batch's 2 shared out as 1 + 1), 1 value per channel in training`
	if code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("a last batch of 1 + 1: exit %d, stderr:\n%s\nwant exit 1 and %q", code, stderr, want)
	}
	if b, err := os.ReadFile(filepath.Join(out, "metrics.jsonl")); err == nil && strings.Contains(string(b), `"kind":"step"`) {
		t.Errorf("steps ran before the refusal:\n%s", b)
	}
	// 2D batch norm has 8×8 values per channel per sample: 1 + 1 is fine.
	if code, _, stderr := gorun(t, "plan", writeScript(t, bn), "--devices", "2", "--set", "batch_size=2"); code != 0 {
		t.Errorf("batchnorm2d on 8×8 planes, 1 + 1 samples: exit %d, %s", code, stderr)
	}
}

// TestResumeOfAnotherModelNamesTheChange: --resume with a layer changed
// names the layer and the attribute, in one short line.
func TestResumeOfAnotherModelNamesTheChange(t *testing.T) {
	script := writeScript(t, small)
	out := filepath.Join(t.TempDir(), "run")
	if code, _, stderr := gorun(t, script, "--out", out, "-q", "--set", "epochs=1"); code != 0 {
		t.Fatalf("training: exit %d, %s", code, stderr)
	}
	changed := writeScript(t, strings.Replace(small, "nn.dropout(0.1)", "nn.dropout(0.2)", 1))
	code, _, stderr := gorun(t, changed, "--resume", out, "-q", "--set", "epochs=2")
	want := `(dropout, ` + changed + `:7:19): p was 0.1 in the checkpoint, is 0.2 now: resume with the script and --set that made it`
	if code != 1 || !strings.Contains(stderr, want) || len(stderr) > 400 || strings.Count(stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr (%d bytes):\n%s\nwant exit 1 and one line with %q", code, len(stderr), stderr, want)
	}
	// A refused resume leaves the run folder as it was: the script copy
	// is still the run's, no earlier one set aside.
	if _, err := os.Stat(filepath.Join(out, "script.1")); err == nil {
		t.Error("the refused resume set the run's script copy aside as script.1")
	}
	if b, _ := os.ReadFile(filepath.Join(out, "script", "train.star")); string(b) != small {
		t.Errorf("the refused resume replaced the run's script copy: script/train.star holds %q", b)
	}
}
