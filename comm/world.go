package comm

import "fmt"

// World is this process's part of a run's group: one Communicator per
// local device. With one process it is an in-process group; with several
// (cross, an MPI communicator, non-nil) each local rank is a Hier: local
// rank 0 also joins the cross-process collectives.
type World struct {
	local *Group
	ranks []Communicator
}

// Open makes this process's part of the group for n local devices: the
// transport factory the engine goes through. cross connects process proc
// to the others (nil for a single process); global ranks are then
// proc·n … proc·n+n-1.
func Open(n int, opts Options, cross Communicator, proc int) (*World, error) {
	g, err := NewInProc(n, opts)
	if err != nil {
		return nil, err
	}
	w := &World{local: g}
	for r := 0; r < n; r++ {
		var c Communicator = g.Rank(r)
		if cross != nil {
			var x Communicator
			if r == 0 {
				x = cross
			}
			h, err := NewHier(g.Rank(r), x, proc, cross.Size())
			if err != nil {
				return nil, fmt.Errorf("comm: process %d: %w", proc, err)
			}
			c = h
		}
		w.ranks = append(w.ranks, c)
	}
	return w, nil
}

// Ranks are the local devices' communicators, in local rank order.
func (w *World) Ranks() []Communicator { return w.ranks }

// Abort fails every collective of the local ranks under way or to come
// with err, so that no local rank waits for one that failed. Across
// processes the transport's own abort (MPI_Abort) does the same.
func (w *World) Abort(err error) { w.local.Abort(err) }
