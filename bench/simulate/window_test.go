package simulate

import (
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/llmesh/llmesh/bench/trace"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/bench/workloads"
)

// A fleet far past saturation holds every waiting request in its window
// (a million and more at 5,000 req/s for the workload's 5-minute
// timeout), so the waiting form's size is the fleet's memory.
func TestWaitingRequestIsSmall(t *testing.T) {
	t.Logf("vreq %d B, vrun %d B", unsafe.Sizeof(vreq{}), unsafe.Sizeof(vrun{}))
	if n := unsafe.Sizeof(vreq{}); n > 80 {
		t.Errorf("vreq is %d bytes, want at most 80: keep what only an admitted request needs in vrun", n)
	}
}

// TestWindowDefersRecords checks that a request gets its record (vrun)
// only when admitted or ended, filled from its item as before.
func TestWindowDefersRecords(t *testing.T) {
	var w window
	for i := 0; i < 3*slabSize; i++ {
		v := w.push(testItem(i), i%3)
		if v.vrun != nil {
			t.Fatalf("request %d has a vrun on arrival", i)
		}
	}
	v := w.at(slabSize + 5)
	if v.it.Index != slabSize+5 || v.proxy != int32((slabSize+5)%3) {
		t.Fatalf("at(%d) = index %d proxy %d", slabSize+5, v.it.Index, v.proxy)
	}
	v.running("batch")
	r := v.rec
	it := testItem(slabSize + 5)
	if r.Index != it.Index || r.Class != "batch" || r.PromptTokens != it.PromptTokens || r.MaxTokens != it.MaxTokens ||
		r.IntendedNS != int64(it.At) || r.SentNS != int64(it.At) || r.Warmup != it.Warmup {
		t.Fatalf("record %+v does not match item %+v", *r, it)
	}
	if got := v.item(); !reflect.DeepEqual(got, it) {
		t.Fatalf("item() = %+v, want %+v", got, it)
	}
	first := v.vrun
	v.running("other")
	if v.vrun != first || v.rec.Class != "batch" {
		t.Fatal("running replaced an existing vrun")
	}
	w.dropBefore(2*slabSize + 1)
	if w.base != 2*slabSize || len(w.slabs) != 1 {
		t.Fatalf("after dropBefore: base %d, %d slabs", w.base, len(w.slabs))
	}
	if got := w.at(2*slabSize + 1).it.Index; got != 2*slabSize+1 {
		t.Fatalf("at after drop: index %d", got)
	}
}

func testItem(i int) workload.Item {
	return workload.Item{Index: i, Class: i % 2, At: time.Duration(i) * time.Millisecond,
		PromptTokens: 100 + i, MaxTokens: 10 + i%7, Warmup: i < 5}
}

// TestCompactItemRoundTrips checks that an item with prompt segments and a
// session comes back whole from a request, and one without keeps no extra.
func TestCompactItemRoundTrips(t *testing.T) {
	it := workload.Item{Index: 7, Class: 1, At: 3 * time.Second, PromptTokens: 1500, MaxTokens: 20,
		Segments: trace.MooncakeSegments(nil, []uint64{4, 9, 2}, 1500), Session: 3, Turn: 2}
	v := vreq{it: compact(it)}
	if got := v.item(); !reflect.DeepEqual(got, it) {
		t.Fatalf("item() = %+v, want %+v", got, it)
	}
	if len(v.promptBlocks()) == 0 {
		t.Fatal("an item with segments has no prompt blocks")
	}
	v.dropBlocks()
	if v.promptBlocks() != nil {
		t.Fatal("blocks came back after dropBlocks")
	}
	plain := vreq{it: compact(testItem(3))}
	if plain.it.x != nil || plain.promptBlocks() != nil {
		t.Fatal("an item without segments or session keeps extras")
	}
	plain.dropBlocks()
}

// TestRunFootprint checks the estimate that holds runs far past
// saturation back from running at once: nothing within saturation or on
// one engine, the excess rate over the client's timeout past it, over
// every arrival without a client timeout.
func TestRunFootprint(t *testing.T) {
	std, err := workloads.LoadStandard()
	if err != nil {
		t.Fatal(err)
	}
	fleet := Options{Engines: 64, Proxies: 8, Duration: 10 * time.Minute}
	w := fleet.prepare(std)
	span := (w.Spec.Warmup.Duration.D() + w.Spec.Duration.D()).Seconds()
	to := w.Spec.Timeout.D().Seconds()
	if to <= 0 || to >= span {
		t.Fatalf("the standard workload's timeout %vs is not below its %vs of arrivals", to, span)
	}
	for _, c := range []struct {
		name      string
		o         Options
		rate, sat float64
		want      int64
	}{
		{"within saturation", fleet, 500, 570, 0},
		{"one engine", Options{Engines: 1, Duration: 10 * time.Minute}, 5000, 9, 0},
		{"past saturation", fleet, 5000, 570, int64(4430 * to * bytesPerWaiting)},
		{"past the timeout", Options{Engines: 64, Proxies: 8, Duration: 10 * time.Minute, RunPastTimeout: true}, 5000, 570, int64(4430 * span * bytesPerWaiting)},
	} {
		if got := runFootprint(w, c.o, c.rate, c.sat); got != c.want {
			t.Errorf("%s: runFootprint = %d, want %d", c.name, got, c.want)
		}
	}
	// The goal's command (docs/results/fleet.md) runs its policies one at
	// a time; a minute of the same arrivals, all at once.
	if n := runFootprint(w, fleet, 5000, 570); 2*n <= runBudget {
		t.Errorf("10 minutes at 5,000 req/s: %d bytes, two of them fit the %d budget", n, runBudget)
	}
	short := Options{Engines: 64, Proxies: 8, Duration: time.Minute}
	if n := runFootprint(short.prepare(std), short, 5000, 570); 3*n > runBudget {
		t.Errorf("1 minute at 5,000 req/s: %d bytes, three do not fit the %d budget", n, runBudget)
	}
}
