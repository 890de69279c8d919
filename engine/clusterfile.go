package engine

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"gorun/datasets/userfile"
	"gorun/engine/target"
)

// MaxClusterFileBytes is the largest cluster file LoadCluster reads (1
// MiB): a larger one is a mistake, not a cluster.
const MaxClusterFileBytes = 1 << 20

// LoadCluster reads a cluster TOML file. Every key is optional; a key left
// out keeps the default shown (DefaultCluster's):
//
//	[cluster]
//	backend   = "cpu"      # cpu | cuda (a gorun built with `make build-cuda`)
//	transport = "inproc"   # inproc | mpi (`make build-mpi`) | nccl (`make build-cuda`)
//	devices   = 1          # devices in each process, ≥ 1
//	processes = 0          # processes (MPI ranks); 0: the sum of the [[node]] slots, or 1
//	weights   = []         # relative device speeds, one per device of the world
//	                       # (processes × devices), for the weighted partition;
//	                       # none: equal
//	memory_limit = "8GiB"  # most memory this process's devices may plan; left out:
//	                       # what the host has available (a backend whose memory is
//	                       # the host's, such as cpu)
//	fusion    = true       # false: compile the plan as the script wrote it, every op
//	                       # its own step (no fused steps; to compare against)
//	network   = ""         # gorun launch: the network between hosts, CIDR blocks or
//	                       # interface names ("10.77.0.0/24", "eth1"), comma-separated
//	                       # (CheckNetwork); "": every interface OpenMPI finds
//	bind      = "none"     # gorun launch: none | core | socket (Cluster.BindPolicy)
//
//	[comm]
//	algorithm = "auto"     # auto | ring | tree | direct
//	bucket_mb = 0          # all-reduce bucket size in MB, > 0; 0 (left out): the script's
//	timeout   = "60s"      # the longest any collective waits, a Go duration, ≥ 100ms
//	                       # (MinTimeout)
//	tcp_fragment = "auto"  # gorun launch: Open MPI's TCP put fragments and socket
//	                       # send buffers: auto | off | a size ≥ 4KiB
//	                       # (Cluster.TCPFragmentBytes)
//
//	[cpu]                  # a table per backend, named after it, holding the keys
//	help = true            # that backend registers (target.Target.Keys), such as
//	                       # the cpu backend's help or the cuda backend's eager,
//	                       # cublas and nccl; `gorun plan` prints their values
//
//	[ssh]                  # how gorun launch reaches the hosts (SSH); unset: ssh's defaults
//	user    = ""           # ssh -l
//	port    = 22           # ssh -p
//	key     = ""           # ssh -i (with IdentitiesOnly=yes)
//	options = []           # ssh -o NAME=VALUE each, such as "StrictHostKeyChecking=accept-new"
//	connect_timeout = "10s"  # ≥ 1s
//	program = "ssh"        # the ssh client
//
//	[[node]]               # hosts for `gorun launch` (none by default); one table a host
//	host  = "127.0.0.1"    # required: a host name (RFC 1123) or IP address (CheckHost)
//	slots = 1              # processes on that host, ≥ 1
//
//	[[link]]               # alpha–beta figures of a link class, for `gorun plan
//	class = "host"         # --predict` (none by default): inproc | process | host
//	bandwidth = "1Gbit/s"  # required: a rate with its unit (ParseBandwidth)
//	latency = "50us"       # a Go duration, ≥ 0 (default 0)
//
// The backend names, the transports that come with a backend (nccl with
// cuda) and the backends' tables are those of the Targets registered
// (package engine/target): a backend this gorun lacks is known by the
// Target its package registers for such builds, so a cluster file naming
// it parses, and its table is checked, in every build.
//
// Syntax and type errors give the file and line ("c.toml:3: cluster.devices:
// want an integer, found string \"two\""); an unknown key is named in full,
// with a "did you mean" when a known key is close; impossible values
// (devices = 0, a timeout that does not parse or is under MinTimeout,
// weights that are not finite or whose count differs from the devices, a
// host that is not a host name or address, an [ssh] value holding a space
// or a shell character, which OpenMPI could not pass on) name the key and
// its line, a
// node's as "c.toml:5: node[2].slots". Set changes one key of a Cluster the
// same way, from a string.
func LoadCluster(path string) (Cluster, error) {
	src, err := userfile.ReadFile(path, MaxClusterFileBytes)
	if err != nil {
		return Cluster{}, fmt.Errorf("cluster file: %w", err)
	}
	return ParseCluster(path, src)
}

// ClusterError is an error in a cluster file or a Set: the file (empty for
// Set), the line (0 when unknown), the key in full ("comm.timeout") and
// what is wrong.
type ClusterError struct {
	File string
	Line int
	Key  string
	Msg  string
}

