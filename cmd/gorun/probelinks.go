package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"gorun/comm"
	"gorun/engine"
)

// probeRankCmd is the subcommand `gorun launch --probe-links` has mpirun
// start on every rank; it is not meant to be typed.
const probeRankCmd = "probe-links-rank"

// probeSizes are the message sizes the probe sends between two ranks.
var probeSizes = []int{8, 1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20}

// probeReps is how many round trips the probe times at size n: enough
// for about 32 MiB each way, from 3 to 200.
func probeReps(n int) int { return min(200, max(3, (32<<20)/n)) }

// probeBurstSizes are the messages the probe sends once more after the
// link idled for probeIdle, to measure its burst: what a token bucket
// (tc's tbf, a cloud's rate limit) lets through at once before holding
// the rest to its rate. A small bucket shows in the smaller message, a
// large one in the larger; the larger estimate counts.
var probeBurstSizes = []int{256 << 10, 1 << 20}

const probeIdle = 50 * time.Millisecond

// probeDrain is the message the lead sends one way just before each timed
// one-way message above 16 KiB, to empty a token bucket: after an
// exchange chain one direction often finishes first and its bucket
// refills while the other's ends, and a message then crosses partly at
// once. On the namespace hosts at 200 Mbit/s (a 50 KB bucket) 256 KiB
// took 9.2 ms after a chain, 10.8 ms after another message and 9.4 ms
// after 50 ms idle: timed after the chain, the burst hid in the one-way
// rate (228 Mbit/s) and burstBytes saw none.
const probeDrain = 1 << 20

// burstBytes is the burst that a message of n bytes shows when it takes
// idle seconds after the link idled and busy seconds back to back (each
// with its acknowledgement): the bytes that did not wait for the rate,
// n·(1 − idle/busy). Under a twentieth of the message (noise on a link
// without a bucket), none.
func burstBytes(n int, busy, idle float64) float64 {
	if busy <= 0 || idle <= 0 {
		return 0
	}
	b := float64(n) * (1 - idle/busy)
	if b < float64(n)/20 {
		return 0
	}
	return math.Round(b)
}

// probeBatches is how many batches of round trips (sizes to 16 KiB) and
// chains of exchanges (from 16 KiB) the probe times at each size: the
// fastest batch of round trips gives the one-way time, the trimmed mean
// of the chains the time both ways.
const probeBatches = 7

// probeChain is how many exchanges the probe sends back to back in one
// batch. A collective's exchanges follow one another (a reduce-scatter's
// steps, then an all-gather's), the ranks starting each as soon as they
// hold the last one's data, and on a loaded link the second of a chain
// often takes twice the first: over Open MPI's TCP transport the two
// directions of an exchange then run one after the other, not at once
// (on the namespace hosts at 50 Mbit/s, 1.59 MiB each way: one exchange
// after a pause 280–290 ms, two back to back 640–1,100 ms, as the GPT's
// all-reduce of 3.18 MiB in two steps). A lone exchange shows the link;
// a chain shows what a collective gets from it.
const probeChain = 2

// trimmedMean is the mean of the sorted times ts without their fastest
// and slowest (a link whose exchanges take one of two times, as chains
// on a loaded link do, is what a collective gets on average; one time
// the machine's other work delayed is not).
func trimmedMean(ts []time.Duration) time.Duration {
	if len(ts) <= 2 {
		var sum time.Duration
		for _, t := range ts {
			sum += t
		}
		return sum / time.Duration(max(1, len(ts)))
	}
	var sum time.Duration
	for _, t := range ts[1 : len(ts)-1] {
		sum += t
	}
	return sum / time.Duration(len(ts)-2)
}

// wantsProbeLinks reports whether launch's arguments ask for
// --probe-links (before a "--").
func wantsProbeLinks(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--probe-links" || a == "-probe-links" || a == "--probe-links=true" || a == "-probe-links=true" {
			return true
		}
	}
	return false
}

