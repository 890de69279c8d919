package datasets

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"gorun/datasets/userfile"
)

// Streaming: data.images whose decoded images do not fit the memory
// budget (ImagesConfig.MemoryLimit) keeps only the list of its files and
// decodes each sample when it is filled. Filling a batch from disk at the
// moment a step asks for it would make every step wait for its images, so
// the training loop, which knows each device's samples of the epoch in
// advance (the epoch's schedule), hands that order to Prefetch: a pool of
// goroutines decodes the samples ahead of the Fill calls into a ring of
// window samples (the memory the prefetch takes), and Fill takes them in
// order, waiting only when decoding has fallen behind. The first samples
// that fit what the prefetch leaves of the budget are kept once decoded
// (the cache), so a set just over its budget is mostly read from memory
// from the second epoch on. The bytes are decoded exactly as the cached
// path decodes them and normalized by the same tables, and transforms
// (Augmented) apply above: a streamed run trains on the same floats as a
// cached one.

// StreamInfo describes a dataset streamed from disk (see Streamed).
type StreamInfo struct {
	// Name is the dataset's, e.g. "images:photos/train".
	Name string
	// Samples is the number of samples, SampleBytes the bytes of one
	// decoded (uint8), Decoded the bytes of all of them.
	Samples     int
	SampleBytes int64
	Decoded     int64
	// Budget is the memory budget Decoded exceeds; BudgetFrom says where
	// it comes from ("the cluster's memory_limit", or "half the memory
	// this machine has available").
	Budget     int64
	BudgetFrom string
	// Prefetch is the samples the prefetch windows were given room for
	// (ImagesConfig.Prefetch); Cached how many of the first samples are
	// kept in memory once decoded: what fits Budget less the prefetch.
	Prefetch int
	Cached   int
}

// String is the set and why it is streamed, e.g. "images:photos/train:
// 50000 images decode to 7.0 GiB (3×224×224 bytes each), more than the
// cluster's memory_limit (4.0 GiB)".
func (s StreamInfo) String() string {
	return fmt.Sprintf("%s: %d images decode to %s (%s each), more than %s (%s)",
		s.Name, s.Samples, userfile.Bytes(s.Decoded), userfile.Bytes(s.SampleBytes), s.BudgetFrom, userfile.Bytes(s.Budget))
}

// Streamed reports whether ds reads its samples from disk as they are
// filled (data.images over its memory budget), seen through its
// transforms, subsets and views, and describes it.
func Streamed(ds Dataset) (StreamInfo, bool) {
	if d, ok := base(ds).(*imageSet); ok && d.stream != nil {
		return d.stream.info, true
	}
	return StreamInfo{}, false
}

// The states of a cached sample.
const (
	cacheEmpty uint32 = iota
	cacheWriting
	cacheReady
)

// imageStream is the part of a streamed data.images set that reads its
// files: the listing, the reader, and the cache of the first samples.
type imageStream struct {
	list     *imageList
	readFile func(string) ([]byte, error)
	size     int             // bytes of a sample
	cache    []byte          // the first len(state) samples, once decoded
	state    []atomic.Uint32 // per cached sample: cacheEmpty, cacheWriting, cacheReady
	info     StreamInfo
	// scratch holds what a Fill that decodes for itself needs (no
	// Prefetcher): a prepper and a sample's bytes.
	scratch sync.Pool
}

type streamScratch struct {
	ip *imagePrepper
	px []byte
}

// newImageStream streams l within budget (from what, for messages), room
// for prefetch samples kept out of it.
func newImageStream(l *imageList, readFile func(string) ([]byte, error), budget int64, what string, prefetch int) *imageStream {
	per := l.channels * l.height * l.width
	n := len(l.files)
	st := &imageStream{list: l, readFile: readFile, size: per}
	room := budget - int64(max(prefetch, 0))*int64(per)
	cached := int(min(max(room, 0)/int64(per), int64(n)))
	st.cache = make([]byte, cached*per)
	st.state = make([]atomic.Uint32, cached)
	st.info = StreamInfo{Name: l.name, Samples: n, SampleBytes: int64(per), Decoded: int64(per) * int64(n),
		Budget: budget, BudgetFrom: what, Prefetch: prefetch, Cached: cached}
	st.scratch.New = func() any { return &streamScratch{ip: l.prepper(), px: make([]byte, per)} }
	return st
}

// decode writes sample k's bytes into out (len size) with ip: from the
// cache when it holds the sample, else read and decoded (and cached when
// it belongs there). On an error out is cleared. It reports whether the
// cache had the sample.
func (st *imageStream) decode(ip *imagePrepper, k int, out []byte) (hit bool, err error) {
	cached := k < len(st.state)
	if cached && st.state[k].Load() == cacheReady {
		copy(out, st.cache[k*st.size:(k+1)*st.size])
		return true, nil
	}
	if err := st.list.prepare(ip, st.readFile, k, out); err != nil {
		clear(out)
		return false, err
	}
	if cached && st.state[k].CompareAndSwap(cacheEmpty, cacheWriting) {
		copy(st.cache[k*st.size:(k+1)*st.size], out)
		st.state[k].Store(cacheReady)
	}
	return false, nil
}