// Error implements error: "c.toml:3: cluster.devices: must be ≥ 1, got 0".
func (e *ClusterError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// clusterKey is one key of a cluster file: its full name and how a TOML
// value sets it. set checks the value on its own and returns what is
// wrong with it, or "".
type clusterKey struct {
	name string
	set  func(c *Cluster, v any) string
}

// clusterKeys are the leaf keys of a cluster file, in the order of the
// documentation, but for the backends' tables (backendKey). Tables:
// cluster, comm, node and one per backend.
var clusterKeys = []clusterKey{
	{"cluster.backend", func(c *Cluster, v any) string { return setChoice(&c.Backend, v, target.Names()) }},
	{"cluster.transport", func(c *Cluster, v any) string { return setChoice(&c.Transport, v, transports()) }},
	{"cluster.devices", func(c *Cluster, v any) string { return setInt(&c.Devices, v, 1, "") }},
	{"cluster.processes", func(c *Cluster, v any) string {
		return setInt(&c.Processes, v, 0, " (0: the sum of the [[node]] slots)")
	}},
	{"cluster.weights", func(c *Cluster, v any) string {
		arr, ok := v.([]any)
		if !ok {
			return "want an array of numbers such as [1.0, 3.0], found " + target.Found(v)
		}
		ws := make([]float64, len(arr))
		for i, x := range arr {
			f, ok := asFloat(x)
			if !ok {
				return fmt.Sprintf("want an array of numbers, found %s at index %d", target.Found(x), i)
			}
			if !(f > 0) || math.IsInf(f, 0) {
				return fmt.Sprintf("weight %d must be a positive finite number, got %g", i, f)
			}
			ws[i] = f
		}
		if len(ws) == 0 {
			ws = nil
		}
		c.Weights = ws
		return ""
	}},
	{"cluster.memory_limit", func(c *Cluster, v any) string {
		n, msg := byteSize(v)
		if msg != "" {
			return msg
		}
		c.MemoryLimit = n
		return ""
	}},
	{"cluster.fusion", func(c *Cluster, v any) string {
		b, ok := v.(bool)
		if !ok {
			return "want true or false, found " + target.Found(v)
		}
		c.NoFusion = !b
		return ""
	}},
	{"cluster.network", func(c *Cluster, v any) string {
		s, ok := v.(string)
		if !ok {
			return `want a string such as "10.77.0.0/24" or "eth1", found ` + target.Found(v)
		}
		if msg := CheckNetwork(s); msg != "" {
			return msg
		}
		c.Network = s
		return ""
	}},
	{"cluster.bind", func(c *Cluster, v any) string { return setChoice(&c.Bind, v, clusterBinds) }},
	{"comm.algorithm", func(c *Cluster, v any) string { return setChoice(&c.Algorithm, v, clusterAlgorithms) }},
	{"comm.bucket_mb", func(c *Cluster, v any) string {
		f, ok := asFloat(v)
		if !ok {
			return "want a number of megabytes, found " + target.Found(v)
		}
		if !(f > 0) || math.IsInf(f, 0) {
			return fmt.Sprintf("must be positive, got %g", f)
		}
		c.BucketMB = f
		return ""
	}},
	{"comm.timeout", func(c *Cluster, v any) string {
		s, ok := v.(string)
		if !ok {
			return `want a duration string such as "60s" or "2m", found ` + target.Found(v)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Sprintf(`%q is not a duration: want a number and a unit, such as "60s", "2m" or "1m30s"`, s)
		}
		if d <= 0 {
			return fmt.Sprintf("must be positive, got %q", s)
		}
		if d < MinTimeout {
			return fmt.Sprintf("%q is too short: a collective that waits less than %v fails while its data are still on the way; want at least %v (the default is %v)",
				s, MinTimeout, MinTimeout, DefaultCluster().Timeout)
		}
		c.Timeout = d
		return ""
	}},
	{"comm.tcp_fragment", func(c *Cluster, v any) string {
		switch v {
		case "auto":
			c.TCPFragment = 0
			return ""
		case "off":
			c.TCPFragment = -1
			return ""
		}
		if s, ok := v.(string); ok { // --set comm.tcp_fragment=65536
			if i, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
				v = i
			}
		}
		n, msg := byteSize(v)
		if msg != "" {
			return `want "auto", "off" or a size such as "64KiB" or a number of bytes, found ` + target.Found(v)
		}
		if n < MinTCPFragment {
			return fmt.Sprintf("%d bytes is too small: want at least %d (4KiB), or \"auto\"", n, MinTCPFragment)
		}
		if n > MaxTCPFragment {
			return fmt.Sprintf("%d bytes is too large: want at most %d (1GiB), or \"off\" for Open MPI's own", n, MaxTCPFragment)
		}
		c.TCPFragment = n
		return ""
	}},
	{"ssh.user", func(c *Cluster, v any) string { return setSSHWord(&c.SSH.User, "ssh.user", v) }},
	{"ssh.port", func(c *Cluster, v any) string {
		n, ok := v.(int64)
		if !ok {
			return "want a port number, found " + target.Found(v)
		}
		if n < 1 || n > 65535 {
			return fmt.Sprintf("must be a port number, 1 to 65535, got %d", n)
		}
		c.SSH.Port = int(n)
		return ""
	}},
	{"ssh.key", func(c *Cluster, v any) string { return setSSHWord(&c.SSH.Key, "ssh.key", v) }},
	{"ssh.options", func(c *Cluster, v any) string {
		arr, ok := v.([]any)
		if !ok {
			return `want an array of ssh options such as ["StrictHostKeyChecking=accept-new"], found ` + target.Found(v)
		}
		var opts []string
		for i, x := range arr {
			o, ok := x.(string)
			if !ok {
				return fmt.Sprintf("want an array of strings, found %s at index %d", target.Found(x), i)
			}
			if msg := checkSSHOption(o); msg != "" {
				return fmt.Sprintf("option %d: %s", i, msg)
			}
			opts = append(opts, o)
		}
		c.SSH.Options = opts
		return ""
	}},
	{"ssh.connect_timeout", func(c *Cluster, v any) string {
		s, ok := v.(string)
		if !ok {
			return `want a duration string such as "10s", found ` + target.Found(v)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Sprintf(`%q is not a duration: want a number and a unit, such as "10s"`, s)
		}
		if d < time.Second {
			return fmt.Sprintf("%q is too short: ssh counts whole seconds; want at least 1s (the default is %v)", s, DefaultConnectTimeout)
		}
		c.SSH.ConnectTimeout = d
		return ""
	}},
	{"ssh.program", func(c *Cluster, v any) string { return setSSHWord(&c.SSH.Program, "ssh.program", v) }},
	{"node", func(c *Cluster, v any) string {
		// Set and ParseCluster call nodes themselves, to name the entry
		// and its key (node[2].slots); this is for the key's name.
		hosts, ne := nodes(v)
		if ne != nil {
			return ne.key() + ": " + ne.msg
		}
		c.Nodes = hosts
		return ""
	}},
}

