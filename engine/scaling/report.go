package scaling

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"gorun/engine"
)

// Source says where a prediction's compute figure came from, for the
// report: "measured: 5 steps on this machine (cpu), median" or "--step-time".
type Source string

// Write prints base (the cluster) and scaled (the same Plan on k× its
// hosts) as `gorun plan --predict` shows them: the links used, the
// compute split, each collective with its levels, start, end and hidden
// part, the step, samples/s and efficiency, then one line per scale.
func Write(w io.Writer, p *engine.Plan, links Links, src Source, base *Prediction, scaled []*Prediction) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\nscaling prediction (%s; per-device batch %d, sync %s)\n", base.Topology, p.LocalBatch[0], p.Sync.Kind())
	fmt.Fprintf(&b, "  links (alpha–beta):")
	any := false
	for _, c := range engine.LinkClasses {
		if l, ok := links[c]; ok {
			fmt.Fprintf(&b, " %s α %v β %s;", c, l.Latency, engine.FormatBandwidth(l.Bandwidth))
			any = true
		}
	}
	if !any {
		b.WriteString(" none needed")
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  compute of one device's step: %v (%s): forward %v, backward %v, update %v\n",
		round(base.Compute), src, round(base.Forward), round(base.Backward), round(base.Update))
	if len(base.Collectives) > 0 {
		tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  step\tcollective\tbytes\tstream\tlevels\ttime\tstarts\tends\thidden\n")
		for _, c := range base.Collectives {
			var lv []string
			for _, l := range c.Levels {
				lv = append(lv, fmt.Sprintf("%s %s over %d: %v", l.Class, l.Algorithm, l.Ranks, round(l.Time)))
			}
			every := ""
			if c.Every > 1 {
				every = fmt.Sprintf(" (every %d steps, amortised)", c.Every)
			}
			fmt.Fprintf(tw, "  %d\t%s %s\t%s\t%s\t%s\t%v%s\t%v\t%v\t%v\n", c.Step, c.Kind, c.Tag, bytes(c.Bytes), c.Stream,
				strings.Join(lv, "; "), round(c.Time), every, round(c.Start), round(c.End), round(c.Hidden))
		}
		tw.Flush()
	}
	fmt.Fprintf(&b, "  step %v = compute %v + exposed communication %v (of %v); %.0f samples/s, scaling efficiency %.1f%%\n",
		round(base.Step), round(base.Compute), round(base.Exposed), round(base.Comm), base.SamplesPerS, 100*base.Efficiency)
	if len(scaled) > 0 {
		fmt.Fprintf(&b, "\n  on more hosts (the same links; per-device batch kept, so the global batch grows):\n")
		tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "  hosts\tdevices\tstep\tcommunication\texposed\tsamples/s\tefficiency\t\n")
		for _, s := range scaled {
			fmt.Fprintf(tw, "  %d\t%d\t%v\t%v\t%v\t%.0f\t%.1f%%\t\n", s.Topology.Hosts, s.Topology.World(), round(s.Step),
				round(s.Comm), round(s.Exposed), s.SamplesPerS, 100*s.Efficiency)
		}
		tw.Flush()
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// round keeps three significant figures of d.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= 100*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= 10*time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	case d >= 100*time.Microsecond:
		return d.Round(100 * time.Nanosecond)
	case d >= 10*time.Microsecond:
		return d.Round(10 * time.Nanosecond)
	}
	return d
}

func bytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
