//go:build mpi

package comm

/*
#cgo pkg-config: ompi-c
#include <mpi.h>

// gorun_pingpong exchanges n bytes with peer reps times: the lead sends
// then receives, the other receives then sends.
static int gorun_pingpong(int peer, int lead, void *buf, int n, int reps) {
	for (int i = 0; i < reps; i++) {
		int rc;
		if (lead) {
			rc = MPI_Send(buf, n, MPI_BYTE, peer, 7701, MPI_COMM_WORLD);
			if (rc != MPI_SUCCESS) return rc;
			rc = MPI_Recv(buf, n, MPI_BYTE, peer, 7701, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else {
			rc = MPI_Recv(buf, n, MPI_BYTE, peer, 7701, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			if (rc != MPI_SUCCESS) return rc;
			rc = MPI_Send(buf, n, MPI_BYTE, peer, 7701, MPI_COMM_WORLD);
		}
		if (rc != MPI_SUCCESS) return rc;
	}
	return MPI_SUCCESS;
}

// gorun_exchange swaps n bytes with peer reps times, both ways at once
// (MPI_Sendrecv), as a ring's step loads a link.
static int gorun_exchange(int peer, void *send, void *recv, int n, int reps) {
	for (int i = 0; i < reps; i++) {
		int rc = MPI_Sendrecv(send, n, MPI_BYTE, peer, 7702, recv, n, MPI_BYTE, peer, 7702, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS) return rc;
	}
	return MPI_SUCCESS;
}
// gorun_oneway sends n bytes one way, reps times: the lead sends and
// waits for an 8-byte acknowledgement, the other receives and sends it.
static int gorun_oneway(int peer, int lead, void *buf, int n, int reps) {
	char ack[8] = {0};
	for (int i = 0; i < reps; i++) {
		int rc;
		if (lead) {
			rc = MPI_Send(buf, n, MPI_BYTE, peer, 7703, MPI_COMM_WORLD);
			if (rc != MPI_SUCCESS) return rc;
			rc = MPI_Recv(ack, 8, MPI_BYTE, peer, 7703, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else {
			rc = MPI_Recv(buf, n, MPI_BYTE, peer, 7703, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			if (rc != MPI_SUCCESS) return rc;
			rc = MPI_Send(ack, 8, MPI_BYTE, peer, 7703, MPI_COMM_WORLD);
		}
		if (rc != MPI_SUCCESS) return rc;
	}
	return MPI_SUCCESS;
}
*/
import "C"

import (
	"fmt"
	"time"
	"unsafe"
)

// PingPong measures the link to peer (`gorun launch --probe-links`): buf
// goes to peer and comes back reps times (this rank sends first when lead;
// the peer calls PingPong with lead false and the same length and reps),
// and PingPong returns the mean round trip. No collective may run on
// this rank meanwhile; the collective watchdog does not watch it.
func (c *MPIComm) PingPong(peer int, buf []byte, reps int, lead bool) (time.Duration, error) {
	if peer < 0 || peer >= c.size || peer == c.rank {
		return 0, fmt.Errorf("comm: ping-pong from rank %d to rank %d of %d", c.rank, peer, c.size)
	}
	if len(buf) == 0 || reps < 1 {
		return 0, fmt.Errorf("comm: ping-pong of %d bytes %d times", len(buf), reps)
	}
	l := C.int(0)
	if lead {
		l = 1
	}
	start := time.Now()
	if rc := C.gorun_pingpong(C.int(peer), l, unsafe.Pointer(&buf[0]), C.int(len(buf)), C.int(reps)); rc != C.MPI_SUCCESS {
		return 0, fmt.Errorf("comm: ping-pong between rank %d and rank %d: %s", c.rank, peer, mpiErrorString(rc))
	}
	return time.Since(start) / time.Duration(reps), nil
}

// Exchange measures the link to peer loaded both ways at once, as the
// steps of a ring load it: send goes to peer while peer's arrives in recv
// (MPI_Sendrecv), reps times (the peer calls Exchange with the same
// length and reps); it returns the mean time of one exchange. No
// collective may run on this rank meanwhile.
func (c *MPIComm) Exchange(peer int, send, recv []byte, reps int) (time.Duration, error) {
	if peer < 0 || peer >= c.size || peer == c.rank {
		return 0, fmt.Errorf("comm: exchange from rank %d with rank %d of %d", c.rank, peer, c.size)
	}
	if len(send) == 0 || len(recv) != len(send) || reps < 1 {
		return 0, fmt.Errorf("comm: exchange of %d bytes for %d, %d times", len(send), len(recv), reps)
	}
	start := time.Now()
	if rc := C.gorun_exchange(C.int(peer), unsafe.Pointer(&send[0]), unsafe.Pointer(&recv[0]), C.int(len(send)), C.int(reps)); rc != C.MPI_SUCCESS {
		return 0, fmt.Errorf("comm: exchange between rank %d and rank %d: %s", c.rank, peer, mpiErrorString(rc))
	}
	return time.Since(start) / time.Duration(reps), nil
}

// OneWay measures the link to peer loaded one way: buf goes from the lead
// to peer, which answers with 8 bytes, reps times (the peer calls OneWay
// with lead false and the same length and reps); it returns the mean time
// of one message and its acknowledgement. No collective may run on this
// rank meanwhile.
func (c *MPIComm) OneWay(peer int, buf []byte, reps int, lead bool) (time.Duration, error) {
	if peer < 0 || peer >= c.size || peer == c.rank {
		return 0, fmt.Errorf("comm: one-way probe from rank %d to rank %d of %d", c.rank, peer, c.size)
	}
	if len(buf) == 0 || reps < 1 {
		return 0, fmt.Errorf("comm: one-way probe of %d bytes %d times", len(buf), reps)
	}
	l := C.int(0)
	if lead {
		l = 1
	}
	start := time.Now()
	if rc := C.gorun_oneway(C.int(peer), l, unsafe.Pointer(&buf[0]), C.int(len(buf)), C.int(reps)); rc != C.MPI_SUCCESS {
		return 0, fmt.Errorf("comm: one-way probe between rank %d and rank %d: %s", c.rank, peer, mpiErrorString(rc))
	}
	return time.Since(start) / time.Duration(reps), nil
}