// nodeKeys are the keys of a [[node]] table.
var nodeKeys = []string{"host", "slots"}

// knownKeys are every key a cluster file may hold, tables included: the
// fixed ones and those of the registered backends' tables.
func knownKeys() []string {
	ks := []string{"cluster", "comm", "ssh"}
	for _, k := range clusterKeys {
		ks = append(ks, k.name)
	}
	for _, k := range nodeKeys {
		ks = append(ks, "node."+k)
	}
	ks = append(ks, "link")
	for _, k := range linkKeys {
		ks = append(ks, "link."+k)
	}
	for _, t := range target.All() {
		ks = append(ks, t.Name)
		for _, k := range t.Keys {
			ks = append(ks, t.Name+"."+k.Name)
		}
	}
	return ks
}

// IsClusterKey reports whether name is a key Set takes: "cluster.…",
// "comm.…", "ssh.…", "node", or a key of a backend's table ("cuda.eager"). The
// --set flag sends such names to Set and the others to the script.
func IsClusterKey(name string) bool {
	if strings.HasPrefix(name, "cluster.") || strings.HasPrefix(name, "comm.") || strings.HasPrefix(name, "ssh.") || name == "node" {
		return true
	}
	table, _, ok := strings.Cut(name, ".")
	return ok && target.Lookup(table) != nil
}

// backendKey returns the Target and key of a backend's table that name
// ("cuda.eager") names, or nils.
func backendKey(name string) (*target.Target, *target.Key) {
	table, key, ok := strings.Cut(name, ".")
	if !ok {
		return nil, nil
	}
	t := target.Lookup(table)
	if t == nil {
		return nil, nil
	}
	return t, t.Key(key)
}

// setBackend sets key k of backend t's table to the TOML value v, when k
// takes it.
func (c *Cluster) setBackend(t *target.Target, k *target.Key, v any) string {
	val, msg := k.Parse(v)
	if msg != "" {
		return msg
	}
	settings := make(map[string]any, len(c.Settings)+1)
	for name, x := range c.Settings {
		settings[name] = x
	}
	settings[t.Name+"."+k.Name] = val
	c.Settings = settings
	return ""
}

// byteSize reads a memory size: a number of bytes, or a string with a
// unit ("512MiB", "8GB", "1.5GiB").
func byteSize(v any) (int64, string) {
	if f, ok := asFloat(v); ok {
		if !(f > 0) || f > 1<<62 {
			return 0, fmt.Sprintf("must be a positive number of bytes, got %g", f)
		}
		return int64(f), ""
	}
	s, ok := v.(string)
	if !ok {
		return 0, `want a size such as "8GiB" or a number of bytes, found ` + target.Found(v)
	}
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || !(f > 0) || f*u.mult > 1<<62 {
				break
			}
			return int64(f * u.mult), ""
		}
	}
	return 0, fmt.Sprintf(`%q is not a size: want a positive number and a unit, such as "512MiB" or "8GiB"`, s)
}

// Set changes one key of the cluster from a string, as --set
// cluster.devices=2 does: key is a cluster file's key in full
// ("cluster.devices", "comm.timeout", "node") and value is what the file
// would hold, where strings need no quotes (comm.timeout=30s), weights may
// be a bare list (cluster.weights=1,3) and nodes may be written
// host:slots,host:slots. Set checks the value on its own; Validate, after
// the last Set, checks the keys against each other (weights against
// devices). On error the cluster is left unchanged.
func (c *Cluster) Set(key, value string) error {
	if key == "cluster" || key == "comm" || key == "ssh" {
		return &ClusterError{Key: key, Msg: "is a table: set one of its keys, e.g. " + key + "." + map[string]string{"cluster": "devices", "comm": "timeout", "ssh": "user"}[key]}
	}
	if t := target.Lookup(key); t != nil {
		msg := "is the table of backend " + t.Name + ", which has no keys"
		if len(t.Keys) > 0 {
			msg = "is a table: set one of its keys, e.g. " + key + "." + t.Keys[0].Name
		}
		return &ClusterError{Key: key, Msg: msg}
	}
	i := slices.IndexFunc(clusterKeys, func(k clusterKey) bool { return k.name == key })
	t, k := backendKey(key)
	if i < 0 && k == nil {
		return &ClusterError{Key: key, Msg: "unknown cluster key" + didYouMean(key)}
	}
	v, err := setValue(key, value)
	if err != nil {
		return &ClusterError{Key: key, Msg: err.Error()}
	}
	n := *c
	var msg string
	switch {
	case k != nil:
		msg = n.setBackend(t, k, v)
	case key == "node":
		hosts, ne := nodes(v)
		if ne != nil {
			return &ClusterError{Key: ne.key(), Msg: ne.msg}
		}
		n.Nodes = hosts
	default:
		msg = clusterKeys[i].set(&n, v)
	}
	if msg != "" {
		return &ClusterError{Key: key, Msg: msg}
	}
	*c = n
	return nil
}

