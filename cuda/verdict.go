//go:build cuda

package cuda

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"gorun/engine"
	"gorun/engine/backend"
	"gorun/ops"
)

// The step's verdict on the device (backend.Deferrer). Three floats of
// d.small from verdictOff hold the split sum of the synced gradients, the
// loss and the halt flag; gorun_step_verdict sets the flag from the first
// two, and the update phase's kernels (op_optim.go) read it through their
// halt argument, the flag's fixed address, which a captured update graph
// keeps. The three floats then travel to page-locked host memory (marked)
// with an asynchronous copy, and evMark records their arrival, which
// Marked waits for: the runner queues the update behind MarkStep without
// waiting for the device.

// verdictOff is the verdict's place in d.small (bytes): after Finite's and
// ReadStep's scalars.
const verdictOff = 16

// deferredOps are the update-phase ops whose kernels honour the halt flag
// (their every write is behind it, or into the device's own scratch).
var deferredOps = map[ops.Op]bool{
	ops.SGDStep: true, ops.AdamStep: true, ops.AdamWStep: true, ops.ClipGradNorm: true, ops.ClipGradScale: true,
}

// haltArg is the halt flag's address, the update kernels' last argument.
func (d *Device) haltArg() arg { return ptrArg(uintptr(d.small) + verdictOff + 8) }

// Defers reports whether MarkStep can guard prog's update phase: every
// kernel step of it is one whose kernels honour the halt flag. A group's
// verdict is not agreed on CUDA devices (coll not nil: false).
func (d *Device) Defers(prog *engine.Program, coll backend.Collectives) bool {
	if coll != nil {
		return false
	}
	for _, st := range prog.Steps {
		if st.Phase == engine.PhaseUpdate && (st.Kind != engine.KernelStep || !deferredOps[st.Op]) {
			return false
		}
	}
	return true
}

// MarkStep queues the step's verdict (the split sum of grads, Finite's, and
// a copy of loss's first element beside it; gorun_step_verdict sets the
// halt flag from them), the copy of the three floats to page-locked host
// memory and the event Marked waits for. Nothing waits for the device.
func (d *Device) MarkStep(loss, grads *engine.Buffer, sticky bool, coll backend.Collectives, step int) error {
	if coll != nil {
		return fmt.Errorf("%s: a step's verdict is not agreed over a group of CUDA devices", d.Name())
	}
	if err := d.loaded(); err != nil {
		return err
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	if err := d.joinComm(); err != nil {
		return err
	}
	if d.marked == nil {
		p, err := pinnedAlloc(16)
		if err != nil {
			return fmt.Errorf("%s: %w", d.Name(), err)
		}
		d.marked = p
		if d.evMark, err = cu.MakeEvent(cu.DisableTiming); err != nil {
			return fmt.Errorf("%s: cuEventCreate: %w", d.Name(), err)
		}
		d.markOK = true
	}
	v := d.small + verdictOff
	if grads.DType == engine.Float32 {
		if err := d.splitSum(d.ptr(grads), uintptr(v), 1, 1, d.live(grads), false); err != nil {
			return err
		}
	} else if err := memset32(v, 0, 1, d.stream); err != nil {
		return err
	}
	if err := memcpyDtoD(v+4, cu.DevicePtr(d.ptr(loss)), 4, d.stream); err != nil {
		return err
	}
	if err := d.launch(kStepVerdict, oneBlock(), ptrArg(uintptr(v)), boolArg(sticky)); err != nil {
		return err
	}
	if err := memcpyDtoH(d.marked, v, 12, d.stream); err != nil {
		return err
	}
	if err := record(d.evMark, d.stream); err != nil {
		return fmt.Errorf("%s: %w", d.Name(), err)
	}
	d.markPending = true
	return nil
}

// Marked waits for the copy the last MarkStep queued and returns the loss,
// whether the gradients were finite and the halt flag.
func (d *Device) Marked() (float32, bool, bool, error) {
	if !d.markPending {
		return 0, false, false, fmt.Errorf("%s: no step marked", d.Name())
	}
	if err := d.enter(); err != nil {
		return 0, false, false, err
	}
	defer d.exit()
	if err := syncEvent(d.evMark); err != nil {
		return 0, false, false, fmt.Errorf("%s: %w", d.Name(), err)
	}
	h := unsafe.Slice((*float32)(d.marked), 3)
	s := h[0]
	return h[1], s-s == 0, h[2] != 0, nil
}

// AppendRNGState appends RNGState's bytes to b.
func (d *Device) AppendRNGState(b []byte) ([]byte, error) {
	b = append(b, rngMagic...)
	b = binary.LittleEndian.AppendUint64(b, d.seed)
	return binary.LittleEndian.AppendUint64(b, d.offset), nil
}

// freeMarked frees the page-locked verdict and its event (Close).
func (d *Device) freeMarked() error {
	var err error
	if d.marked != nil {
		err = pinnedFree(d.marked)
		d.marked = nil
	}
	if d.markOK {
		cu.DestroyEvent(&d.evMark)
		d.markOK = false
	}
	d.markPending = false
	return err
}
