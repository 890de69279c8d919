package engine

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestClusterLaunchKeys: cluster.network, cluster.bind and the [ssh] table
// parse, default to ssh's and OpenMPI's own behaviour, and give ssh its
// arguments.
func TestClusterLaunchKeys(t *testing.T) {
	c, err := ParseCluster("c.toml", []byte(`
[cluster]
transport = "mpi"
network   = "10.77.0.0/24,eth1"
bind      = "core"

[ssh]
user    = "trainer"
port    = 2222
key     = "~/.ssh/id_gorun"
options = ["StrictHostKeyChecking=accept-new", "UserKnownHostsFile=/tmp/kh"]
connect_timeout = "3s"
program = "/usr/bin/ssh"

[[node]]
host = "10.77.0.1"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := SSH{User: "trainer", Port: 2222, Key: "~/.ssh/id_gorun", Options: []string{"StrictHostKeyChecking=accept-new", "UserKnownHostsFile=/tmp/kh"},
		ConnectTimeout: 3 * time.Second, Program: "/usr/bin/ssh"}
	if c.Network != "10.77.0.0/24,eth1" || c.BindPolicy() != "core" || !reflect.DeepEqual(c.SSH, want) {
		t.Errorf("cluster %+v", c)
	}
	args := strings.Join(c.SSH.Args(2*time.Second), " ")
	if w := "-l trainer -p 2222 -i ~/.ssh/id_gorun -o IdentitiesOnly=yes -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=/tmp/kh " +
		"-o BatchMode=yes -o ConnectTimeout=3 -o ServerAliveInterval=2 -o ServerAliveCountMax=3"; args != w {
		t.Errorf("ssh args\n%s\nwant\n%s", args, w)
	}
	// Defaults: nothing of ssh's own is overridden but batch mode and
	// the timeouts; processes are not bound.
	d := DefaultCluster()
	if d.BindPolicy() != "none" || d.SSH.ProgramName() != "ssh" || d.SSH.Timeout() != DefaultConnectTimeout || d.Network != "" {
		t.Errorf("defaults: %+v", d)
	}
	if args := strings.Join(d.SSH.Args(0), " "); args != "-o BatchMode=yes -o ConnectTimeout=10" {
		t.Errorf("default ssh args: %s", args)
	}
	// --set takes every key, strings unquoted, one option bare.
	for _, kv := range [][2]string{
		{"cluster.network", "192.168.0.0/16"}, {"cluster.bind", "socket"},
		{"ssh.user", "root"}, {"ssh.port", "22"}, {"ssh.key", "/k"}, {"ssh.options", "StrictHostKeyChecking=no"},
		{"ssh.connect_timeout", "2s"}, {"ssh.program", "ssh"},
	} {
		if !IsClusterKey(kv[0]) {
			t.Errorf("IsClusterKey(%s) is false", kv[0])
		}
		if err := d.Set(kv[0], kv[1]); err != nil {
			t.Errorf("Set(%s, %s): %v", kv[0], kv[1], err)
		}
	}
	if d.Network != "192.168.0.0/16" || d.Bind != "socket" || d.SSH.User != "root" || d.SSH.Port != 22 || d.SSH.Key != "/k" ||
		!reflect.DeepEqual(d.SSH.Options, []string{"StrictHostKeyChecking=no"}) || d.SSH.ConnectTimeout != 2*time.Second {
		t.Errorf("after Set: %+v", d)
	}
	if err := d.Set("ssh.options", `["A=b", "Ciphers=aes128-ctr,aes256-ctr"]`); err != nil || len(d.SSH.Options) != 2 {
		t.Errorf("options array: %v %v", d.SSH.Options, err)
	}
	if err := d.Validate(); err != nil {
		t.Error(err)
	}
}

// TestClusterLaunchKeyErrors: values that OpenMPI or ssh could not carry,
// or that are no network, are refused naming the file, line and key.
func TestClusterLaunchKeyErrors(t *testing.T) {
	for src, want := range map[string]string{
		"[cluster]\nnetwork = \"10.77.0.1\"\n":            `c.toml:2: cluster.network: "10.77.0.1" is an address, not a network: give its CIDR block, such as "10.77.0.1/24"`,
		"[cluster]\nnetwork = \"10.77.0.1/24\"\n":         `c.toml:2: cluster.network: "10.77.0.1/24" has host bits set: the network is "10.77.0.0/24"`,
		"[cluster]\nnetwork = \"10.77.0.0/33\"\n":         `c.toml:2: cluster.network: "10.77.0.0/33" is not a CIDR block`,
		"[cluster]\nnetwork = \"eth0 eth1\"\n":            `c.toml:2: cluster.network: "eth0 eth1" is neither a CIDR block`,
		"[cluster]\nnetwork = \"eth0,\"\n":                `c.toml:2: cluster.network: "eth0," has an empty item`,
		"[cluster]\nnetwork = 10\n":                       `c.toml:2: cluster.network: want a string such as "10.77.0.0/24" or "eth1", found integer 10`,
		"[cluster]\nbind = \"cores\"\n":                   `c.toml:2: cluster.bind: must be "none", "core" or "socket", got "cores"; did you mean "core"?`,
		"[ssh]\nkey = \"/my keys/id\"\n":                  `c.toml:2: ssh.key: "/my keys/id" holds ' ', which OpenMPI cannot pass on to ssh`,
		"[ssh]\nuser = \"-oProxyCommand=x\"\n":            `c.toml:2: ssh.user: "-oProxyCommand=x" begins with a hyphen`,
		"[ssh]\nuser = \"a;touch /tmp/x\"\n":              `c.toml:2: ssh.user: "a;touch /tmp/x" holds ';'`,
		"[ssh]\nport = 0\n":                               `c.toml:2: ssh.port: must be a port number, 1 to 65535, got 0`,
		"[ssh]\nport = \"22\"\n":                          `c.toml:2: ssh.port: want a port number, found string "22"`,
		"[ssh]\noptions = \"A=b\"\n":                      `c.toml:2: ssh.options: want an array of ssh options`,
		"[ssh]\noptions = [\"ProxyCommand=ssh -W %h\"]\n": `c.toml:2: ssh.options: option 0: "ProxyCommand=ssh -W %h" holds ' ', which OpenMPI cannot pass on to ssh (it splits plm_rsh_args at spaces and hands them to each host's shell): put such options in ~/.ssh/config`,
		"[ssh]\noptions = [\"BatchMode\"]\n":              `c.toml:2: ssh.options: option 0: "BatchMode" is not an ssh option: want NAME=VALUE`,
		"[ssh]\noptions = [\"A=$(touch /tmp/x)\"]\n":      `holds '$'`,
		"[ssh]\nconnect_timeout = \"500ms\"\n":            `c.toml:2: ssh.connect_timeout: "500ms" is too short: ssh counts whole seconds`,
		"[ssh]\nconect_timeout = \"5s\"\n":                `c.toml:2: ssh.conect_timeout: unknown key; did you mean "ssh.connect_timeout"?`,
		"[ssh]\nhost = \"a\"\n":                           `c.toml:2: ssh.host: unknown key`,
		"ssh = 3\n":                                       `c.toml:1: ssh: want a table [ssh], found integer 3`,
	} {
		_, err := ParseCluster("c.toml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q:\nerror %v\nwant %q", src, err, want)
		}
	}
	// Validate refuses the same, whoever built the Cluster.
	c := DefaultCluster()
	c.SSH.Options = []string{"X=a b"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ssh.options: option 0: ") {
		t.Errorf("Validate: %v", err)
	}
	c = DefaultCluster()
	c.Network = "10.0.0.0/8;rm"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "cluster.network: ") {
		t.Errorf("Validate: %v", err)
	}
	if err := c.Set("ssh", "x"); err == nil || !strings.Contains(err.Error(), "ssh: is a table: set one of its keys, e.g. ssh.user") {
		t.Errorf("Set(ssh): %v", err)
	}
}
