package flag

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// list is a repeatable flag of the standard library's kind.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

type onOff struct{ v *bool }

func (o onOff) IsBoolFlag() bool { return true }
func (o onOff) String() string {
	if o.v == nil {
		return "false"
	}
	return map[bool]string{true: "true", false: "false"}[*o.v]
}
func (o onOff) Set(s string) error { *o.v = s == "true"; return nil }

// command is a command's own flag block, as llmesh's commands write it.
type command struct {
	rate   *float64
	target *string
	wait   *time.Duration
	quiet  *bool
	tags   list
	on     bool
	fs     *FlagSet
}

func newCommand() *command {
	c := &command{fs: NewFlagSet("llmesh test", ContinueOnError)}
	c.rate = c.fs.Float64("rate", 0, "requests per second")
	c.target = c.fs.String("target", "", "the `URL` to load")
	c.wait = c.fs.Duration("wait", time.Second, "how long")
	c.quiet = c.fs.Bool("quiet", false, "no progress")
	c.fs.Var(&c.tags, "tag", "a tag; repeatable")
	c.fs.Var(onOff{&c.on}, "on", "switch on")
	return c
}

func TestParse(t *testing.T) {
	c := newCommand()
	err := c.fs.Parse([]string{"--rate", "2.5", "file", "--target=http://x", "--tag", "a", "--quiet", "--tag", "b", "--on", "--", "--wait"})
	if err != nil {
		t.Fatal(err)
	}
	if *c.rate != 2.5 || *c.target != "http://x" || !*c.quiet || !c.on || *c.wait != time.Second {
		t.Errorf("rate %v target %q quiet %v on %v wait %v", *c.rate, *c.target, *c.quiet, c.on, *c.wait)
	}
	if diff := cmp.Diff([]string{"a", "b"}, []string(c.tags)); diff != "" {
		t.Errorf("--tag (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"file", "--wait"}, c.fs.Args()); diff != "" {
		t.Errorf("positional (-want +got):\n%s", diff)
	}
	var set []string
	c.fs.Visit(func(f *Flag) { set = append(set, f.Name) })
	if diff := cmp.Diff([]string{"on", "quiet", "rate", "tag", "target"}, set); diff != "" {
		t.Errorf("Visit (-want +got):\n%s", diff)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tagret", "x"}, "unknown flag --tagret (did you mean --target?); see llmesh test --help"},
		{[]string{"-target", "x"}, "unknown flag -target (did you mean --target?); see llmesh test --help"},
		{[]string{"--zzzzzz"}, "unknown flag --zzzzzz; see llmesh test --help"},
		{[]string{"--rat"}, "unknown flag --rat (did you mean --rate?); see llmesh test --help"},
		{[]string{"--rate", "fast"}, `--rate: invalid value "fast": invalid syntax; see llmesh test --help`},
		{[]string{"--wait", "soon"}, `--wait: invalid value "soon": time: invalid duration "soon"; see llmesh test --help`},
		{[]string{"--rate"}, "--rate needs a value; see llmesh test --help"},
	} {
		err := newCommand().fs.Parse(tc.args)
		var fe *Error
		if !errors.As(err, &fe) {
			t.Errorf("Parse(%q) = %v, want an *Error", tc.args, err)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("Parse(%q):\n got %s\nwant %s", tc.args, err, tc.want)
		}
	}
	if err := newCommand().fs.Parse([]string{"--help"}); !errors.Is(err, ErrHelp) {
		t.Errorf("--help: %v, want ErrHelp", err)
	}
}

// The tree's two calls: Describe learns the flags without running the
// command past its Parse; Run parses the checked command line into the
// command's own set, and a later Parse gets positional arguments only.
func TestDescribeAndRun(t *testing.T) {
	ran := 0
	var got *command
	cmd := func(args []string) error {
		c := newCommand()
		c.fs.Usage = func() { c.fs.PrintDefaults() }
		if err := c.fs.Parse(args); err != nil {
			return err
		}
		ran++
		got = c
		if c.fs.NArg() > 0 {
			return c.fs.Parse(c.fs.Args()[1:])
		}
		return nil
	}
	fs := Describe(func(args []string) { _ = cmd(args) })
	if fs == nil || fs.Lookup("rate") == nil || fs.Lookup("tag") == nil || ran != 0 {
		t.Fatalf("Describe: %v, ran %d", fs, ran)
	}
	if Describe(func([]string) {}) != nil {
		t.Error("Describe of a command that parses nothing is not nil")
	}
	args, release := Run([]string{"one", "--rate", "3", "-x"})
	if err := cmd(args); err == nil {
		t.Error("Run with an unknown flag: no error")
	}
	release()
	args, release = Run([]string{"one", "--rate", "3", "--", "--rate"})
	defer release()
	if err := cmd(args); err != nil {
		t.Fatal(err)
	}
	if ran != 1 || *got.rate != 3 {
		t.Errorf("ran %d, rate %v", ran, *got.rate)
	}
	if diff := cmp.Diff([]string{"--rate"}, got.fs.Args()); diff != "" {
		t.Errorf("after the second Parse (-want +got):\n%s", diff)
	}
	release()
	if err := cmd(args); err == nil {
		t.Error("a released binding still binds")
	}
}

// FuzzParse: any command line parses or fails with an explained error,
// never panics, and an unknown flag's suggestion is a defined flag.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"--rate 1 x", "-target x", "--tagret", "--tag a --tag=b -- --x", "--on=maybe", "-", "---x", "--=", "-rat=1", "--wait 1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		c := newCommand()
		err := c.fs.Parse(strings.Fields(line))
		if err == nil || errors.Is(err, ErrHelp) {
			return
		}
		var fe *Error
		if !errors.As(err, &fe) || strings.Contains(err.Error(), "\n") && !strings.Contains(line, "\n") {
			t.Fatalf("Parse(%q) = %v, want one explained line", line, err)
		}
		if _, s, ok := strings.Cut(err.Error(), "(did you mean --"); ok {
			name, _, _ := strings.Cut(s, "?)")
			if c.fs.Lookup(name) == nil {
				t.Fatalf("Parse(%q) suggests --%s, not a flag", line, name)
			}
		}
	})
}
