package board

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

var screenshotPath = flag.String("board.screenshot", "", "TestBoardInBrowser also writes its screenshot (PNG) to this `file`")

// chromium finds Debian's headless Chromium, or skips the test (fails it
// under CI, which installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "SKIP: chromium not found (apt-get install chromium)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + ", and CI should have installed it (.ci/run)")
	}
	fmt.Println(msg)
	t.Skip(msg)
	return ""
}

// trainingLines are the metrics.jsonl lines of steps from..to of a run
// that looks like one: a falling, noisy loss, a cosine learning rate, a
// throughput and a collective time that wander, and an epoch and an eval
// line every 25 steps. k tells runs apart.
func trainingLines(from, to int, k float64) string {
	var b strings.Builder
	for s := from; s <= to; s++ {
		x := float64(s)
		loss := 2.3*math.Exp(-x/(35*k)) + 0.15 + 0.08*math.Sin(x*1.7+k)
		lr := 0.05 * k * (1 + math.Cos(math.Pi*x/200)) / 2
		sps := 14000/k + 900*math.Sin(x/7+k)
		comm := 0.0021*k + 0.0004*math.Sin(x/3)
		fmt.Fprintf(&b, `{"kind":"step","step":%d,"epoch":%d,"loss":%.6f,"lr":%.6g,"samples_per_s":%.1f,"comm_seconds":%.6f,"time":%.3f}`+"\n",
			s, (s-1)/25+1, loss, lr, sps, comm, x*0.02)
		if s%25 == 0 {
			e := s / 25
			fmt.Fprintf(&b, `{"kind":"epoch","epoch":%d,"step":%d,"train_loss":%.6f,"samples":3000,"seconds":0.6,"train_seconds":0.5,"skipped_steps":0}`+"\n", e, s, loss+0.05)
			fmt.Fprintf(&b, `{"kind":"eval","epoch":%d,"step":%d,"accuracy":%.4f,"loss":%.6f,"samples":900}`+"\n", e, s, 0.97-0.6*math.Exp(-x/(40*k)), loss+0.1)
		}
	}
	return b.String()
}

// pageLog gathers what the page reports: console errors, uncaught
// exceptions, error log entries (a failed load, a refused script), and
// every URL it requested.
type pageLog struct {
	mu       sync.Mutex
	errors   []string
	requests []string
}

func (l *pageLog) listen(ev any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			l.errors = append(l.errors, "console.error: "+strings.Join(args, " "))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		l.errors = append(l.errors, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, msg))
	case *log.EventEntryAdded:
		if ev.Entry.Level == log.EntryLevelError {
			l.errors = append(l.errors, fmt.Sprintf("log (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
		}
	case *network.EventRequestWillBeSent:
		l.requests = append(l.requests, ev.Request.URL)
	}
}

func (l *pageLog) snapshot() (errs, reqs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errors...), append([]string(nil), l.requests...)
}