// probeLinksCmd is `gorun launch --cluster C.toml --probe-links [--dry-run]
// [--mpirun PATH]`: it starts one process per slot of the cluster's
// [[node]] hosts through mpirun, as launch starts a run, and they measure
// the links: round trips of probeSizes bytes between rank 0 and the first
// rank of every other host (class "host"), between two ranks of one host
// when a host has two slots or more (class "process"), and between two
// goroutines of rank 0's process through comm's in-process transport
// (class "inproc"). Rank 0 prints each one-way time (half the round
// trip) and the fitted alpha–beta figures as [[link]] tables to paste
// into the cluster file. With several host pairs the slowest sets the
// host class (a ring runs at its slowest link's pace). When the cluster's
// comm.tcp_fragment is "auto" and the measured host link sizes Open MPI's
// TCP fragments otherwise than the pass ran with
// (engine.Cluster.TCPFragmentBytes), it measures again with the new size,
// as a run with those tables will use it, and prints those tables last.
func probeLinksCmd(args []string, stdout, stderr io.Writer) error {
	var f flags
	fs := newFlagSet(&f, stderr)
	fs.Bool("probe-links", false, "launch: measure the links between the cluster's hosts and print [[link]] tables")
	dryRun := fs.Bool("dry-run", false, "launch: print the mpirun command and exit")
	mpirunPath := fs.String("mpirun", "", "launch: the mpirun `program` (default: mpirun on PATH)")
	pos, err := parseCmdArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return &usageError{fmt.Sprintf("launch --probe-links runs no script, got %s", strings.Join(pos, " "))}
	}
	if f.cluster == "" {
		return &usageError{"launch --probe-links needs --cluster C.toml, whose [[node]] entries are the hosts to measure"}
	}
	c, err := engine.LoadCluster(f.cluster)
	if err != nil {
		return err
	}
	if len(c.Nodes) == 0 || c.Slots() < 2 {
		return fmt.Errorf("launch --probe-links: %s: want [[node]] hosts with 2 slots or more in all (two ranks to measure between), got %d", f.cluster, c.Slots())
	}
	mpirun := *mpirunPath
	if mpirun == "" {
		if mpirun, err = exec.LookPath("mpirun"); err != nil {
			if !*dryRun {
				return errors.New("launch --probe-links: mpirun not found on PATH: install OpenMPI (Debian: apt-get install openmpi-bin) or give --mpirun PATH")
			}
			mpirun = "mpirun"
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("launch: finding this gorun binary: %w", err)
	}
	if !comm.MPIAvailable() && !*dryRun {
		return errors.New("launch --probe-links: this gorun was built without MPI: build it with `make build-mpi` (go build -tags mpi)")
	}
	if !*dryRun {
		addrs, err := resolveHosts(context.Background(), net.DefaultResolver.LookupHost, c, f.cluster, hostLookupTimeout)
		if err != nil {
			return err
		}
		local := localAddrs()
		remote := make([]bool, len(c.Nodes))
		anyRemote := false
		for i := range c.Nodes {
			remote[i] = !isLocal(addrs[i], local)
			anyRemote = anyRemote || remote[i]
		}
		if anyRemote {
			// Every host needs this gorun and the cluster file, which
			// each rank reads, at the same paths.
			files, err := launchFiles(self, f.cluster)
			if err != nil {
				return err
			}
			files[1].what = "the cluster file"
			wd, err := os.Getwd()
			if err != nil {
				return fmt.Errorf("launch: %w", err)
			}
			if err := checkHosts(context.Background(), &c, f.cluster, remote, wd, files, hostCheckSlack); err != nil {
				return err
			}
		}
	}
	hostfile, err := writeHostfile(c, f.cluster, "")
	if err != nil {
		return err
	}
	if !*dryRun {
		defer os.Remove(hostfile)
	}
	c.Processes = c.Slots()
	argvFor := func(c engine.Cluster) []string {
		return launchArgv(c, mpirun, hostfile, self, probeRankCmd, []string{"--cluster", f.cluster}, os.Geteuid() == 0)
	}
	argv := argvFor(c)
	if *dryRun {
		fmt.Fprintln(stdout, shellJoin(argv))
		return nil
	}
	var out bytes.Buffer
	if err := runProbe(argv, io.MultiWriter(stdout, &out), stderr); err != nil {
		return err
	}
	// A run with the tables in its cluster file sizes Open MPI's TCP
	// fragments from them (tcp_fragment "auto"): when that differs from
	// what this pass ran with, the exchanges are measured again with it.
	if c.TCPFragment != 0 {
		return nil
	}
	measured, err := probedLinks(out.String())
	if err != nil {
		return fmt.Errorf("launch --probe-links: %w", err)
	}
	next := c
	next.Links = measured
	was, now := c.TCPFragmentBytes(), next.TCPFragmentBytes()
	if was == now {
		return nil
	}
	wasName := "Open MPI's own"
	if was > 0 {
		wasName = bytesName(int(was))
	}
	fmt.Fprintf(stdout, "\nprobe-links: with these tables, a run sizes Open MPI's TCP fragments at %s (comm.tcp_fragment \"auto\"; this pass ran with %s): measuring again with %s, as a run will; paste the tables below\n\n",
		bytesName(int(now)), wasName, bytesName(int(now)))
	return runProbe(argvFor(next), stdout, stderr)
}

