package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"gorun/engine"
)

// jobWatch reads mpirun's stderr as it passes through to the user and
// keeps what says, once a job has failed, which rank and host it lost and
// where the other ranks were: OpenMPI names a lost host by its daemon
// ("[[43405,0],2]") in a paragraph of advice, a killed rank by its number
// and node, and the ranks themselves (gorun) name the collective they were
// waiting in when the watchdog or mpirun's SIGTERM stopped them. summary
// turns that into one line. It keeps only the matching facts, not the
// output.
type jobWatch struct {
	mu      sync.Mutex
	partial []byte           // the line being written
	waiting map[int]rankWait // rank → where it waited
	hosts   []lostHost       // hosts OpenMPI or ssh lost, in order
	killed  []killedRank     // ranks that died of a signal
	seen    map[string]bool  // lost hosts already recorded
	// named, when set, is the cluster file as launched, whose node
	// numbers name hosts in summary (a restarted job runs on fewer
	// nodes: elastic.go); nil: the job's own cluster.
	named *engine.Cluster
}

// rankWait is where a rank waited when it was stopped.
type rankWait struct {
	call     string // `allreduce "bucket 0" at step 45`
	timedOut bool   // its watchdog fired (comm.timeout), rather than a SIGTERM
}

// lostHost is a host that stopped answering, as mpirun names it.
type lostHost struct {
	host, cause string
}

// killedRank is a rank that a signal ended.
type killedRank struct {
	rank         int
	host, signal string
}

// The lines jobWatch recognises. gorun's own come from comm.MPIComm.Abort
// (the watchdog) and whereSignalled (SIGTERM while in a collective);
// OpenMPI's from mpirun 4's messages and ssh's.
var (
	rankWaitLine = regexp.MustCompile(`rank (\d+) of \d+ \(host ([^)]*)\): (?:comm: |in )((?:broadcast|reduce|allreduce|allgather|reducescatter|barrier)(?: "(?:[^"\\]|\\.)*")? at step \d+)( \(MPI\) timed out)?`)
	killedLine   = regexp.MustCompile(`process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+) \(([^)]*)\)`)
	daemonLine   = regexp.MustCompile(`Remote daemon: \[\[\d+,\d+\],\d+\] on node (\S+)`)
	aliveLine    = regexp.MustCompile(`Timeout, server (\S+) not responding`)
	connectLine  = regexp.MustCompile(`ssh: connect to host (\S+) port \d+: (.+)`)
)

// maxWatchLine is the longest line jobWatch looks at; the rest of a
// longer one is passed over.
const maxWatchLine = 64 << 10

// Write implements io.Writer: it scans each complete line of p.
func (w *jobWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range p {
		if b == '\n' {
			w.scan(string(w.partial))
			w.partial = w.partial[:0]
			continue
		}
		if len(w.partial) < maxWatchLine {
			w.partial = append(w.partial, b)
		}
	}
	return len(p), nil
}

// scan records what one line says.
func (w *jobWatch) scan(line string) {
	if w.waiting == nil {
		w.waiting, w.seen = map[int]rankWait{}, map[string]bool{}
	}
	if m := rankWaitLine.FindStringSubmatch(line); m != nil {
		r, _ := strconv.Atoi(m[1])
		if old, ok := w.waiting[r]; !ok || !old.timedOut {
			w.waiting[r] = rankWait{call: m[3], timedOut: m[4] != ""}
		}
		return
	}
	if m := killedLine.FindStringSubmatch(line); m != nil {
		r, _ := strconv.Atoi(m[1])
		w.killed = append(w.killed, killedRank{r, m[2], "signal " + m[3] + " (" + m[4] + ")"})
		return
	}
	lost := func(host, cause string) {
		if !w.seen[host] {
			w.seen[host] = true
			w.hosts = append(w.hosts, lostHost{host, cause})
		}
	}
	if m := daemonLine.FindStringSubmatch(line); m != nil {
		lost(m[1], "OpenMPI lost its daemon there: the host is down, its link is cut or its packets are dropped")
	} else if m := aliveLine.FindStringSubmatch(line); m != nil {
		lost(m[1], "it stopped answering: ssh's keepalives went unanswered")
	} else if m := connectLine.FindStringSubmatch(line); m != nil {
		lost(m[1], "ssh could not connect: "+strings.TrimSpace(m[2]))
	}
}

