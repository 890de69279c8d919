//go:build cuda

package cuda

/*
#include <stdlib.h>
#include <string.h>

typedef struct { char internal[128]; } gorun_nccl_id;
typedef int (*gorun_ncclGetUniqueId_t)(gorun_nccl_id *);
typedef int (*gorun_ncclCommInitRank_t)(void **, int, gorun_nccl_id, int);
typedef int (*gorun_ncclCommAbort_t)(void *);

static int gorun_nccl_unique_id(void *f, void *out) {
	return ((gorun_ncclGetUniqueId_t)f)((gorun_nccl_id *)out);
}
static int gorun_nccl_init_rank(void *f, void **comm, int nranks, const void *id, int rank) {
	gorun_nccl_id x;
	memcpy(&x, id, sizeof x);
	return ((gorun_ncclCommInitRank_t)f)(comm, nranks, x, rank);
}
static int gorun_nccl_abort(void *f, void *c) { return ((gorun_ncclCommAbort_t)f)(c); }
static int gorun_nccl_group_call(void *f) { return ((int (*)(void))f)(); }
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
	"unsafe"

	"gorun/comm"
	"gorun/engine/backend"
)

// The NCCL world: transport = "nccl" connects every device of every
// process into one NCCL communicator, one rank per GPU (the standard
// layout: one process per GPU, on one machine or many; several GPUs per
// process work too). Set-up, on every process:
//
//  1. each process opens NCCL and tells the others, through the cross
//     communicator (MPI), each of its ranks' host, GPU (ordinal and UUID)
//     and whether NCCL loaded (gpuCard); every process checks the cards
//     (checkWorld): two ranks on one GPU, or a rank without NCCL, fail
//     every process with one message naming them;
//  2. process 0 makes the unique id (ncclGetUniqueId) and every process
//     gets its 128 bytes through the cross communicator (comm.ShareBytes;
//     when process 0 cannot make it, every process says why);
//  3. each process creates its devices' communicators with
//     ncclCommInitRank, inside ncclGroupStart/ncclGroupEnd when it has
//     several.
//
// NCCL's ncclCommInitRank blocks until every rank has joined. gorun bounds
// it with comm.timeout: the calls run on a thread of their own and the
// process waits at most that long; past it the rank fails, naming itself,
// its host and GPU and the timeout, and the run ends (MPI_Abort ends every
// process of the job, the one that never joined included). A blocking
// init returns no communicator to abort until it ends, so the thread is
// left behind; if the init finishes after all, the communicators are
// aborted (ncclCommAbort).
//
// A world of one process (no launcher, no MPI) takes the same path: the
// id is made and used in the process.

var _ backend.WorldConnector = Backend{}

// ConnectWorld joins this process's devices with the other processes'
// into one NCCL communicator of w.Size ranks (transport = "nccl").
func (Backend) ConnectWorld(devs []backend.Device, w backend.World) ([]backend.Collectives, error) {
	ds := make([]*Device, len(devs))
	for i, dv := range devs {
		d, ok := dv.(*Device)
		if !ok {
			return nil, fmt.Errorf("cuda: device %s is not a CUDA device", dv.Name())
		}
		ds[i] = d
	}
	if len(ds) == 0 || len(w.Ranks) != len(ds) {
		return nil, fmt.Errorf("cuda: NCCL world: %d devices, %d ranks", len(ds), len(w.Ranks))
	}
	for i, r := range w.Ranks {
		if r != w.Ranks[0]+i {
			return nil, fmt.Errorf("cuda: NCCL world: the ranks of a process's devices must follow each other, got %v", w.Ranks)
		}
	}
	if w.Size != w.Processes*len(ds) || w.Process < 0 || w.Process >= w.Processes {
		return nil, fmt.Errorf("cuda: NCCL world: process %d of %d with %d devices each, but %d ranks", w.Process, w.Processes, len(ds), w.Size)
	}
	if w.Cross != nil && w.Processes > 1 && (w.Cross.Size() != w.Processes || w.Cross.Rank() != w.Process) {
		return nil, fmt.Errorf("cuda: NCCL world: process %d of %d, but the cross communicator says %d of %d", w.Process, w.Processes, w.Cross.Rank(), w.Cross.Size())
	}
	timeout := w.Timeout
	if timeout <= 0 {
		timeout = comm.DefaultTimeout
	}
	lib, libErr := openNCCL(ds[0].set.NCCL)
	if libErr == nil && (lib.initRank == nil || lib.abort == nil) {
		libErr = fmt.Errorf("cuda: %s (NCCL %s) has no ncclCommInitRank or ncclCommAbort: transport \"nccl\" needs NCCL 2.4 or later", lib.path, ncclVersionString(lib.versionCode()))
	}
	mine, err := worldCards(ds, w, lib, libErr)
	if err != nil {
		return nil, err
	}
	cards, err := gatherCards(mine, w)
	if err != nil {
		return nil, err
	}
	if err := checkWorld(cards, w.Devices); err != nil {
		return nil, err
	}
	id, err := worldID(lib, w)
	if err != nil {
		return nil, fmt.Errorf("transport \"nccl\": %s: %w", mine[0].where(), err)
	}
	comms, err := initWorld(lib, ds, mine, id, w.Size, timeout)
	if err != nil {
		return nil, err
	}
	g := &ncclGroup{lib: lib, devs: ds, comms: comms, size: w.Size, first: w.Ranks[0]}
	for _, d := range ds {
		d.closers = append(d.closers, g.close)
	}
	out := make([]backend.Collectives, len(ds))
	for i, d := range ds {
		c := &ncclColl{g: g, rank: i, d: d, args: newArgBlock()}
		d.closers = append(d.closers, c.args.free)
		out[i] = c
	}
	return out, nil
}

// worldCards are this process's ranks' cards; libErr is why NCCL did not
// load (nil when it did).
func worldCards(ds []*Device, w backend.World, lib *ncclLib, libErr error) ([]gpuCard, error) {
	host, _ := os.Hostname()
	visible, err := numGPUs()
	if err != nil {
		return nil, err
	}
	cards := make([]gpuCard, len(ds))
	for i, d := range ds {
		c := gpuCard{Rank: w.Ranks[i], Process: w.Process, HostRank: w.HostRank, Host: host,
			GPU: d.gpu.ordinal, Visible: visible, Name: d.gpu.name}
		if u, err := d.gpu.dev.UUID(); err == nil {
			c.UUID = "GPU-" + u.String()
		}
		if libErr != nil {
			c.NCCL = libErr.Error()
		} else {
			c.NCCLVersion = lib.versionCode()
		}
		cards[i] = c
	}
	return cards, nil
}

// gatherCards gives every process every rank's card, in rank order,
// through the cross communicator (this process's own when there is none).
func gatherCards(mine []gpuCard, w backend.World) ([]gpuCard, error) {
	if w.Cross == nil || w.Processes <= 1 {
		return mine, nil
	}
	var b []byte
	for _, c := range mine {
		e, err := c.encode()
		if err != nil {
			return nil, fmt.Errorf("cuda: NCCL set-up: %w", err)
		}
		b = append(b, e...)
	}
	all, err := comm.GatherBytes(w.Cross, b, comm.Tag{Name: "NCCL set-up: each rank's host and GPU"})
	if err != nil {
		return nil, err
	}
	var cards []gpuCard
	for p, bs := range all {
		for k := 0; k < len(bs); k += gpuCardBytes {
			c, err := decodeGPUCard(bs[k : k+gpuCardBytes])
			if err != nil {
				return nil, fmt.Errorf("cuda: NCCL set-up: process %d's card: %w", p, err)
			}
			cards = append(cards, c)
		}
	}
	slices.SortStableFunc(cards, func(a, b gpuCard) int { return a.Rank - b.Rank })
	return cards, nil
}

// worldID is NCCL's unique id of the run: process 0 makes it and every
// process gets its bytes.
func worldID(lib *ncclLib, w backend.World) ([]byte, error) {
	produce := func() ([]byte, error) {
		id := C.malloc(C.size_t(comm.NCCLUniqueIDBytes))
		defer C.free(id)
		if err := lib.check("ncclGetUniqueId", C.gorun_nccl_unique_id(lib.getUniqueID, id)); err != nil {
			return nil, err
		}
		return C.GoBytes(id, C.int(comm.NCCLUniqueIDBytes)), nil
	}
	if w.Cross == nil || w.Processes <= 1 {
		return produce()
	}
	return comm.ShareBytes(w.Cross, comm.NCCLUniqueIDBytes, 0, produce, comm.Tag{Name: "NCCL unique id"})
}

// initWorld creates this process's communicators (ncclCommInitRank, in a
// group when there are several), waiting at most timeout for the other
// ranks to join.
func initWorld(lib *ncclLib, ds []*Device, cards []gpuCard, id []byte, size int, timeout time.Duration) ([]unsafe.Pointer, error) {
	type result struct {
		comms []unsafe.Pointer
		err   error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		comms, err := initRanks(lib, ds, cards, id, size)
		done <- result{comms, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.comms, r.err
	case <-timer.C:
	}
	go func() { // should the init end after all, release what it made
		if r := <-done; r.err == nil {
			for _, c := range r.comms {
				C.gorun_nccl_abort(lib.abort, c)
			}
		}
	}()
	return nil, fmt.Errorf("transport \"nccl\": %s: ncclCommInitRank did not finish within comm.timeout (%v): some rank of the %d never joined it (lost, stuck, failed before it, or started with another cluster file); set [comm] timeout to wait longer",
		ranksWhere(cards), timeout, size)
}

// initRanks calls ncclCommInitRank for each device on the calling (locked)
// thread, each in its device's context.
func initRanks(lib *ncclLib, ds []*Device, cards []gpuCard, id []byte, size int) ([]unsafe.Pointer, error) {
	prev := currentCtx()
	defer setCurrent(prev)
	cid := C.CBytes(id)
	defer C.free(cid)
	comms := (*unsafe.Pointer)(C.calloc(C.size_t(len(ds)), C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(comms))
	slots := unsafe.Slice(comms, len(ds))
	group := len(ds) > 1
	if group {
		if err := lib.check("ncclGroupStart", C.gorun_nccl_group_call(lib.groupStart)); err != nil {
			return nil, err
		}
	}
	var first error
	for i, d := range ds {
		if err := setCurrent(d.gpu.ctx); err != nil {
			first = err
			break
		}
		if err := lib.check("ncclCommInitRank", C.gorun_nccl_init_rank(lib.initRank, &slots[i], C.int(size), cid, C.int(cards[i].Rank))); err != nil {
			first = fmt.Errorf("%s: %w", cards[i].where(), err)
			break
		}
	}
	if group {
		if err := lib.check("ncclGroupEnd", C.gorun_nccl_group_call(lib.groupEnd)); err != nil && first == nil {
			first = fmt.Errorf("%s: %w", ranksWhere(cards), err)
		}
	}
	out := append([]unsafe.Pointer(nil), slots...)
	if first != nil {
		for _, c := range out {
			if c != nil {
				C.gorun_nccl_abort(lib.abort, c)
			}
		}
		return nil, fmt.Errorf("transport \"nccl\": %w", first)
	}
	if slices.Contains(out, nil) {
		return nil, errors.New("transport \"nccl\": ncclCommInitRank returned no communicator")
	}
	return out, nil
}

// ranksWhere names this process's ranks, hosts and GPUs.
func ranksWhere(cards []gpuCard) string {
	var w []string
	for _, c := range cards {
		w = append(w, c.where())
	}
	return strings.Join(w, ", ")
}