// runProbe runs the probe's mpirun command line.
func runProbe(argv []string, stdout, stderr io.Writer) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return &exitStatus{code: ee.ExitCode(), msg: fmt.Sprintf("launch --probe-links: mpirun exited with status %d", ee.ExitCode())}
		}
		return fmt.Errorf("launch --probe-links: %w", err)
	}
	return nil
}

// probeTablesHeader starts the [[link]] tables the probe prints (writeProbe).
const probeTablesHeader = "\n# [[link]] tables for "

// probedLinks reads the last [[link]] tables the probe printed in out.
func probedLinks(out string) ([]engine.Link, error) {
	i := strings.LastIndex(out, probeTablesHeader)
	if i < 0 {
		return nil, errors.New("the probe printed no [[link]] tables")
	}
	pc, err := engine.ParseCluster("the probe's tables", []byte(out[i:]))
	if err != nil {
		return nil, err
	}
	return pc.Links, nil
}

// probePair is two ranks whose link the probe measures.
type probePair struct {
	class engine.LinkClass
	a, b  int    // a leads
	name  string // "rank 0 (10.77.0.2) ↔ rank 1 (10.77.0.3)"
}

// probePairs chooses the pairs for a cluster whose ranks fill the nodes'
// slots in order (launch's --map-by slot): rank 0 with the first rank of
// every other host, then two ranks of the first host that has two.
func probePairs(c *engine.Cluster) []probePair {
	var pairs []probePair
	var first []int
	r := 0
	for _, n := range c.Nodes {
		first = append(first, r)
		r += n.Slots
	}
	who := func(rank, node int) string { return fmt.Sprintf("rank %d (%s)", rank, c.Nodes[node].Host) }
	for i := 1; i < len(c.Nodes); i++ {
		pairs = append(pairs, probePair{engine.LinkHost, 0, first[i], who(0, 0) + " ↔ " + who(first[i], i)})
	}
	for i, n := range c.Nodes {
		if n.Slots >= 2 {
			pairs = append(pairs, probePair{engine.LinkProcess, first[i], first[i] + 1, who(first[i], i) + " ↔ " + who(first[i]+1, i)})
			break
		}
	}
	return pairs
}

