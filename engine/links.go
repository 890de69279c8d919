package engine

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"gorun/engine/target"
)

// LinkClass is which kind of link a collective crosses, the class of a
// cluster file's [[link]] table.
type LinkClass string

// The link classes, from the fastest to the slowest as a rule.
const (
	// LinkInProc joins the devices of one process (comm's in-process
	// transport, shared memory).
	LinkInProc LinkClass = "inproc"
	// LinkProcess joins processes of one host (MPI through the host's
	// shared memory or loopback).
	LinkProcess LinkClass = "process"
	// LinkHost joins processes on different hosts (MPI over the network).
	LinkHost LinkClass = "host"
)

// LinkClasses are the classes a [[link]] table may name, in order.
var LinkClasses = []LinkClass{LinkInProc, LinkProcess, LinkHost}

// Link is one [[link]] table of a cluster file: the alpha–beta figures of
// one link class, which `gorun plan --predict` uses to time collectives.
// `gorun launch --probe-links` measures them and writes such tables.
type Link struct {
	Class LinkClass
	// Bandwidth is the link's rate in bytes per second (β), > 0.
	Bandwidth float64
	// Latency is the time of one message of no bytes (α), ≥ 0.
	Latency time.Duration
}

// String writes the link as a [[link]] table's one line:
// `class = "host", bandwidth = "1Gbit/s", latency = "50µs"`.
func (l Link) String() string {
	return fmt.Sprintf("class = %q, bandwidth = %q, latency = %q", l.Class, FormatBandwidth(l.Bandwidth), l.Latency.String())
}

// linkKeys are the keys of a [[link]] table.
var linkKeys = []string{"class", "bandwidth", "latency"}

// linkTable decodes a [[link]] table, marking its known keys decoded.
type linkTable struct {
	Class     rawValue `toml:"class"`
	Bandwidth rawValue `toml:"bandwidth"`
	Latency   rawValue `toml:"latency"`
}

// linkError is what is wrong with the value of the link key: in which
// entry (1-based; 0: the value as a whole) and which of its keys.
type linkError struct {
	entry int
	sub   string
	msg   string
}

// key names the entry's key in full: "link[2].bandwidth", "link[1]", "link".
func (e *linkError) key() string {
	switch {
	case e.entry == 0:
		return "link"
	case e.sub == "":
		return fmt.Sprintf("link[%d]", e.entry)
	}
	return fmt.Sprintf("link[%d].%s", e.entry, e.sub)
}

// line finds the line of e in a file: its key's line within the
// entry-th [[link]] table, else that table's header, else the link key's.
func (e *linkError) line(kl keyLines) int {
	hdrs := kl["link"]
	k := e.entry
	if k < 1 || k > len(hdrs) {
		return kl.line("link")
	}
	start, end := hdrs[k-1], math.MaxInt
	if k < len(hdrs) {
		end = hdrs[k]
	}
	for _, l := range kl["link."+e.sub] {
		if l > start && l < end {
			return l
		}
	}
	return start
}

// Link returns the cluster file's link of class, and whether it has one.
func (c *Cluster) Link(class LinkClass) (Link, bool) {
	for _, l := range c.Links {
		if l.Class == class {
			return l, true
		}
	}
	return Link{}, false
}

// links reads the value of the link key: [[link]] tables, each with a
// class (one of LinkClasses, each at most once), a bandwidth (a string
// with its unit, ParseBandwidth) and optionally a latency (a Go
// duration, default 0). Errors name the entry as "link[2].bandwidth".
func links(v any) ([]Link, *linkError) {
	var entries []map[string]any
	switch arr := v.(type) {
	case []map[string]any:
		entries = arr
	case []any:
		for _, e := range arr {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, &linkError{msg: "want [[link]] tables (or an array of {class = ..., bandwidth = ...}), found an array holding " + target.Found(e)}
			}
			entries = append(entries, m)
		}
	default:
		return nil, &linkError{msg: "want [[link]] tables, one a link class, found " + target.Found(v)}
	}
	var out []Link
	for i, e := range entries {
		fail := func(sub, format string, args ...any) ([]Link, *linkError) {
			return nil, &linkError{entry: i + 1, sub: sub, msg: fmt.Sprintf(format, args...)}
		}
		var l Link
		cv, ok := e["class"]
		if !ok {
			return fail("", "class is missing: want one of %s", linkClassList())
		}
		s, ok := cv.(string)
		if !ok {
			return fail("class", "want one of %s, found %s", linkClassList(), target.Found(cv))
		}
		l.Class = LinkClass(s)
		if !validLinkClass(l.Class) {
			return fail("class", "want one of %s, got %q", linkClassList(), s)
		}
		for j, prev := range out {
			if prev.Class == l.Class {
				return fail("class", "class %q is already given by link[%d]: one [[link]] table a class", s, j+1)
			}
		}
		bv, ok := e["bandwidth"]
		if !ok {
			return fail("", "bandwidth is missing: want a rate with its unit, such as \"1Gbit/s\" or \"12.5GB/s\"")
		}
		bs, ok := bv.(string)
		if !ok {
			return fail("bandwidth", "want a rate with its unit as a string, such as \"1Gbit/s\", found %s", target.Found(bv))
		}
		bw, err := ParseBandwidth(bs)
		if err != nil {
			return fail("bandwidth", "%v", err)
		}
		l.Bandwidth = bw
		if lv, ok := e["latency"]; ok {
			ls, ok := lv.(string)
			if !ok {
				return fail("latency", "want a duration as a string, such as \"20us\", found %s", target.Found(lv))
			}
			d, err := time.ParseDuration(strings.TrimSpace(ls))
			if err != nil {
				return fail("latency", "%q is not a duration: want a number with a unit, such as \"20us\", \"1.5ms\"", ls)
			}
			if d < 0 {
				return fail("latency", "must be ≥ 0, got %v", d)
			}
			l.Latency = d
		}
		out = append(out, l)
	}
	return out, nil
}