// TestBoardInBrowser loads the board in headless Chromium over a real
// server: the page shows a run's points, gains those appended to its
// metrics.jsonl while it is open and the run of a folder made after it
// loaded, opens a run's settings, and reports no console error; it
// requests nothing from elsewhere. Its screenshot is kept in the test's
// artifact folder (go test -artifacts) and, with -board.screenshot=FILE,
// written there.
func TestBoardInBrowser(t *testing.T) {
	exe := chromium(t)
	start := time.Now()
	root := t.TempDir()
	first, later := filepath.Join(root, "resnet-lr0.05"), filepath.Join(root, "resnet-lr0.1")
	makeRun(t, first, 0)
	if err := os.WriteFile(filepath.Join(first, "metrics.jsonl"), []byte(trainingLines(1, 150, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	runs, _, err := Resolve([]string{first, later})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stopServer := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(sctx, ln, New(runs, Options{Poll: 100 * time.Millisecond})) }()
	defer func() {
		stopServer()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	base := "http://" + ln.Addr().String() + "/"

	// The browser: killed when the test ends, whatever happens (the
	// deferred cancels), and checked to be gone.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", "new"),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1000),
	)...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	var pl pageLog
	if err := chromedp.Listen(bctx, pl.listen); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	proc := chromedp.FromContext(bctx).Browser.Process()
	defer func() {
		cancelBrowser()
		cancelAlloc()
		if proc == nil {
			return
		}
		for i := 0; i < 100; i++ {
			if syscall.Kill(proc.Pid, 0) != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		proc.Kill()
		t.Errorf("chromium (pid %d) still ran 5 s after the test closed it", proc.Pid)
	}()
	t.Logf("chromium started in %v", time.Since(start).Round(time.Millisecond))

	run := func(what string, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, a); err != nil {
			errs, _ := pl.snapshot()
			t.Fatalf("%s: %v\npage errors: %q", what, err, errs)
		}
	}
	waitJS := func(what, expr string) {
		t.Helper()
		run(what, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))(ctx, tg)
			return err
		}))
	}
	// drawn is what a chart's path of a run and series says: the points it
	// holds (data-n) and the vertices of its path.
	drawn := func(chart string, runIndex int, series string) (n, vertices int) {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[[]int](fmt.Sprintf(`(() => {
			const p = document.querySelector('#chart-%s path[data-run="%d"][data-series="%s"]');
			if (!p) return [-1, -1];
			return [Number(p.getAttribute('data-n')), (p.getAttribute('d').match(/[ML]/g) || []).length];
		})()`, chart, runIndex, series)))
		if err != nil {
			t.Fatalf("reading the %s chart: %v", chart, err)
		}
		return v[0], v[1]
	}
	pathOf := func(chart string, runIndex int, series string) string {
		return fmt.Sprintf(`document.querySelector('#chart-%s path[data-run="%d"][data-series="%s"]')`, chart, runIndex, series)
	}

	run("loading the page", chromedp.Navigate(base))
	waitJS("the first run's 150 steps drawn", pathOf("loss", 0, "train")+`?.getAttribute('data-n') === '150'`)
	if n, v := drawn("loss", 0, "train"); n != 150 || v != 150 {
		t.Errorf("loss chart: the path holds %d points with %d vertices, want 150", n, v)
	}
	for _, c := range []struct {
		chart, series string
		n             int
	}{{"loss", "test", 6}, {"accuracy", "test", 6}, {"lr", "lr", 150}, {"samples", "samples", 150}, {"comm", "comm", 150}} {
		if n, _ := drawn(c.chart, 0, c.series); n != c.n {
			t.Errorf("%s chart, series %s: %d points, want %d", c.chart, c.series, n, c.n)
		}
	}

	// The chart helpers on edge cases: a constant series, a span too small
	// for its magnitude, gaps in a smoothed series.
	helpers, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]any](`(() => {
		const L = gorunBoard.lib, labels = (t) => t.map((x) => x.label).join(' ');
		return {
			constant: labels(L.ticks(0.01, 0.01, 5)),
			zero: labels(L.ticks(0, 0, 5)),
			tiny: L.ticks(1e9, 1e9 + 1e-7, 5).length,
			loss: labels(L.ticks(0.12, 2.31, 5)),
			smooth: L.smooth([1, NaN, 3], 0.5).map((v) => isFinite(v) ? v.toFixed(4) : 'gap').join(' '),
			fmt: [L.fmt(14023.7), L.fmt(2.5e6), L.fmt(0.00012), L.fmt(NaN), L.fmt(0.12345)].join(' '),
		};
	})()`))
	if err != nil {
		t.Fatalf("the chart helpers: %v", err)
	}
	for k, want := range map[string]any{
		"constant": "0.0090 0.0095 0.0100 0.0105 0.0110", "zero": "-1.0 -0.5 0.0 0.5 1.0", "tiny": 5.0,
		"loss": "0.0 0.5 1.0 1.5 2.0 2.5", "smooth": "1.0000 gap 2.3333", "fmt": "14k 2.5M 1.20e-4 – 0.1235",
	} {
		if helpers[k] != want {
			t.Errorf("chart helper %s: %v, want %v", k, helpers[k], want)
		}
	}

	// The run trains on: 50 more steps, the first line written in two
	// pieces.
	more := trainingLines(151, 200, 1)
	appendTo(t, filepath.Join(first, "metrics.jsonl"), more[:30])
	time.Sleep(300 * time.Millisecond) // a few polls with a partial line
	if n, _ := drawn("loss", 0, "train"); n != 150 {
		t.Errorf("after half a line: %d points, want 150", n)
	}
	appendTo(t, filepath.Join(first, "metrics.jsonl"), more[30:])
	waitJS("the appended steps drawn", pathOf("loss", 0, "train")+`?.getAttribute('data-n') === '200'`)
	if n, v := drawn("loss", 0, "train"); n != 200 || v != 200 {
		t.Errorf("after appending: the path holds %d points with %d vertices, want 200", n, v)
	}
	if n, _ := drawn("accuracy", 0, "test"); n != 8 {
		t.Errorf("after appending: %d evals drawn, want 8", n)
	}

	// A run whose folder appears after the page loaded.
	makeRun(t, later, 0)
	if err := os.WriteFile(filepath.Join(later, "metrics.jsonl"), []byte(trainingLines(1, 120, 1.6)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitJS("the later run drawn", pathOf("loss", 1, "train")+`?.getAttribute('data-n') === '120'`)
	waitJS("the later run's badge", `document.querySelector('#run-1 .badge').textContent === 'live'`)

	// Hovering a chart shows the values under the pointer.
	waitJS("the tooltip", `(() => {
		const s = document.querySelector('#chart-loss svg'), r = s.getBoundingClientRect();
		s.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + r.width * 0.6, clientY: r.top + 60, bubbles: true}));
		const tip = document.getElementById('tooltip');
		return !tip.hidden && tip.textContent.includes('resnet-lr0.1');
	})()`)

	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil || img.Bounds().Dx() < 1000 {
		t.Fatalf("the screenshot is no PNG of the page: %v", err)
	}
	for _, p := range []string{filepath.Join(t.ArtifactDir(), "board.png"), *screenshotPath} {
		if p == "" {
			continue
		}
		if err := os.WriteFile(p, shot, 0o644); err != nil {
			t.Errorf("writing the screenshot: %v", err)
		} else {
			t.Logf("screenshot: %s", p)
		}
	}

	// A run hidden, then the settings of the first.
	waitJS("the tooltip gone", `(() => {
		document.querySelector('#chart-loss svg').dispatchEvent(new MouseEvent('mouseleave'));
		return document.getElementById('tooltip').hidden;
	})()`)
	run("hiding the later run", chromedp.Click(chromedp.CSS(`#run-1 input[type=checkbox]`)))
	waitJS("the later run hidden", pathOf("loss", 1, "train")+` === null`)
	run("opening the settings", chromedp.Click(chromedp.CSS(`#run-0 button.info`)))
	waitJS("run.json shown", `document.getElementById('run-json')?.textContent.includes('epochs=2')`)
	waitJS("the script shown", `document.getElementById('script-text')?.textContent.includes('train(epochs = 2)')`)
	if shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)); err != nil {
		t.Errorf("screenshot of the settings: %v", err)
	} else if err := os.WriteFile(filepath.Join(t.ArtifactDir(), "board-settings.png"), shot, 0o644); err != nil {
		t.Error(err)
	}
	waitJS("the plan command shown", `document.getElementById('plan-cmd')?.textContent === 'gorun plan ' + gorunBoard.runs[0].dir + "/script/train.star --set 'epochs=2'"`)

	errs, reqs := pl.snapshot()
	for _, e := range errs {
		t.Errorf("the page reported: %s", e)
	}
	if len(reqs) < 4 {
		t.Errorf("the page made %d requests: %q", len(reqs), reqs)
	}
	for _, u := range reqs {
		if !strings.HasPrefix(u, base) && !strings.HasPrefix(u, "data:") {
			t.Errorf("the page requested %s, outside the board", u)
		}
	}
	t.Logf("browser test: %v in all", time.Since(start).Round(time.Millisecond))
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("the test ran out of time")
	}
}