// probeLinksRank is one rank of `gorun launch --probe-links`.
func probeLinksRank(args []string, stdout, stderr io.Writer) error {
	var f flags
	fs := newFlagSet(&f, stderr)
	if _, err := parseCmdArgs(fs, args); err != nil {
		return err
	}
	c, err := engine.LoadCluster(f.cluster)
	if err != nil {
		return err
	}
	rank, size, _, ok := comm.EnvWorld()
	m, err := joinMPI(c.Timeout, rank, size, ok)
	if err != nil {
		return err
	}
	defer m.Finalize()
	if m.Size() != c.Slots() {
		return fmt.Errorf("%s: probe-links: %d ranks started, the [[node]] slots say %d: start it with `gorun launch --probe-links`", m.Who(), m.Size(), c.Slots())
	}
	pairs := probePairs(&c)
	// times[pair]: the one-way times at probeSizes (ping-pong), then the
	// exchange times (both ways at once), in seconds, as rank 0 learns
	// them.
	times := make([][]float64, len(pairs))
	big := probeSizes[len(probeSizes)-1]
	send, recv := make([]byte, big), make([]byte, big)
	step := 0
	for pi, p := range pairs {
		res := make([]float32, 2*len(probeSizes)+1)
		for si, n := range probeSizes {
			step++
			if err := m.Barrier(comm.Tag{Name: "probe-links", Step: step}); err != nil {
				return err
			}
			me := m.Rank()
			if me != p.a && me != p.b {
				continue
			}
			peer, lead := p.b, true
			if me == p.b {
				peer, lead = p.a, false
			}
			if _, err := m.PingPong(peer, send[:min(n, 64<<10)], 3, lead); err != nil { // warm-up: connections, buffers
				return err
			}
			pp, ex := make([]time.Duration, probeBatches), make([]time.Duration, probeBatches)
			for b := range probeBatches {
				// One way, up to 16 KiB: batches of round trips.
				if n <= 16<<10 {
					rtt, err := m.PingPong(peer, send[:n], max(1, probeReps(n)/probeBatches), lead)
					if err != nil {
						return err
					}
					pp[b] = rtt / 2
				}
				// Both ways, from 16 KiB: a chain of probeChain
				// exchanges, back to back as a collective's steps, the
				// two ranks first meeting in an 8-byte round trip, as a
				// collective comes after compute, its queues empty; the
				// time of one is the chain's over its length.
				if n >= 16<<10 {
					if _, err := m.PingPong(peer, send[:8], 1, lead); err != nil {
						return err
					}
					var err error
					if ex[b], err = m.Exchange(peer, send[:n], recv[:n], probeChain); err != nil {
						return err
					}
				}
				// One way, above 16 KiB: one message at a time, from
				// the lead, with nothing going back but its
				// acknowledgements (a tree's or a chain's hop), less
				// the 8-byte answer's way back. It follows another
				// (probeDrain), so that it meets the link's rate, not
				// what a bucket refilled (burstBytes's reference).
				if n > 16<<10 {
					if _, err := m.PingPong(peer, send[:8], 1, lead); err != nil {
						return err
					}
					if _, err := m.OneWay(peer, send[:min(n, probeDrain)], 1, lead); err != nil {
						return err
					}
					ow, err := m.OneWay(peer, send[:n], 1, lead)
					if err != nil {
						return err
					}
					pp[b] = ow
				}
			}
			if n >= 16<<10 {
				// Both ways: a chain is over when both ranks hold what
				// the other sent last (a collective's next step, and
				// the step after it, wait for the later one; the two
				// directions of a shaped or busy link finish apart by
				// up to a third). Swap the times and keep each chain's
				// later one.
				mine, theirs := make([]byte, 8*probeBatches), make([]byte, 8*probeBatches)
				for b, d := range ex {
					binary.LittleEndian.PutUint64(mine[8*b:], uint64(d))
				}
				if _, err := m.Exchange(peer, mine, theirs, 1); err != nil {
					return err
				}
				for b := range ex {
					ex[b] = max(ex[b], time.Duration(binary.LittleEndian.Uint64(theirs[8*b:])))
				}
			}
			// One way: up to 16 KiB the fastest batch (a link's
			// latency is what the message takes when nothing else on
			// the machine delays it), above it the median message, less
			// the acknowledgement's way back (measured at 8 B); both
			// ways: the trimmed mean of the later ranks' times.
			slices.Sort(pp)
			slices.Sort(ex)
			res[si], res[len(probeSizes)+si] = float32(pp[0].Seconds()), float32(trimmedMean(ex).Seconds())
			if n > 16<<10 {
				res[si] = float32(pp[probeBatches/2].Seconds() - float64(res[0]))
			}
			if slices.Contains(probeBurstSizes, n) {
				// The burst: the same message after the link idled
				// (probeIdle), against the median above.
				idle := make([]time.Duration, 3)
				for b := range idle {
					if lead {
						time.Sleep(probeIdle)
					}
					var err error
					if idle[b], err = m.OneWay(peer, send[:n], 1, lead); err != nil {
						return err
					}
				}
				slices.Sort(idle)
				b := burstBytes(n, pp[probeBatches/2].Seconds(), idle[1].Seconds())
				res[2*len(probeSizes)] = max(res[2*len(probeSizes)], float32(b))
			}
		}
		if err := m.Broadcast(res, p.a, comm.Tag{Name: "probe-links results", Step: pi}); err != nil {
			return err
		}
		for _, x := range res {
			times[pi] = append(times[pi], float64(x))
		}
	}
	if m.Rank() != 0 {
		return nil
	}
	inproc, err := probeInProc()
	if err != nil {
		return err
	}
	pairs = append(pairs, probePair{class: engine.LinkInProc, name: "two devices of rank 0's process"})
	// In memory a message costs the same one way or both: no one_way.
	oneWay := slices.Clone(inproc)
	for i, n := range probeSizes {
		if n > 16<<10 {
			oneWay[i] = 0
		}
	}
	times = append(times, append(append(oneWay, inproc...), 0))
	return writeProbe(stdout, &c, f.cluster, pairs, times)
}