// fill is Fill's sample k without a Prefetcher: decoded here, now. A file
// that cannot be decoded panics, naming it (a Prefetcher reports it as an
// error instead: Prefetcher.Err).
func (st *imageStream) fill(d *imageSet, k int, x []float32) {
	sc := st.scratch.Get().(*streamScratch)
	defer st.scratch.Put(sc)
	if _, err := st.decode(sc.ip, k, sc.px); err != nil {
		panic(fmt.Sprintf("datasets: %s: %v", d.name, err))
	}
	d.fillPixels(x, sc.px)
}

// PrefetchOptions say how far and with how many goroutines a Prefetcher
// decodes ahead.
type PrefetchOptions struct {
	// Window is the most samples decoded ahead of the Fill calls and held
	// in memory (Window × the sample's bytes); at least 1.
	Window int
	// Workers is the number of decoding goroutines; 0 is GOMAXPROCS. It
	// is capped at Window.
	Workers int
}

// PrefetchStats counts what a Prefetcher did.
type PrefetchStats struct {
	// Decoded samples were read from disk and decoded; Cached ones came
	// from the cache of the first samples.
	Decoded, Cached int64
	// Misses are samples a Fill asked for out of the order given: decoded
	// by the Fill itself (its time counts in Waited).
	Misses int64
	// Waited is the time Fill calls spent waiting for samples not yet
	// decoded.
	Waited time.Duration
}

// Prefetcher decodes the samples of a streamed dataset ahead of the Fill
// calls that ask for them (see Prefetch). Its Dataset must be filled from
// one goroutine at a time; Waited, Stats and Err may be called from any.
type Prefetcher struct {
	ds     Dataset
	set    *imageSet
	order  []int // the base set's samples, in the order Fill takes them
	window int
	buf    []byte // window slots of set.size bytes

	mu     sync.Mutex
	ready  sync.Cond // a slot was filled, or the prefetcher closed
	space  sync.Cond // a slot was freed, or the prefetcher closed
	filled []int     // per slot: the position it holds, −1 while not ready
	claim  int       // the next position a worker decodes
	pos    int       // the next position Fill takes
	closed bool
	err    error // the first file that could not be decoded
	wg     sync.WaitGroup

	waited                  atomic.Int64 // nanoseconds
	decoded, cached, misses atomic.Int64
	own                     *streamScratch // a miss's room (the filling goroutine's)
}

// Prefetch starts decoding the samples of ds that its Fill calls will ask
// for, in the order they will ask (order: sample indices of ds, as the
// Fill calls' idx lists laid end to end), and returns the Prefetcher whose
// Dataset gives ds's samples from what was decoded ahead — bit for bit
// what ds's own Fill gives. At most o.Window samples are decoded ahead of
// the Fill calls: the goroutines wait when they are that far ahead. A
// sample asked for out of order is decoded by the Fill that asks. It
// returns nil and no error when ds is not streamed (Streamed): ds's own
// Fill is then all there is. Close stops the goroutines; a Prefetcher
// must be closed.
func Prefetch(ds Dataset, order []int, o PrefetchOptions) (*Prefetcher, error) {
	if _, ok := Streamed(ds); !ok {
		return nil, nil
	}
	n := ds.Len()
	for i, k := range order {
		if uint(k) >= uint(n) {
			return nil, fmt.Errorf("datasets: prefetching %s: sample %d (position %d) out of range [0, %d)", ds.Name(), k, i, n)
		}
	}
	p := &Prefetcher{window: max(o.Window, 1)}
	var err error
	if p.ds, p.order, err = p.rebuild(ds, order); err != nil {
		return nil, err
	}
	p.buf = make([]byte, p.window*p.set.size)
	p.filled = make([]int, p.window)
	for i := range p.filled {
		p.filled[i] = -1
	}
	p.ready.L, p.space.L = &p.mu, &p.mu
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, p.window, len(p.order))
	for range workers {
		p.wg.Add(1)
		go p.work()
	}
	return p, nil
}

// rebuild returns ds with its streamed set replaced by one that fills
// from p, and order as the streamed set's sample indices.
func (p *Prefetcher) rebuild(ds Dataset, order []int) (Dataset, []int, error) {
	switch d := ds.(type) {
	case *Augmented: // sample k is the base's sample k, transformed
		inner, order, err := p.rebuild(d.base, order)
		if err != nil {
			return nil, nil, err
		}
		c := *d
		c.base = inner
		return &c, order, nil
	case *prefix:
		inner, order, err := p.rebuild(d.base, order)
		if err != nil {
			return nil, nil, err
		}
		c := *d
		c.base = inner
		return &c, order, nil
	case *view:
		mapped := make([]int, len(order))
		for i, k := range order {
			mapped[i] = d.idx[k]
		}
		inner, mapped, err := p.rebuild(d.base, mapped)
		if err != nil {
			return nil, nil, err
		}
		c := *d
		c.base = inner
		return &c, mapped, nil
	case *imageSet:
		if d.stream != nil {
			p.set = d
			return &fetchSet{imageSet: d, p: p}, order, nil
		}
	}
	return nil, nil, fmt.Errorf("datasets: prefetching %s: not a streamed set", ds.Name())
}

