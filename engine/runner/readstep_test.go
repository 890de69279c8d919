package runner

import (
	"math"
	"testing"

	"gorun/engine"
	"gorun/engine/backend"
)

// stepReader is a CPU device that is a backend.StepReader: ReadStep
// answers from the device, and every read is counted.
type stepReader struct {
	backend.Device
	reads, downloads int
}

func (s *stepReader) ReadStep(loss, grads *engine.Buffer) (float32, bool, error) {
	s.reads++
	v := make([]float32, grads.Elems())
	if err := s.Device.DownloadF32(grads, 0, v); err != nil {
		return 0, false, err
	}
	l := make([]float32, 1)
	if err := s.Device.DownloadF32(loss, 0, l); err != nil {
		return 0, false, err
	}
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return l[0], false, nil
		}
	}
	return l[0], true, nil
}

func (s *stepReader) DownloadF32(b *engine.Buffer, off int, dst []float32) error {
	s.downloads++
	return s.Device.DownloadF32(b, off, dst)
}

// TestReadStep: the step's loss and whether its gradients are finite come
// from one ReadStep on a device that has it (no other download), and from
// the loss download and the finiteness check on one that does not; both
// give the same answers, a non-finite gradient included.
func TestReadStep(t *testing.T) {
	p := compile(t, loadSpec(t, tinyScript), 1)
	d, _ := testDevice(t, p, 0, 1)
	prog := d.prog
	if err := d.dev.UploadF32(prog.Loss, 0, []float32{0.75}); err != nil {
		t.Fatal(err)
	}
	plain := d.dev
	sr := &stepReader{Device: plain}
	for _, bad := range []bool{false, true} {
		if bad {
			if err := plain.UploadF32(prog.SyncedGrads, prog.SyncedGrads.Elems()-1, []float32{float32(math.Inf(1))}); err != nil {
				t.Fatal(err)
			}
		}
		for _, dev := range []backend.Device{plain, sr} {
			d.dev = dev
			before := sr.reads
			loss, finite, err := d.readStep()
			if err != nil {
				t.Fatal(err)
			}
			if loss != 0.75 || finite == bad {
				t.Errorf("readStep (StepReader %t, an infinite gradient %t) = %v, %v; want 0.75, %v", dev == sr, bad, loss, finite, !bad)
			}
			if dev == sr && (sr.reads != before+1 || sr.downloads != 0) {
				t.Errorf("a StepReader was read %d times and downloaded from %d times, want one ReadStep alone", sr.reads-before, sr.downloads)
			}
		}
	}
}
