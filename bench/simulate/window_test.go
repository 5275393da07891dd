package simulate

import (
	"testing"
	"time"
	"unsafe"

	"github.com/llmesh/llmesh/bench/workload"
)

// A fleet far past saturation holds every waiting request in its window
// (a million and more at 5,000 req/s for the workload's 5-minute
// timeout), so the waiting form's size is the fleet's memory.
func TestWaitingRequestIsSmall(t *testing.T) {
	t.Logf("vreq %d B, vrun %d B", unsafe.Sizeof(vreq{}), unsafe.Sizeof(vrun{}))
	if n := unsafe.Sizeof(vreq{}); n > 160 {
		t.Errorf("vreq is %d bytes, want at most 160: keep what only an admitted request needs in vrun", n)
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
	if r.Index != v.it.Index || r.Class != "batch" || r.PromptTokens != v.it.PromptTokens || r.MaxTokens != v.it.MaxTokens ||
		r.IntendedNS != int64(v.it.At) || r.SentNS != int64(v.it.At) || r.Warmup != v.it.Warmup {
		t.Fatalf("record %+v does not match item %+v", *r, v.it)
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
