package config_test

import (
	"slices"
	"testing"

	"github.com/llmesh/llmesh/config"
)

func TestEnginePriority(t *testing.T) {
	cfg, err := config.Load([]byte(`
pools:
  - {name: fcfs, protocol: openai, endpoints: [h:1]}
  - {name: prio, protocol: grpc, endpoints: [h:2], engine_priority: class}
  - {name: plain, protocol: grpc, endpoints: [h:3], engine_priority: strip}
classes: [{name: gold, priority: -2147483648}, {name: bulk, priority: 2147483647}]
default_class: bulk
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"fcfs": "strip", "prio": "class", "plain": "strip"} {
		p := cfg.Pool(name)
		if p.EnginePriority != want || p.ClassEnginePriority() != (want == "class") {
			t.Errorf("pool %s: EnginePriority %q (class %v), want %q", name, p.EnginePriority, p.ClassEnginePriority(), want)
		}
	}
	var nilPool *config.Pool
	if nilPool.ClassEnginePriority() {
		t.Error("nil pool passes the class priority")
	}

	got := errorLines(t, `
pools:
  - {name: a, protocol: openai, endpoints: [h:1], engine_priority: Class}
`)
	want := []string{`pools[0].engine_priority: "Class" must be "strip" or "class"`}
	if !slices.Equal(got, want) {
		t.Errorf("errors\n%q\nwant\n%q", got, want)
	}
	got = errorLines(t, `
pools:
  - {name: b, protocol: openai, endpoints: [h:1], engine_priority: [class]}
`)
	want = []string{`pools[0].engine_priority: must be a string, got a list (line 3)`}
	if !slices.Equal(got, want) {
		t.Errorf("errors\n%q\nwant\n%q", got, want)
	}
	got = errorLines(t, `
pools:
  - {name: c, protocol: openai, endpoints: [h:1], engine_priority: class}
  - {name: d, protocol: openai, endpoints: [h:1]}
classes: [{name: gold, priority: -2147483649}, {name: bulk, priority: 2147483648}, {name: ok, priority: 5}]
default_class: ok
`)
	want = []string{
		`pools[0].engine_priority: "class" writes class priorities into an int32 engine field; classes[0].priority = -2147483649 is out of range`,
		`pools[0].engine_priority: "class" writes class priorities into an int32 engine field; classes[1].priority = 2147483648 is out of range`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors\n%q\nwant\n%q", got, want)
	}
}