// setValue turns Set's string into the value the TOML decoder would give.
func setValue(key, value string) (any, error) {
	s := strings.TrimSpace(value)
	switch key {
	case "cluster.weights":
		if !strings.HasPrefix(s, "[") {
			s = "[" + s + "]"
		}
	case "node":
		if !strings.HasPrefix(s, "[") {
			return nodeShorthand(s)
		}
	case "ssh.options":
		if !strings.HasPrefix(s, "[") {
			return []any{s}, nil // one option, unquoted: ssh.options=StrictHostKeyChecking=no
		}
	}
	var doc map[string]any
	if _, err := toml.Decode("v = "+s, &doc); err == nil {
		if _, isStr := doc["v"].(string); isStr || !stringKey(key) {
			return doc["v"], nil
		}
	} else if !stringKey(key) {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%q is not a TOML value: %s", value, pe.Message)
		}
		return nil, fmt.Errorf("%q is not a TOML value: %v", value, err)
	}
	return value, nil // a bare string
}

// stringKey reports whether key holds a string, which Set takes unquoted.
func stringKey(key string) bool {
	switch key {
	case "cluster.backend", "cluster.transport", "comm.algorithm", "comm.timeout", "comm.tcp_fragment", "cluster.memory_limit",
		"cluster.network", "cluster.bind", "ssh.user", "ssh.key", "ssh.connect_timeout", "ssh.program":
		return true
	}
	_, k := backendKey(key)
	return k != nil && k.Text
}

// nodeShorthand reads "host:slots,host:slots" (slots may be left out: 1).
func nodeShorthand(s string) (any, error) {
	var out []any
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		host, slots := part, int64(1)
		if i := strings.LastIndexByte(part, ':'); i >= 0 {
			n, err := strconv.ParseInt(part[i+1:], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%q: want host:slots, such as 127.0.0.1:2", part)
			}
			host, slots = part[:i], n
		}
		out = append(out, map[string]any{"host": host, "slots": slots})
	}
	return out, nil
}

// rawValue keeps a TOML value as the decoder gives it; the keys' set
// functions check its type.
type rawValue struct {
	set bool
	v   any
}

// UnmarshalTOML implements toml.Unmarshaler.
func (r *rawValue) UnmarshalTOML(v any) error {
	r.set, r.v = true, v
	return nil
}

// The tables of a cluster file, each key a rawValue (so that every key is
// "decoded" and MetaData.Undecoded lists exactly the unknown ones).
type (
	clusterTable struct {
		Backend   rawValue `toml:"backend"`
		Transport rawValue `toml:"transport"`
		Devices   rawValue `toml:"devices"`
		Processes rawValue `toml:"processes"`
		Weights   rawValue `toml:"weights"`
		Memory    rawValue `toml:"memory_limit"`
		Fusion    rawValue `toml:"fusion"`
		Network   rawValue `toml:"network"`
		Bind      rawValue `toml:"bind"`
	}
	sshTable struct {
		User           rawValue `toml:"user"`
		Port           rawValue `toml:"port"`
		Key            rawValue `toml:"key"`
		Options        rawValue `toml:"options"`
		ConnectTimeout rawValue `toml:"connect_timeout"`
		Program        rawValue `toml:"program"`
	}
	commTable struct {
		Algorithm rawValue `toml:"algorithm"`
		BucketMB  rawValue `toml:"bucket_mb"`
		Timeout   rawValue `toml:"timeout"`
		Fragment  rawValue `toml:"tcp_fragment"`
	}
	nodeTable struct {
		Host  rawValue `toml:"host"`
		Slots rawValue `toml:"slots"`
	}
)