// summary is one line saying which ranks and hosts the job lost and where
// the others waited, for a job that failed; "" when mpirun's output named
// neither (the ranks have then said why themselves).
func (w *jobWatch) summary(c *engine.Cluster) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.scan(string(w.partial))
		w.partial = nil
	}
	var lost []string
	lostRanks := map[int]bool{}
	for _, k := range w.killed {
		lostRanks[k.rank] = true
		lost = append(lost, fmt.Sprintf("rank %d on %s: killed by %s", k.rank, w.nodeName(c, k.host), k.signal))
	}
	for _, h := range w.hosts {
		ranks := ranksOn(c, h.host)
		fresh := false
		for _, r := range ranks {
			if !lostRanks[r] {
				fresh = true
			}
			lostRanks[r] = true
		}
		if len(ranks) > 0 && !fresh {
			continue // named already, killed
		}
		who := "host"
		if len(ranks) > 0 {
			who = rankList(ranks)
		}
		lost = append(lost, fmt.Sprintf("%s on %s: %s", who, w.nodeName(c, h.host), h.cause))
	}
	// Where the others waited, by collective.
	var calls []string
	byCall := map[string][]int{}
	timedOut := false
	for r, wt := range w.waiting {
		if lostRanks[r] {
			continue
		}
		if _, ok := byCall[wt.call]; !ok {
			calls = append(calls, wt.call)
		}
		byCall[wt.call] = append(byCall[wt.call], r)
		timedOut = timedOut || wt.timedOut
	}
	for _, ranks := range byCall {
		slices.Sort(ranks)
	}
	slices.SortFunc(calls, func(a, b string) int { return byCall[a][0] - byCall[b][0] })
	var where string // where the others waited
	switch len(calls) {
	case 0:
	case 1:
		ranks := byCall[calls[0]]
		slices.Sort(ranks)
		verb := "was"
		if len(ranks) > 1 {
			verb = "were"
		}
		where = fmt.Sprintf("%s %s waiting for it in %s", rankList(ranks), verb, calls[0])
	default:
		var parts []string
		var all []int
		for _, call := range calls {
			ranks := byCall[call]
			all = append(all, ranks...)
			slices.Sort(ranks)
			parts = append(parts, fmt.Sprintf("%s in %s", rankList(ranks), call))
		}
		slices.Sort(all)
		where = fmt.Sprintf("%s were waiting for it: %s", rankList(all), strings.Join(parts, ", "))
	}
	switch {
	case len(lost) > 0 && where != "":
		return "gorun: launch: lost " + strings.Join(lost, "; ") + "; " + where
	case len(lost) > 0:
		return "gorun: launch: lost " + strings.Join(lost, "; ")
	case where != "" && timedOut:
		// No host was lost: some rank never joined.
		var missing []int
		for r := range c.ProcessCount() {
			if _, ok := w.waiting[r]; !ok {
				missing = append(missing, r)
			}
		}
		msg := "gorun: launch: " + strings.Replace(where, " for it", "", 1) + fmt.Sprintf(" past comm.timeout (%v)", c.Timeout)
		if len(missing) > 0 && len(missing) < c.ProcessCount() {
			var on []string
			for _, r := range missing {
				on = append(on, fmt.Sprintf("rank %d on %s", r, w.nodeName(c, hostOf(c, r))))
			}
			msg += "; never joined by " + strings.Join(on, ", ")
		}
		return msg
	}
	return ""
}

// nodeName is nodeName in the cluster that names the hosts (named, else c).
func (w *jobWatch) nodeName(c *engine.Cluster, host string) string {
	if w.named != nil {
		return nodeName(w.named, host)
	}
	return nodeName(c, host)
}

// nodeName names a host as mpirun printed it by its node: "node[3]
// 10.77.0.3", or the host alone when no node has that name.
func nodeName(c *engine.Cluster, host string) string {
	for i, n := range c.Nodes {
		if n.Host == host {
			return fmt.Sprintf("node[%d] %s", i+1, host)
		}
	}
	if host == "" {
		return "an unknown host"
	}
	return host
}

// ranksOn are the ranks mpirun places on the node named host: launch maps
// by slot (--map-by slot), so node i holds the ranks after the slots of
// the nodes before it.
func ranksOn(c *engine.Cluster, host string) []int {
	first, n := 0, c.ProcessCount()
	for _, node := range c.Nodes {
		if node.Host == host {
			var out []int
			for r := first; r < first+node.Slots && r < n; r++ {
				out = append(out, r)
			}
			return out
		}
		first += node.Slots
	}
	return nil
}

// hostOf is the host of rank r, as ranksOn places ranks ("" past the slots).
func hostOf(c *engine.Cluster, r int) string {
	first := 0
	for _, node := range c.Nodes {
		if r < first+node.Slots {
			return node.Host
		}
		first += node.Slots
	}
	return ""
}

// rankList writes "rank 2", "ranks 0 and 1" or "ranks 0, 1 and 3".
func rankList(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = strconv.Itoa(r)
	}
	switch len(s) {
	case 0:
		return "no rank"
	case 1:
		return "rank " + s[0]
	}
	return "ranks " + strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