func validLinkClass(c LinkClass) bool {
	for _, k := range LinkClasses {
		if k == c {
			return true
		}
	}
	return false
}

func linkClassList() string {
	var s []string
	for _, k := range LinkClasses {
		s = append(s, strconv.Quote(string(k)))
	}
	return strings.Join(s, ", ")
}

// bandwidthUnits are the units ParseBandwidth reads, in bytes per second
// for one of them. Bits are lower-case b, bytes upper-case B; k, M, G, T
// are powers of 1000, Ki, Mi, Gi, Ti powers of 1024 (as tc and ethtool
// write rates).
var bandwidthUnits = map[string]float64{
	"bit/s": 1.0 / 8, "kbit/s": 1e3 / 8, "Mbit/s": 1e6 / 8, "Gbit/s": 1e9 / 8, "Tbit/s": 1e12 / 8,
	"B/s": 1, "kB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12,
	"KiB/s": 1 << 10, "MiB/s": 1 << 20, "GiB/s": 1 << 30, "TiB/s": 1 << 40,
}

// ParseBandwidth reads a rate with its unit, "1Gbit/s", "200 Mbit/s",
// "12.5GB/s", "900MiB/s", into bytes per second. The number must be
// finite and > 0; the unit is required (bits and bytes differ eightfold,
// so neither is assumed).
func ParseBandwidth(s string) (float64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || t[i] == 'e' && i > 0 || t[i] == '+' || t[i] == '-') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" {
		return 0, fmt.Errorf("%q is not a rate: want a number and a unit, such as \"1Gbit/s\" or \"12.5GB/s\"", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a rate: %q is not a number", s, num)
	}
	mul, ok := bandwidthUnits[unit]
	if !ok {
		if unit == "" {
			return 0, fmt.Errorf("%q has no unit: write bits (\"Gbit/s\", \"Mbit/s\") or bytes (\"GB/s\", \"MiB/s\") per second", s)
		}
		return 0, fmt.Errorf("%q: unknown unit %q, want one of bit/s, kbit/s, Mbit/s, Gbit/s, Tbit/s, B/s, kB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, TiB/s", s, unit)
	}
	bw := f * mul
	if !(bw > 0) || math.IsInf(bw, 0) {
		return 0, fmt.Errorf("%q: must be a finite rate > 0", s)
	}
	return bw, nil
}

// FormatBandwidth writes bytes per second in bits per second, as
// ParseBandwidth reads them back ("1Gbit/s", "187.5Mbit/s").
func FormatBandwidth(bw float64) string {
	bits := bw * 8
	for _, u := range []struct {
		name string
		div  float64
	}{{"Tbit/s", 1e12}, {"Gbit/s", 1e9}, {"Mbit/s", 1e6}, {"kbit/s", 1e3}} {
		if bits >= u.div {
			return strconv.FormatFloat(bits/u.div, 'g', 4, 64) + u.name
		}
	}
	return strconv.FormatFloat(bits, 'g', 4, 64) + "bit/s"
}

// parseLinks decodes the link key of a cluster file (see links); decoding
// into []linkTable marks the known keys decoded, so that only a table's
// unknown keys are reported as such.
func parseLinks(md toml.MetaData, p toml.Primitive) ([]Link, *linkError) {
	var v any
	if err := md.PrimitiveDecode(p, &v); err != nil {
		return nil, &linkError{msg: err.Error()}
	}
	ls, le := links(v)
	if le == nil || le.entry > 0 {
		var lt []linkTable
		md.PrimitiveDecode(p, &lt)
	}
	return ls, le
}