// ParseCluster parses a cluster file's contents (see LoadCluster); path
// names it in errors.
func ParseCluster(path string, src []byte) (Cluster, error) {
	// The top level's tables by name: cluster, comm, node and the
	// backends' (anything else is an unknown key).
	var top map[string]toml.Primitive
	md, err := toml.NewDecoder(strings.NewReader(string(src))).Decode(&top)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return Cluster{}, fmt.Errorf("%s:%d:%d: %s", path, pe.Position.Line, pe.Position.Col, pe.Message)
		}
		return Cluster{}, fmt.Errorf("%s: %v", path, err)
	}
	lines := scanKeyLines(src)
	var errs []*ClusterError
	fail := func(line int, key, msg string) {
		errs = append(errs, &ClusterError{File: path, Line: line, Key: key, Msg: msg})
	}
	// refused are the tables whose value was refused as a whole (a
	// [cluster] that is a number, a [node] that is not [[node]]): their
	// keys are part of that error, not unknown keys.
	refused := map[string]bool{}
	refuse := func(line int, key, msg string) {
		fail(line, key, msg)
		refused[key] = true
	}

	c := DefaultCluster()
	c.File = path
	apply := func(line int, key string, v any) {
		i := slices.IndexFunc(clusterKeys, func(k clusterKey) bool { return k.name == key })
		if msg := clusterKeys[i].set(&c, v); msg != "" {
			fail(line, key, msg)
		}
	}
	// table decodes one of the [cluster], [comm] and backend tables into
	// dst after checking that it is a table.
	table := func(name string, dst any) bool {
		p, ok := top[name]
		if !ok {
			return false
		}
		var v any
		if err := md.PrimitiveDecode(p, &v); err != nil {
			refuse(lines.line(name), name, err.Error())
			return false
		}
		if _, ok := v.(map[string]any); !ok {
			refuse(lines.line(name), name, fmt.Sprintf("want a table [%s], found %s", name, target.Found(v)))
			return false
		}
		if err := md.PrimitiveDecode(p, dst); err != nil {
			refuse(lines.line(name), name, err.Error())
			return false
		}
		return true
	}
	// applyTable applies the keys of one table that the file sets, in order.
	type field struct {
		key string
		r   rawValue
	}
	applyTable := func(name string, fields []field) {
		for _, f := range fields {
			if f.r.set {
				apply(lines.line(name+"."+f.key), name+"."+f.key, f.r.v)
			}
		}
	}
	var ct clusterTable
	if table("cluster", &ct) {
		applyTable("cluster", []field{{"backend", ct.Backend}, {"transport", ct.Transport}, {"devices", ct.Devices},
			{"processes", ct.Processes}, {"weights", ct.Weights}, {"memory_limit", ct.Memory}, {"fusion", ct.Fusion},
			{"network", ct.Network}, {"bind", ct.Bind}})
	}
	var mt commTable
	if table("comm", &mt) {
		applyTable("comm", []field{{"algorithm", mt.Algorithm}, {"bucket_mb", mt.BucketMB}, {"timeout", mt.Timeout}, {"tcp_fragment", mt.Fragment}})
	}
	var st sshTable
	if table("ssh", &st) {
		applyTable("ssh", []field{{"user", st.User}, {"port", st.Port}, {"key", st.Key}, {"options", st.Options},
			{"connect_timeout", st.ConnectTimeout}, {"program", st.Program}})
	}
	// Each backend's table: the keys its Target registers, in their
	// order; any other key of the table is unknown (below).
	for _, t := range target.All() {
		var bt map[string]any
		if !table(t.Name, &bt) {
			continue
		}
		for _, k := range t.Keys {
			if v, ok := bt[k.Name]; ok {
				name := t.Name + "." + k.Name
				if msg := c.setBackend(t, &k, v); msg != "" {
					fail(lines.line(name), name, msg)
				}
			}
		}
	}
	if p, ok := top["node"]; ok {
		// Decoding into []nodeTable marks host and slots as decoded
		// (decoding into an interface does not), so that only a node's
		// unknown keys are reported as such, whatever its values; when the
		// shape is wrong, nodes says how and the node's keys go with it.
		var v any
		var nt []nodeTable
		if err := md.PrimitiveDecode(p, &v); err != nil {
			refuse(lines.line("node"), "node", err.Error())
		} else if hosts, ne := nodes(v); ne != nil {
			if ne.entry == 0 {
				refuse(lines.line("node"), "node", ne.msg)
			} else {
				md.PrimitiveDecode(p, &nt)
				fail(lines.nodeLine(ne), ne.key(), ne.msg)
			}
		} else if err := md.PrimitiveDecode(p, &nt); err != nil {
			refuse(lines.line("node"), "node", err.Error())
		} else {
			c.Nodes = hosts
		}
	}
	if p, ok := top["link"]; ok {
		if ls, le := parseLinks(md, p); le != nil {
			fail(le.line(lines), le.key(), le.msg)
			if le.entry == 0 {
				refused["link"] = true
			}
		} else {
			c.Links = ls
		}
	}

	// Unknown keys: those the decoder left undecoded (and those it matched
	// only ignoring case), each named once, at its outermost level.
	undecoded := map[string]bool{}
	for _, k := range md.Undecoded() {
		undecoded[joinKey(k)] = true
	}
	bad := map[string]bool{}
	known := knownKeys()
	var unknown []*ClusterError
	for _, k := range md.Keys() {
		name := joinKey(k)
		if len(k) > 1 && (bad[joinKey(k[:len(k)-1])] || refused[joinKey(k[:len(k)-1])]) {
			bad[name] = true
			continue
		}
		if refused[name] {
			continue
		}
		quoted := slices.ContainsFunc(k, func(p string) bool { return strings.Contains(p, ".") })
		if !undecoded[name] && !quoted && (slices.Contains(known, name) || name == "node") {
			continue
		}
		if bad[name] {
			continue
		}
		bad[name] = true
		msg := "unknown key" + didYouMean(name)
		if quoted {
			msg = fmt.Sprintf("unknown key: %s is quoted, so its dots are part of one name; write it without quotes", k)
		}
		unknown = append(unknown, &ClusterError{File: path, Line: lines.line(name), Key: name, Msg: msg})
	}
	errs = append(unknown, errs...)
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *ClusterError) int { return a.Line - b.Line })
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		if len(errs) == 1 {
			return Cluster{}, errs[0]
		}
		return Cluster{}, errors.New(strings.Join(msgs, "\n"))
	}
	if err := c.Validate(); err != nil {
		var ce *ClusterError
		if errors.As(err, &ce) {
			ce.Line = lines.line(ce.Key)
			if ne := nodeKeyError(ce.Key); ne != nil {
				ce.Line = lines.nodeLine(ne)
			}
		}
		return Cluster{}, err
	}
	return c, nil
}

// nodeError is what is wrong with the value of the node key: in which
// entry (1-based; 0: the value as a whole) and which of its keys ("host",
// "slots"; "": the entry itself).
type nodeError struct {
	entry int
	sub   string
	msg   string
}

