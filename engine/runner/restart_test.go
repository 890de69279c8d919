package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRestartLine: a run that gorun launch restarted after a lost host
// (RunOptions.Restart) writes a restart line after its resume line —
// which hosts were lost, the step it went on from and the step the
// failed job had reached, the new world, the seconds lost (down and
// redone) — and its summary counts the restarts; a second resume from
// the same checkpoint replaces the line (trimMetrics).
func TestRestartLine(t *testing.T) {
	sets := []string{"batch_size=64", "epochs=2"}
	dir := t.TempDir()
	trainSync(t, tinyScript, 3, RunOptions{Out: dir}, append(sets, "epochs=1")...) // 8 steps, a checkpoint at step 8
	// The failed job went on past its checkpoint: three more steps,
	// logged, then lost.
	f, err := os.OpenFile(filepath.Join(dir, MetricsFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ckptTime float64
	for _, m := range readMetrics(t, filepath.Join(dir, MetricsFile)) {
		if m["kind"] == "step" && m["step"] == float64(8) {
			ckptTime = m["time"].(float64)
		}
	}
	for s := 9; s <= 11; s++ {
		fmt.Fprintf(f, `{"kind":"step","step":%d,"epoch":2,"loss":1,"time":%g}`+"\n", s, ckptTime+float64(s-8)*0.5)
	}
	fmt.Fprint(f, `{"kind":"step","step":12,"ep`) // cut short by the loss
	f.Close()

	saved := filepath.Join(t.TempDir(), "saved")
	if err := os.CopyFS(saved, os.DirFS(filepath.Join(dir, CheckpointDir))); err != nil {
		t.Fatal(err)
	}
	failed := time.Now().Add(-2 * time.Second)
	r := &Restart{Number: 1, LostHosts: []string{"10.77.0.3"}, FromProcesses: 3, FailedAt: failed}
	for round := 1; round <= 2; round++ { // the second: the same checkpoint again
		if round == 2 { // the first resumed job's checkpoints are lost, step 8's is back
			os.RemoveAll(filepath.Join(dir, CheckpointDir))
			if err := os.Rename(saved, filepath.Join(dir, CheckpointDir)); err != nil {
				t.Fatal(err)
			}
		}
		trainSync(t, tinyScript, 2, RunOptions{Resume: dir, Restart: r}, sets...)
		var restarts, summaries []map[string]any
		for _, m := range readMetrics(t, filepath.Join(dir, MetricsFile)) {
			switch m["kind"] {
			case "restart":
				restarts = append(restarts, m)
			case "summary":
				summaries = append(summaries, m)
			}
		}
		if len(restarts) != 1 || len(summaries) != 1 {
			t.Fatalf("round %d: %d restart lines, %d summaries, want 1 each", round, len(restarts), len(summaries))
		}
		l := restarts[0]
		t.Logf("round %d: %v", round, l)
		want := map[string]any{"restart": 1.0, "step": 8.0, "epoch": 2.0, "from_processes": 3.0, "processes": 1.0, "devices": 2.0}
		if round == 1 {
			want["reached_step"] = 11.0
		} else {
			want["reached_step"] = 16.0 // the first resumed job's steps were logged after its restart line
		}
		for k, v := range want {
			if l[k] != v {
				t.Errorf("round %d: restart line's %s = %v, want %v", round, k, l[k], v)
			}
		}
		if hosts, ok := l["lost_hosts"].([]any); !ok || len(hosts) != 1 || hosts[0] != "10.77.0.3" {
			t.Errorf("round %d: lost_hosts %v", round, l["lost_hosts"])
		}
		down, redo, lost := l["down_seconds"].(float64), l["redo_seconds"].(float64), l["seconds_lost"].(float64)
		if down < 2 || down > 120 || lost != down+redo {
			t.Errorf("round %d: down %g s (failed 2 s before the start), redo %g, lost %g", round, down, redo, lost)
		}
		if round == 1 && (redo < 1.49 || redo > 1.51) {
			t.Errorf("redo_seconds %g, want 1.5 (steps 9 to 11 after the checkpoint's step 8)", redo)
		}
		if summaries[0]["restarts"] != 1.0 {
			t.Errorf("round %d: the summary's restarts: %v", round, summaries[0]["restarts"])
		}
	}
}
