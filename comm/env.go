package comm

import (
	"os"
	"strconv"
)

// Transports lists the transports this build has: "inproc" always, and
// "mpi" in a build with MPI (see MPIAvailable). NCCL comes with the cuda
// backend, which lists it.
func Transports() []string {
	if MPIAvailable() {
		return []string{"inproc", "mpi"}
	}
	return []string{"inproc"}
}

// EnvWorld reads this process's place in a multi-process run from the
// environment a launcher sets: OpenMPI's mpirun sets
// OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE and OMPI_COMM_WORLD_LOCAL_RANK;
// torchrun-style launchers set RANK, WORLD_SIZE and LOCAL_RANK (OpenMPI's
// are read first). localRank is the rank among the processes of this host
// (0 when not given). ok is false when neither rank and size are set, or
// they are not numbers with 0 ≤ rank < size.
func EnvWorld() (rank, size, localRank int, ok bool) {
	for _, names := range [][3]string{
		{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
		{"RANK", "WORLD_SIZE", "LOCAL_RANK"},
	} {
		r, okR := envInt(names[0])
		s, okS := envInt(names[1])
		if !okR || !okS {
			continue
		}
		if r < 0 || s < 1 || r >= s {
			return 0, 0, 0, false
		}
		l, okL := envInt(names[2])
		if !okL || l < 0 || l >= s {
			l = 0
		}
		return r, s, l, true
	}
	return 0, 0, 0, false
}

// envInt reads an integer environment variable.
func envInt(name string) (int, bool) {
	v, set := os.LookupEnv(name)
	if !set {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}

// EnvLocalRank reads this process's rank among the processes of its host
// from the launcher's environment, from the same family of variables as
// EnvWorld (OMPI_COMM_WORLD_LOCAL_RANK under mpirun, else LOCAL_RANK);
// set is false when the launcher does not say, or says something that is
// not a number from 0 to below the world size.
func EnvLocalRank() (localRank int, set bool) {
	for _, names := range [][3]string{
		{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
		{"RANK", "WORLD_SIZE", "LOCAL_RANK"},
	} {
		r, okR := envInt(names[0])
		s, okS := envInt(names[1])
		if !okR || !okS {
			continue
		}
		if r < 0 || s < 1 || r >= s {
			return 0, false
		}
		l, okL := envInt(names[2])
		return l, okL && l >= 0 && l < s
	}
	return 0, false
}
