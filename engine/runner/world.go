package runner

import "gorun/engine/backend"

// worldConnector returns the backend as a WorldConnector when the
// cluster's transport is one the backend brings (cuda's nccl), or nil:
// then the devices of every process form one group of the backend's own,
// set up even for a run of one device.
func (rs *runState) worldConnector() backend.WorldConnector {
	wc, ok := rs.backend.(backend.WorldConnector)
	if !ok {
		return nil
	}
	for _, t := range rs.backend.Target().Transports {
		if t.Name == rs.plan.Cluster.Transport {
			return wc
		}
	}
	return nil
}

// world is this process's place in the run for a WorldConnector.
func (rs *runState) world() backend.World {
	p := rs.plan
	w := backend.World{Transport: p.Cluster.Transport, Cross: rs.opts.Cross, Process: p.Process,
		Processes: p.Cluster.ProcessCount(), HostRank: rs.opts.HostRank, Size: p.World,
		Devices: len(p.Devices), Timeout: p.Cluster.Timeout}
	for _, prog := range p.Devices {
		w.Ranks = append(w.Ranks, prog.Rank)
	}
	return w
}

// connectOne connects the one device of a run of one through the
// backend's own transport (wc; nothing when nil): the plan has no
// collectives then but the initial broadcast of the parameters, which
// goes through it, so a run of one still sets the transport up and uses
// it. The device has no host communicator: there is no one to reduce with.
func (rs *runState) connectOne(wc backend.WorldConnector) error {
	if wc == nil {
		return nil
	}
	d := rs.workers[0]
	colls, err := wc.ConnectWorld([]backend.Device{d.dev}, rs.world())
	if err != nil {
		return err
	}
	d.coll = colls[0]
	return nil
}
