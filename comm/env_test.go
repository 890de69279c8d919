package comm

import (
	"os"
	"slices"
	"testing"
)

// clearWorldEnv unsets the launchers' variables for the test.
func clearWorldEnv(t *testing.T) {
	for _, v := range []string{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_RANK"} {
		t.Setenv(v, "") // restored after the test
		os.Unsetenv(v)
	}
}

func TestEnvWorld(t *testing.T) {
	type world struct {
		rank, size, local int
		ok                bool
	}
	cases := []struct {
		name string
		env  map[string]string
		want world
	}{
		{"none", nil, world{}},
		{"openmpi", map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, world{2, 4, 0, true}},
		{"torchrun", map[string]string{"RANK": "1", "WORLD_SIZE": "3", "LOCAL_RANK": "1"}, world{1, 3, 1, true}},
		{"openmpi first", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "RANK": "1", "WORLD_SIZE": "3"}, world{0, 2, 0, true}},
		{"no local rank", map[string]string{"RANK": "3", "WORLD_SIZE": "4"}, world{3, 4, 0, true}},
		{"rank only", map[string]string{"RANK": "3"}, world{}},
		{"rank past size", map[string]string{"RANK": "4", "WORLD_SIZE": "4"}, world{}},
		{"not a number", map[string]string{"RANK": "one", "WORLD_SIZE": "4"}, world{}},
		{"negative", map[string]string{"RANK": "-1", "WORLD_SIZE": "4"}, world{}},
		{"bad openmpi, good torchrun", map[string]string{"OMPI_COMM_WORLD_RANK": "x", "OMPI_COMM_WORLD_SIZE": "2", "RANK": "1", "WORLD_SIZE": "2"}, world{1, 2, 0, true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearWorldEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var got world
			got.rank, got.size, got.local, got.ok = EnvWorld()
			if got != c.want {
				t.Errorf("EnvWorld() = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestTransports(t *testing.T) {
	ts := Transports()
	if !slices.Contains(ts, "inproc") || slices.Contains(ts, "mpi") != MPIAvailable() {
		t.Errorf("Transports() = %v, MPIAvailable() = %v", ts, MPIAvailable())
	}
}
