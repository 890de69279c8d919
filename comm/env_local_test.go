package comm

import "testing"

// TestEnvLocalRank: the local rank is read from the family of variables
// EnvWorld takes the rank from, and is unset when the launcher does not
// give it (so that gorun works it out from the host names).
func TestEnvLocalRank(t *testing.T) {
	cases := []struct {
		name  string
		env   map[string]string
		local int
		set   bool
	}{
		{"none", nil, 0, false},
		{"openmpi", map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, 1, true},
		{"torchrun", map[string]string{"RANK": "1", "WORLD_SIZE": "3", "LOCAL_RANK": "1"}, 1, true},
		{"no local rank", map[string]string{"RANK": "3", "WORLD_SIZE": "4"}, 0, false},
		{"openmpi's world, torchrun's local rank", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "LOCAL_RANK": "1"}, 0, false},
		{"local rank past size", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "2"}, 2, false},
		{"local rank not a number", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "a"}, 0, false},
		{"local rank without a world", map[string]string{"LOCAL_RANK": "1"}, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearWorldEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			l, set := EnvLocalRank()
			if set != c.set || (set && l != c.local) {
				t.Errorf("EnvLocalRank() = %d, %v, want %d, %v", l, set, c.local, c.set)
			}
		})
	}
}