// Dataset is the dataset to fill from: the one given to Prefetch, its
// samples taken from what the goroutines decoded.
func (p *Prefetcher) Dataset() Dataset { return p.ds }

// Waited is the time Fill calls have spent waiting for samples so far.
func (p *Prefetcher) Waited() time.Duration { return time.Duration(p.waited.Load()) }

// Stats counts what the Prefetcher did so far.
func (p *Prefetcher) Stats() PrefetchStats {
	return PrefetchStats{Decoded: p.decoded.Load(), Cached: p.cached.Load(), Misses: p.misses.Load(), Waited: p.Waited()}
}

// Err is the first error met decoding a sample (the file named), or nil.
// The sample is filled with zero bytes (normalized): a caller checks Err
// after filling and stops.
func (p *Prefetcher) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Close stops the goroutines and waits for them (each finishes the sample
// it is decoding). It may be called more than once; the Dataset must not be
// filled after it.
func (p *Prefetcher) Close() {
	p.mu.Lock()
	p.closed = true
	p.ready.Broadcast()
	p.space.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}

// work is a decoding goroutine: it takes the next position not yet taken,
// when it is within the window, and decodes its sample into its slot.
func (p *Prefetcher) work() {
	defer p.wg.Done()
	st := p.set.stream
	ip := p.set.stream.list.prepper()
	for {
		p.mu.Lock()
		for !p.closed && p.claim < len(p.order) && p.claim >= p.pos+p.window {
			p.space.Wait()
		}
		if p.closed || p.claim >= len(p.order) {
			p.mu.Unlock()
			return
		}
		q := p.claim
		p.claim++
		p.mu.Unlock()
		// Slot q mod window is free: position q − window was taken.
		s := q % p.window
		hit, err := st.decode(ip, p.order[q], p.buf[s*st.size:(s+1)*st.size])
		if hit {
			p.cached.Add(1)
		} else {
			p.decoded.Add(1)
		}
		p.mu.Lock()
		p.filled[s] = q
		if err != nil && p.err == nil {
			p.err = err
		}
		p.ready.Broadcast()
		p.mu.Unlock()
	}
}

// next returns sample k's bytes: the next position's slot when k is the
// sample the order has there (slot ≥ 0), waiting for it to be decoded,
// else k decoded here (slot −1). A slot must be given back (done).
func (p *Prefetcher) next(k int) (px []byte, slot int) {
	p.mu.Lock()
	if q := p.pos; q < len(p.order) && p.order[q] == k {
		s := q % p.window
		if p.filled[s] != q && !p.closed {
			t0 := time.Now()
			for p.filled[s] != q && !p.closed {
				p.ready.Wait()
			}
			p.waited.Add(int64(time.Since(t0)))
		}
		if p.filled[s] == q {
			p.mu.Unlock()
			return p.buf[s*p.set.size : (s+1)*p.set.size], s
		}
	}
	p.mu.Unlock()
	// Out of the order (or closed): decode it here, and count the time.
	t0 := time.Now()
	if p.own == nil {
		p.own = p.set.stream.scratch.New().(*streamScratch)
	}
	p.misses.Add(1)
	if _, err := p.set.stream.decode(p.own.ip, k, p.own.px); err != nil {
		p.mu.Lock()
		if p.err == nil {
			p.err = err
		}
		p.mu.Unlock()
	}
	p.waited.Add(int64(time.Since(t0)))
	return p.own.px, -1
}

// done gives back the slot next returned: the position is taken.
func (p *Prefetcher) done(slot int) {
	if slot < 0 {
		return
	}
	p.mu.Lock()
	p.filled[slot] = -1
	p.pos++
	p.space.Signal()
	p.mu.Unlock()
}

// fetchSet is a streamed imageSet filled from a Prefetcher.
type fetchSet struct {
	*imageSet
	p *Prefetcher
}

func (f *fetchSet) Fill(idx []int, x []float32, y []int32) {
	d := f.imageSet
	s := d.size
	if len(x) < len(idx)*s || len(y) < len(idx) {
		panic(fmt.Sprintf("datasets: %s: Fill: %d samples need len(x) >= %d and len(y) >= %d, got %d and %d",
			d.name, len(idx), len(idx)*s, len(idx), len(x), len(y)))
	}
	for i, k := range idx {
		if uint(k) >= uint(len(d.labels)) {
			panic(fmt.Sprintf("datasets: %s: Fill: index %d out of range [0, %d)", d.name, k, len(d.labels)))
		}
		px, slot := f.p.next(k)
		d.fillPixels(x[i*s:(i+1)*s], px)
		f.p.done(slot)
		y[i] = d.labels[k]
	}
}