// probeInProc times one-way messages of probeSizes bytes between two
// goroutines through comm's in-process transport (a broadcast between two
// ranks, the root alternating), in seconds.
func probeInProc() ([]float64, error) {
	var out []float64
	for _, n := range probeSizes {
		g, err := comm.NewInProc(2, comm.Options{Algorithm: comm.Direct})
		if err != nil {
			return nil, err
		}
		reps := probeReps(n)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		var start time.Time
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]float32, max(1, n/4))
				cm := g.Rank(r)
				for i := range reps + 2 {
					if i == 2 && r == 0 {
						start = time.Now()
					}
					if err := cm.Broadcast(buf, i%2, comm.Tag{Name: "probe", Step: i}); err != nil {
						errs[r] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start).Seconds()/float64(reps))
	}
	return out, nil
}

// fitLink fits the alpha–beta figures to a pair's times
// (probeLinksRank): α is the smaller one-way time of the two smallest
// sizes (8 B and 1 KiB: latency, the bytes costing nothing); the rate at
// each size from 16 KiB is its bytes over its exchange time (both ways at
// once, as a collective's step loads the link) less α. Over TCP the rate
// falls for messages larger than the window a queue lets through, so the
// link keeps every size's rate (by_size) and, as bandwidth, the largest
// size's.
func fitLink(class engine.LinkClass, t []float64) engine.Link {
	a := min(t[0], t[1])
	l := engine.Link{Class: class, Latency: time.Duration(a * 1e9).Round(100 * time.Nanosecond)}
	rate := func(n int, t float64) float64 {
		rest := t - a
		if rest <= 0 {
			rest = t
		}
		return roundRate(float64(n) / rest)
	}
	oneWay := true // every size from 16 KiB has its one-way time
	for i, n := range probeSizes {
		if n >= 16<<10 && t[i] <= 0 {
			oneWay = false
		}
	}
	for i, n := range probeSizes {
		if n < 16<<10 {
			continue
		}
		r := engine.SizeRate{Size: int64(n), Bandwidth: rate(n, t[len(probeSizes)+i])}
		if oneWay {
			r.OneWay = rate(n, t[i])
			l.OneWay = r.OneWay
		}
		l.BySize = append(l.BySize, r)
		l.Bandwidth = r.Bandwidth
	}
	if len(t) > 2*len(probeSizes) {
		l.Burst = int64(t[2*len(probeSizes)])
	}
	return l
}

// roundRate keeps 4 significant figures of bits per second, as
// engine.FormatBandwidth writes them, so that a table reads back the
// same.
func roundRate(bw float64) float64 {
	v, _ := engine.ParseBandwidth(engine.FormatBandwidth(bw))
	return v
}