// key names the entry's key in full, as errors do: "node[2].slots",
// "node[1]" or "node".
func (e *nodeError) key() string {
	switch {
	case e.entry == 0:
		return "node"
	case e.sub == "":
		return fmt.Sprintf("node[%d]", e.entry)
	}
	return fmt.Sprintf("node[%d].%s", e.entry, e.sub)
}

// nodeKeyError reads back a key that nodeError.key wrote ("node[2].slots"),
// or returns nil.
func nodeKeyError(key string) *nodeError {
	var e nodeError
	rest, ok := strings.CutPrefix(key, "node[")
	if !ok {
		return nil
	}
	num, sub, ok := strings.Cut(rest, "]")
	n, err := strconv.Atoi(num)
	if !ok || err != nil || n < 1 {
		return nil
	}
	e.entry, e.sub = n, strings.TrimPrefix(sub, ".")
	return &e
}

// tables reads the value of an array-of-tables key ([[node]], [[link]]):
// TOML's [[key]] tables, or an inline array of tables such as
// [example, ...]. It returns the tables, or why the value is not that
// (one says what each table is, for the message).
func tables(v any, key, example, one string) ([]map[string]any, string) {
	switch arr := v.(type) {
	case []map[string]any:
		return arr, ""
	case []any:
		entries := make([]map[string]any, 0, len(arr))
		for _, e := range arr {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, "want [[" + key + "]] tables (or an array of " + example + "), found an array holding " + target.Found(e)
			}
			entries = append(entries, m)
		}
		return entries, ""
	default:
		return nil, "want [[" + key + "]] tables, one " + one + ", found " + target.Found(v)
	}
}

// nodes reads the value of the node key: an array of tables, each with a
// host (a host name or IP address, see CheckHost) and, optionally, slots
// (default 1).
func nodes(v any) ([]Host, *nodeError) {
	entries, bad := tables(v, "node", "{host = ..., slots = ...}", "a host")
	if bad != "" {
		return nil, &nodeError{msg: bad}
	}
	var hosts []Host
	for i, e := range entries {
		h := Host{Slots: 1}
		hv, ok := e["host"]
		if !ok {
			return nil, &nodeError{i + 1, "", "host is missing"}
		}
		if h.Host, ok = hv.(string); !ok {
			return nil, &nodeError{i + 1, "host", "want a host name or address, found " + target.Found(hv)}
		}
		if msg := CheckHost(h.Host); msg != "" {
			return nil, &nodeError{i + 1, "host", msg}
		}
		if sv, ok := e["slots"]; ok {
			if msg := setInt(&h.Slots, sv, 1, ""); msg != "" {
				return nil, &nodeError{i + 1, "slots", msg}
			}
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// MaxHostLen is the longest host name (RFC 1123, as DNS carries it).
const MaxHostLen = 253

// CheckHost says why s is not a host that gorun launch may hand to mpirun
// and ssh, or returns "" when it is one: an IP address (net/netip's
// ParseAddr, without an IPv6 zone) or a host name after RFC 1123, at most
// MaxHostLen bytes of labels joined by dots (one final dot allowed), each
// label 1 to 63 ASCII letters, digits and hyphens that neither begins nor
// ends with a hyphen, the last not all digits. Nothing else reaches the
// hostfile, so a host cannot add hosts, slots or options of its own (a
// newline, a space, "slots=", "-oProxyCommand=…"). The message quotes s
// with Go's escapes, so that control characters show as such.
func CheckHost(s string) string {
	q := strconv.Quote(s)
	if len(s) > 60 {
		q = strconv.Quote(s[:40]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
	}
	bad := func(why string) string { return q + " is not a host name or IP address: " + why }
	switch {
	case s == "":
		return "is empty: want a host name or IP address, such as \"node1\" or \"10.0.0.7\""
	case len(s) > MaxHostLen:
		return bad(fmt.Sprintf("%d bytes, where a host name has at most %d", len(s), MaxHostLen))
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return bad("an IPv6 address with a zone (%" + a.Zone() + "), which a hostfile cannot carry; give an address without one, or a host name")
		}
		return ""
	}
	labels := strings.Split(strings.TrimSuffix(s, "."), ".")
	for _, l := range labels {
		switch {
		case l == "":
			return bad("an empty label (two dots in a row, or a dot at the start)")
		case len(l) > 63:
			return bad(fmt.Sprintf("label %q is %d bytes, where a label has at most 63", l[:20]+"…", len(l)))
		case l[0] == '-' || l[len(l)-1] == '-':
			return bad(fmt.Sprintf("label %q begins or ends with a hyphen", l))
		}
		for i, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				why := fmt.Sprintf("it holds %s at byte %d, where a host name holds only ASCII letters, digits, hyphens and dots (RFC 1123)",
					strconv.QuoteRune(r), strings.Index(s, l)+i)
				if r > 127 {
					why += "; write an internationalised name in its xn-- form"
				}
				return bad(why)
			}
		}
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		return bad("it looks like an IP address but is not one")
	}
	return ""
}

// CheckNetwork says why s is not a value of cluster.network, or returns
// "" when it is one: "" or comma-separated items, each a CIDR block
// ("10.77.0.0/24", "fd00::/64") or a network interface's name ("eth1",
// "ib0": at most 15 ASCII letters, digits and "._-:@", not beginning with
// a hyphen), as OpenMPI's btl_tcp_if_include and oob_tcp_if_include take
// them.
func CheckNetwork(s string) string {
	if s == "" {
		return ""
	}
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			return fmt.Sprintf("%q has an empty item: want CIDR blocks (\"10.77.0.0/24\") or interface names (\"eth1\"), comma-separated", s)
		}
		if strings.Contains(item, "/") {
			p, err := netip.ParsePrefix(item)
			if err != nil {
				return fmt.Sprintf("%q is not a CIDR block such as \"10.77.0.0/24\" (%v)", item, err)
			}
			if p.Masked() != p {
				return fmt.Sprintf("%q has host bits set: the network is %q", item, p.Masked().String())
			}
			continue
		}
		if _, err := netip.ParseAddr(item); err == nil {
			return fmt.Sprintf("%q is an address, not a network: give its CIDR block, such as \"%s/24\"", item, item)
		}
		if len(item) > 15 || item[0] == '-' || strings.IndexFunc(item, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:@", r))
		}) >= 0 {
			return fmt.Sprintf("%s is neither a CIDR block (\"10.77.0.0/24\") nor an interface name (\"eth1\": at most 15 letters, digits and ._-:@)", strconv.Quote(item))
		}
	}
	return ""
}

