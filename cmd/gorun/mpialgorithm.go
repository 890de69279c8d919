package main

import (
	"gorun/comm"
	"gorun/engine"
	"gorun/engine/scaling"
)

// mpiForced is what the cluster's [comm] algorithm forces on Open MPI's
// collectives (scaling.ForcedTuned): nothing for "auto" or a transport
// other than "mpi", where MPI does not run the gradients' collectives.
func mpiForced(c engine.Cluster) []scaling.TunedForced {
	if c.Transport != "mpi" {
		return nil
	}
	alg, err := comm.ParseAlgorithm(c.Algorithm)
	if err != nil {
		return nil // the cluster file's check has refused it already
	}
	return scaling.ForcedTuned(alg)
}
