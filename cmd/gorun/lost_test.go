package main

import (
	"strings"
	"testing"

	"gorun/engine"
)

// TestJobWatchSummary: from mpirun's output of a failed job (OpenMPI
// 4.1's messages, as the namespace hosts of make test-cluster print
// them), launch's last line names the lost rank and host and the
// collective the other ranks were waiting in.
func TestJobWatchSummary(t *testing.T) {
	c, err := engine.ParseCluster("c.toml", []byte("[cluster]\ntransport = \"mpi\"\n[comm]\ntimeout = \"10s\"\n"+
		"[[node]]\nhost = \"10.77.0.1\"\n[[node]]\nhost = \"10.77.0.2\"\n[[node]]\nhost = \"10.77.0.3\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	sigterm := func(r int, call string) string {
		return "\ngorun: rank " + string(rune('0'+r)) + " of 3 (host grc-h" + string(rune('1'+r)) + "): in " + call + " for 4.2s: SIGTERM: stopping (a checkpoint is saved when training; SIGTERM again to kill)\n"
	}
	call := `allreduce "bucket 0" at step 45`
	for _, tc := range []struct{ name, out, want string }{
		{"link cut", `--------------------------------------------------------------------------
ORTE has lost communication with a remote daemon.

  HNP daemon   : [[5598,0],0] on node grc-l
  Remote daemon: [[5598,0],3] on node 10.77.0.3

This is usually due to either a failure of the TCP network
connection to the node, or possibly an internal failure of
the daemon itself. We cannot recover from this failure, and
therefore will terminate the job.
--------------------------------------------------------------------------
` + sigterm(0, call) + sigterm(1, call),
			`gorun: launch: lost rank 2 on node[3] 10.77.0.3: OpenMPI lost its daemon there: the host is down, its link is cut or its packets are dropped; ranks 0 and 1 were waiting for it in allreduce "bucket 0" at step 45`},
		{"killed", `--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
` + sigterm(0, call) + `--------------------------------------------------------------------------
An MPI communication peer process has unexpectedly disconnected.  This
  Local host: grc-h2
  Peer host:  10.77.0.3
--------------------------------------------------------------------------
` + sigterm(1, call) + `--------------------------------------------------------------------------
mpirun noticed that process rank 2 with PID 3569 on node 10.77.0.3 exited on signal 9 (Killed).
--------------------------------------------------------------------------
`, `gorun: launch: lost rank 2 on node[3] 10.77.0.3: killed by signal 9 (Killed); ranks 0 and 1 were waiting for it in allreduce "bucket 0" at step 45`},
		{"stopped", `[grc-l:13897] plm:rsh: Warning: setpgid(13945,13945) failed in parent with errno=Permission denied(13)
Timeout, server 10.77.0.3 not responding.
--------------------------------------------------------------------------
ORTE was unable to reliably start one or more daemons.
--------------------------------------------------------------------------
gorun: rank 0 of 3 (host grc-h1): comm: allreduce "bucket 0" at step 45 (MPI) timed out after 10s: some rank of 3 never joined it (lost, stuck, or calling another collective), or it takes longer than the timeout; aborting every rank (MPI_Abort)
` + sigterm(1, `allgather "loss" at step 44`),
			`gorun: launch: lost rank 2 on node[3] 10.77.0.3: it stopped answering: ssh's keepalives went unanswered; ranks 0 and 1 were waiting for it: rank 0 in allreduce "bucket 0" at step 45, rank 1 in allgather "loss" at step 44`},
		{"a rank that never joined", `gorun: rank 0 of 3 (host grc-h1): comm: barrier "checkpoint" at step 10 (MPI) timed out after 10s: some rank of 3 never joined it; aborting every rank (MPI_Abort)
` + sigterm(1, `barrier "checkpoint" at step 10`),
			`gorun: launch: ranks 0 and 1 were waiting in barrier "checkpoint" at step 10 past comm.timeout (10s); never joined by rank 2 on node[3] 10.77.0.3`},
		{"a script error", "gorun: rank 1 of 3 (host grc-h2): train.star:3:1: undefined: x; aborting every rank (MPI_Abort)\n", ""},
		{"unreachable at start", "ssh: connect to host 10.77.0.2 port 22: No route to host\r\n", "gorun: launch: lost rank 1 on node[2] 10.77.0.2: ssh could not connect: No route to host"},
	} {
		w := &jobWatch{}
		// Written in odd pieces, as a pipe delivers it.
		for rest := tc.out; rest != ""; {
			n := min(len(rest), 7)
			w.Write([]byte(rest[:n]))
			rest = rest[n:]
		}
		if got := w.summary(&c); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
	if got, want := rankList([]int{0, 1, 3}), "ranks 0, 1 and 3"; got != want {
		t.Errorf("rankList = %q", got)
	}
	if got := ranksOn(&engine.Cluster{Nodes: []engine.Host{{Host: "a", Slots: 2}, {Host: "b", Slots: 3}}, Processes: 4}, "b"); len(got) != 2 || got[0] != 2 {
		t.Errorf("ranksOn = %v, want [2 3]", got)
	}
	if strings.Contains(nodeName(&c, "elsewhere"), "node[") {
		t.Error(nodeName(&c, "elsewhere"))
	}
}