// sshSafe reports whether s may travel in OpenMPI's plm_rsh_args and
// through each host's shell unquoted: OpenMPI splits plm_rsh_args at
// spaces and hands its MCA parameters to every remote daemon on a command
// line, so a value holds only letters, digits and "-_./=:,+@%~".
func sshSafe(s string) (bad rune, ok bool) {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%~", r)) {
			return r, false
		}
	}
	return 0, true
}

// setSSHWord sets *dst to v, a string of sshSafe characters that does not
// begin with a hyphen (which ssh would take for an option).
func setSSHWord(dst *string, key string, v any) string {
	s, ok := v.(string)
	if !ok {
		return "want a string, found " + target.Found(v)
	}
	if msg := checkSSHWord(s); msg != "" {
		return msg
	}
	*dst = s
	return ""
}

// checkSSHWord says why s cannot be an [ssh] user, key or program.
func checkSSHWord(s string) string {
	if strings.HasPrefix(s, "-") {
		return fmt.Sprintf("%s begins with a hyphen, which ssh would take for an option", strconv.Quote(s))
	}
	if r, ok := sshSafe(s); !ok {
		return fmt.Sprintf("%s holds %s, which OpenMPI cannot pass on to ssh (it splits plm_rsh_args at spaces and hands them to each host's shell): use only letters, digits and -_./=:,+@%%~", strconv.Quote(s), strconv.QuoteRune(r))
	}
	return ""
}

// checkSSHOption says why o is not an ssh -o option for the [ssh] table:
// NAME=VALUE, NAME letters, VALUE sshSafe.
func checkSSHOption(o string) string {
	name, value, ok := strings.Cut(o, "=")
	if !ok || name == "" || value == "" || strings.IndexFunc(name, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') }) >= 0 {
		return fmt.Sprintf("%s is not an ssh option: want NAME=VALUE, such as \"StrictHostKeyChecking=accept-new\"", strconv.Quote(o))
	}
	if r, ok := sshSafe(value); !ok {
		return fmt.Sprintf("%s holds %s, which OpenMPI cannot pass on to ssh (it splits plm_rsh_args at spaces and hands them to each host's shell): put such options in ~/.ssh/config", strconv.Quote(o), strconv.QuoteRune(r))
	}
	return ""
}

// check says which key of the table is wrong and why, whoever built it.
func (s *SSH) check() (key, msg string) {
	for _, w := range []struct{ key, v string }{{"ssh.user", s.User}, {"ssh.key", s.Key}, {"ssh.program", s.Program}} {
		if msg := checkSSHWord(w.v); msg != "" {
			return w.key, msg
		}
	}
	if s.Port < 0 || s.Port > 65535 {
		return "ssh.port", fmt.Sprintf("must be a port number, 1 to 65535, got %d", s.Port)
	}
	for i, o := range s.Options {
		if msg := checkSSHOption(o); msg != "" {
			return "ssh.options", fmt.Sprintf("option %d: %s", i, msg)
		}
	}
	if s.ConnectTimeout < 0 {
		return "ssh.connect_timeout", fmt.Sprintf("must be positive, got %v", s.ConnectTimeout)
	}
	return "", ""
}

// setChoice sets *dst to v when it is one of choices.
func setChoice(dst *string, v any, choices []string) string {
	s, ok := v.(string)
	if !ok {
		return "want a string, " + oneOf(choices) + ", found " + target.Found(v)
	}
	if !slices.Contains(choices, s) {
		return fmt.Sprintf("must be %s, got %q%s", oneOf(choices), s, closest(s, choices))
	}
	*dst = s
	return ""
}

// setInt sets *dst to v when it is an integer ≥ lo.
func setInt(dst *int, v any, lo int, note string) string {
	n, ok := v.(int64)
	if !ok {
		return "want an integer, found " + target.Found(v)
	}
	if n < int64(lo) || n > math.MaxInt32 {
		return fmt.Sprintf("must be ≥ %d%s, got %d", lo, note, n)
	}
	*dst = int(n)
	return ""
}

