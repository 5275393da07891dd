package loadgen_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler/loadgen"
)

func TestParseCPUSeconds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		err  string
	}{
		{in: "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.34\n", want: 12.34},
		{in: "process_cpu_seconds_total_extra 1\nprocess_cpu_seconds_total{pid=\"1\"} 2\nprocess_cpu_seconds_total 3 1700000000000\n", want: 3},
		{in: "process_cpu_seconds_total 1.5e+01\nprocess_cpu_seconds_total 99\n", want: 15},
		{in: "go_goroutines 12\n", err: "process_cpu_seconds_total: not in the exposition"},
		{in: "process_cpu_seconds_total\n", err: "not in the exposition"},
		{in: "x 1\nprocess_cpu_seconds_total lots\n", err: `line 2: process_cpu_seconds_total: "lots" is not a count of seconds`},
		{in: "process_cpu_seconds_total -1\n", err: `"-1" is not a count of seconds`},
		{in: "process_cpu_seconds_total NaN\n", err: `"NaN" is not a count of seconds`},
		{in: "process_cpu_seconds_total 1 2 3\n", err: "line 1: process_cpu_seconds_total: want a value and at most a timestamp"},
	} {
		got, err := loadgen.ParseCPUSeconds(strings.NewReader(tc.in))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one with %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseCPUSeconds(f *testing.F) {
	f.Add("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.34\n")
	f.Add("process_cpu_seconds_total{a=\"b\"} 1\nprocess_cpu_seconds_total 3 17\n")
	f.Add("process_cpu_seconds_total\tInf\n")
	f.Fuzz(func(t *testing.T, in string) {
		v, err := loadgen.ParseCPUSeconds(strings.NewReader(in))
		if err == nil && (v < 0 || v != v) {
			t.Fatalf("%q: %v without an error", in, v)
		}
		if err != nil && v != 0 {
			t.Fatalf("%q: %v with error %v", in, v, err)
		}
	})
}

// PrometheusCPU reads the counter over HTTP, and says what went wrong.
func TestServiceCPU(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "process_cpu_seconds_total %d.25\n", calls.Add(1))
	}))
	defer srv.Close()
	got, err := loadgen.PrometheusCPU(srv.URL+"/metrics", nil)(context.Background())
	if err != nil || got != 1250*time.Millisecond {
		t.Errorf("PrometheusCPU: %v, %v; want 1.25s", got, err)
	}
	if _, err := loadgen.PrometheusCPU(srv.URL+"/other", nil)(context.Background()); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("PrometheusCPU of a missing page: %v, want its status", err)
	}
}

// Run reads the service's CPU counter twice, as the measured window starts
// and ends, and divides the difference by the admissions.
func TestRunReportsServiceCPU(t *testing.T) {
	_, proxies := service(t, 64, 2)
	var calls atomic.Int64
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		Proxies: proxies, Rate: 1000, Arrivals: "uniform", Warmup: 20 * time.Millisecond, Duration: 200 * time.Millisecond, Mix: mix,
		ServiceCPU: func(context.Context) (time.Duration, error) {
			return time.Duration(calls.Add(1)) * time.Second, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 || rep.ServiceCPU == nil || rep.ServiceCPU.Seconds != 1 || rep.ServiceCPU.Error != "" || rep.Admissions == 0 {
		t.Fatalf("%d reads, report %+v, service CPU %+v: want two reads 1 s apart", calls.Load(), rep, rep.ServiceCPU)
	}
	if want := 1e6 / float64(rep.Admissions); rep.ServiceCPU.PerAdmissionUS != want {
		t.Errorf("per admission %v µs, want %v", rep.ServiceCPU.PerAdmissionUS, want)
	}

	rep, err = loadgen.Run(context.Background(), loadgen.Options{
		Proxies: proxies, Rate: 1000, Duration: 50 * time.Millisecond, Mix: mix,
		ServiceCPU: func(context.Context) (time.Duration, error) { return 0, fmt.Errorf("connection refused") },
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ServiceCPU == nil || rep.ServiceCPU.Error != "service CPU: connection refused" || rep.Admissions == 0 {
		t.Errorf("report %+v, service CPU %+v: want the run with the reading's error", rep, rep.ServiceCPU)
	}
}