// slowest combines two pairs' links of one class: the larger latency and
// at each size the lower rate (a ring runs at its slowest link's pace).
func slowest(a, b engine.Link) engine.Link {
	out := engine.Link{Class: a.Class, Bandwidth: min(a.Bandwidth, b.Bandwidth), Latency: max(a.Latency, b.Latency),
		OneWay: min(a.OneWay, b.OneWay), Burst: min(a.Burst, b.Burst)}
	for i := range a.BySize {
		r := a.BySize[i]
		if i < len(b.BySize) {
			r.Bandwidth = min(r.Bandwidth, b.BySize[i].Bandwidth)
			r.OneWay = min(r.OneWay, b.BySize[i].OneWay)
		}
		out.BySize = append(out.BySize, r)
	}
	return out
}

// writeProbe prints the times and the [[link]] tables.
func writeProbe(w io.Writer, c *engine.Cluster, file string, pairs []probePair, times [][]float64) error {
	var b strings.Builder
	fmt.Fprintf(&b, "probe-links: %s, %d hosts; a message's time one way (half the fastest batch's round trip) and both ways at once (an exchange of a chain of %d back to back, the trimmed mean of %d chains):\n", file, len(c.Nodes), probeChain, probeBatches)
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  class\tpair\t\t")
	for _, n := range probeSizes {
		fmt.Fprintf(tw, "%s\t", bytesName(n))
	}
	fmt.Fprintf(tw, "α\tβ\tburst\t\n")
	best := map[engine.LinkClass]engine.Link{}
	for i, p := range pairs {
		l := fitLink(p.class, times[i])
		for half, what := range []string{"one way", "both ways"} {
			if half == 0 {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t", p.class, p.name, what)
			} else {
				fmt.Fprintf(tw, "\t\t%s\t", what)
			}
			for _, x := range times[i][half*len(probeSizes) : (half+1)*len(probeSizes)] {
				if x == 0 {
					fmt.Fprintf(tw, "-\t")
					continue
				}
				fmt.Fprintf(tw, "%v\t", time.Duration(x*1e9).Round(100*time.Nanosecond))
			}
			burst := "-"
			if l.Burst > 0 {
				burst = engine.FormatSize(l.Burst)
			}
			if half == 0 {
				fmt.Fprintf(tw, "%v\t%s\t%s\t\n", l.Latency, engine.FormatBandwidth(l.OneWayAt(math.Inf(1))), burst)
			} else {
				fmt.Fprintf(tw, "\t%s\t\t\n", engine.FormatBandwidth(l.Bandwidth))
			}
		}
		// The slowest pair of a class sets its pace.
		if o, ok := best[p.class]; !ok {
			best[p.class] = l
		} else {
			best[p.class] = slowest(o, l)
		}
	}
	tw.Flush()
	fmt.Fprintf(&b, probeTablesHeader+"%s (gorun plan --predict); measured by gorun launch --probe-links\n", file)
	for _, class := range slices.Backward(engine.LinkClasses) {
		if l, ok := best[class]; ok {
			fmt.Fprintf(&b, "[[link]]\nclass = %q\nbandwidth = %q\nlatency = %q\n", l.Class, engine.FormatBandwidth(l.Bandwidth), l.Latency.String())
			if l.OneWay > 0 {
				fmt.Fprintf(&b, "one_way = %q\n", engine.FormatBandwidth(l.OneWay))
			}
			if l.Burst > 0 {
				fmt.Fprintf(&b, "burst = %q\n", engine.FormatSize(l.Burst))
			}
			b.WriteString("by_size = [\n")
			for _, r := range l.BySize {
				if r.OneWay > 0 {
					fmt.Fprintf(&b, "  { size = %q, bandwidth = %q, one_way = %q },\n", engine.FormatSize(r.Size), engine.FormatBandwidth(r.Bandwidth), engine.FormatBandwidth(r.OneWay))
					continue
				}
				fmt.Fprintf(&b, "  { size = %q, bandwidth = %q },\n", engine.FormatSize(r.Size), engine.FormatBandwidth(r.Bandwidth))
			}
			b.WriteString("]\n\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func bytesName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