// asFloat reads a TOML float or integer.
func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// didYouMean returns `; did you mean "comm.bucket_mb"?` when a known key is
// close to name, else "".
func didYouMean(name string) string {
	// The same key in the wrong table ([cluster] bucket_mb).
	leaf := name[strings.LastIndexByte(name, '.')+1:]
	// Never name itself: a known key reported as unknown is a bug, and
	// "did you mean" the same key would only hide it.
	known := slices.DeleteFunc(knownKeys(), func(k string) bool { return k == name })
	for _, k := range known {
		if k != name && strings.Contains(k, ".") && k[strings.LastIndexByte(k, '.')+1:] == leaf {
			return fmt.Sprintf("; did you mean %q?", k)
		}
	}
	return closest(name, known)
}

// closest returns `; did you mean "x"?` for the choice nearest s by edit
// distance, when it is near enough (a third of its length, at most 3
// edits, ignoring case), else "".
func closest(s string, choices []string) string {
	best, bestD := "", math.MaxInt
	for _, c := range choices {
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" || bestD > min(3, max(1, len(best)/3)) {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// editDistance is the optimal-string-alignment distance between a and b,
// in bytes: insertions, deletions, substitutions and transpositions of
// neighbours ("rign" is one edit from "ring").
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// joinKey writes a key as its pieces joined by dots, unquoted.
func joinKey(k toml.Key) string { return strings.Join(k, ".") }

// keyLines maps each key of a TOML document (pieces joined by dots, as
// joinKey writes them) to the lines where it is defined, in order. The
// TOML decoder keeps key positions to itself; this scanner finds them
// again for errors about values that decoded fine. It understands table
// headers, dotted and quoted keys, comments and multi-line strings, but not
// the keys inside inline tables (those get the line of the key holding
// the inline table).
type keyLines map[string][]int

// scanKeyLines scans src for its keys' lines.
func scanKeyLines(src []byte) keyLines {
	kl := keyLines{}
	var table []string
	inMulti := "" // the delimiter of the multi-line string we are in
	for i, line := range strings.Split(string(src), "\n") {
		n := i + 1
		if inMulti != "" {
			if strings.Contains(line, inMulti) {
				inMulti = ""
			}
			continue
		}
		s := strings.TrimSpace(stripComment(line))
		if s == "" {
			continue
		}
		if strings.HasPrefix(s, "[") {
			h := strings.TrimSpace(strings.Trim(s, "[]"))
			table = splitKey(h)
			kl.add(table, n)
			continue
		}
		eq := indexUnquoted(s, '=')
		if eq < 0 {
			continue
		}
		key := append(slices.Clone(table), splitKey(s[:eq])...)
		kl.add(key, n)
		rest := strings.TrimSpace(s[eq+1:])
		for _, d := range []string{`"""`, `'''`} {
			if strings.HasPrefix(rest, d) && !strings.Contains(rest[3:], d) {
				inMulti = d
			}
		}
	}
	return kl
}

// add records that key (and any implicit tables above it) is defined at line n.
func (kl keyLines) add(key []string, n int) {
	for i := 1; i < len(key); i++ {
		if p := strings.Join(key[:i], "."); len(kl[p]) == 0 {
			kl[p] = []int{n}
		}
	}
	if len(key) > 0 {
		k := strings.Join(key, ".")
		kl[k] = append(kl[k], n)
	}
}

// line is the first line of key, or of the nearest table above it that
// has one; 0 when none.
func (kl keyLines) line(key string) int {
	for {
		if ls := kl[key]; len(ls) > 0 {
			return ls[0]
		}
		i := strings.LastIndexByte(key, '.')
		if i < 0 {
			return 0
		}
		key = key[:i]
	}
}

// nodeLine finds the line of a node entry's problem: its key's line within
// the entry-th [[node]] table, else that table's header; the node key's
// line when the entries are not [[node]] tables (an inline array).
func (kl keyLines) nodeLine(e *nodeError) int {
	hdrs := kl["node"]
	k := e.entry
	if k < 1 || k > len(hdrs) {
		return kl.line("node")
	}
	start, end := hdrs[k-1], math.MaxInt
	if k < len(hdrs) {
		end = hdrs[k]
	}
	for _, l := range kl["node."+e.sub] {
		if l > start && l < end {
			return l
		}
	}
	return start
}

// stripComment removes a # comment that is not inside a string.
func stripComment(s string) string {
	if i := indexUnquoted(s, '#'); i >= 0 {
		return s[:i]
	}
	return s
}

// indexUnquoted is the index of the first c outside "…" and '…', or -1.
func indexUnquoted(s string, c byte) int {
	var q byte
	for i := 0; i < len(s); i++ {
		switch {
		case q != 0:
			if s[i] == '\\' && q == '"' {
				i++
			} else if s[i] == q {
				q = 0
			}
		case s[i] == '"' || s[i] == '\'':
			q = s[i]
		case s[i] == c:
			return i
		}
	}
	return -1
}

// splitKey splits a dotted key into its pieces, unquoting quoted ones.
func splitKey(s string) []string {
	var out []string
	for {
		i := indexUnquoted(s, '.')
		piece := s
		if i >= 0 {
			piece = s[:i]
		}
		piece = strings.TrimSpace(piece)
		if len(piece) >= 2 && (piece[0] == '"' || piece[0] == '\'') && piece[len(piece)-1] == piece[0] {
			if piece[0] == '"' {
				if u, err := strconv.Unquote(piece); err == nil {
					piece = u
				} else {
					piece = piece[1 : len(piece)-1]
				}
			} else {
				piece = piece[1 : len(piece)-1]
			}
		}
		out = append(out, piece)
		if i < 0 {
			return out
		}
		s = s[i+1:]
	}
}
