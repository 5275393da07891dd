// Package flag is the standard library's flag API over pflag, so that each
// llmesh command defines its flags once, in its own function, the way it
// always has (fs := flag.NewFlagSet(...); fs.String(...); fs.Parse(args)),
// while cobra's tree parses them, prints their help and completes them.
//
// How the tree reaches flags defined inside a command's function: it calls
// the function with the arguments Bind returns (one token naming a
// binding). The first Parse given that token hands its FlagSet to the
// binding: once, before the tree parses anything, to learn the flags
// (Describe), and again to run (Run), when the binding parses the command
// line the tree has checked with the same definitions. A command called
// with ordinary arguments, as tests do, parses them itself by the same
// rules.
//
// Flags take two dashes (--rate 5, --rate=5); a long name given with one
// dash is an error that suggests the two-dash form.
package flag

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/llmesh/llmesh/internal/editdist"
	"github.com/spf13/pflag"
)

// Flag is one defined flag.
type Flag = pflag.Flag

// ErrorHandling says what Parse does with an error; llmesh commands use
// ContinueOnError only.
type ErrorHandling = pflag.ErrorHandling

// ContinueOnError makes Parse return its error.
const ContinueOnError = pflag.ContinueOnError

// ErrHelp is Parse's error for -h or --help.
var ErrHelp = pflag.ErrHelp

// Value is a flag's value, as the standard library defines it. A Value
// with an IsBoolFlag() bool method that returns true takes no argument.
type Value interface {
	String() string
	Set(string) error
}

// FlagSet is a set of flags; the methods it does not declare are pflag's.
type FlagSet struct {
	*pflag.FlagSet
	// bound: the flags came from a binding, so a later Parse (a command
	// that parses what follows a positional argument again) is given
	// positional arguments only.
	bound bool
	// describing: the set is being described, so PrintDefaults, called
	// from a command's own Usage, prints nothing (the tree prints the
	// flags in its own help).
	describing bool
}

// NewFlagSet returns an empty set named name (the command's path).
func NewFlagSet(name string, errorHandling ErrorHandling) *FlagSet {
	fs := pflag.NewFlagSet(name, errorHandling)
	fs.SortFlags = true
	return &FlagSet{FlagSet: fs}
}

// Var defines a flag with a Value of the standard library's kind.
func (f *FlagSet) Var(v Value, name, usage string) {
	fl := f.FlagSet.VarPF(stdValue{v}, name, "", usage)
	if b, ok := v.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		fl.NoOptDefVal = "true"
	}
}

// PrintDefaults prints the flags' help to the set's output.
func (f *FlagSet) PrintDefaults() {
	if !f.describing {
		f.FlagSet.PrintDefaults()
	}
}

// Parse parses args: the flags, then positional arguments (flags and
// positional arguments may be interleaved; "--" ends the flags). Given
// Bind's arguments, it hands the set to the binding instead.
func (f *FlagSet) Parse(args []string) error {
	if f.bound {
		return f.FlagSet.Parse(append([]string{"--"}, args...))
	}
	if len(args) == 1 && strings.HasPrefix(args[0], tokenPrefix) {
		b, ok := bindings.Load(args[0])
		if !ok {
			return errors.New("flag: the command line was released before the command parsed it")
		}
		f.bound = true
		return b.(binding)(f)
	}
	f.FlagSet.SetOutput(io.Discard) // the error is returned, once
	err := f.FlagSet.Parse(args)
	if errors.Is(err, ErrHelp) {
		return err
	}
	return Explain(f.FlagSet, f.Name(), err)
}

// stdValue gives a standard library Value the type name pflag's help uses.
type stdValue struct{ Value }

func (v stdValue) Type() string {
	if b, ok := v.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "bool"
	}
	return "value"
}

// A binding receives the FlagSet a command parses Bind's arguments with.
type binding func(*FlagSet) error

const tokenPrefix = "\x00llmesh-flag-binding:"

var (
	bindings sync.Map // token → binding
	nextID   atomic.Uint64
)

// bind registers b and returns the arguments that reach it.
func bind(b binding) (args []string, release func()) {
	token := tokenPrefix + strconv.FormatUint(nextID.Add(1), 10)
	bindings.Store(token, b)
	return []string{token}, func() { bindings.Delete(token) }
}

// errDescribed ends a command's run once its flags are known.
var errDescribed = errors.New("flags described")

// Describe learns the flags of a command: run calls the command with the
// arguments it is given; the command defines its flags and parses them,
// and Describe returns them, and what the command's own Usage function
// (if it sets one) prints to the writer run gives the command. A command
// that parses no flags gives nil.
func Describe(run func(args []string)) *pflag.FlagSet {
	var got *FlagSet
	args, release := bind(func(f *FlagSet) error {
		got = f
		if f.Usage != nil {
			f.describing = true
			f.Usage()
			f.describing = false
		}
		return errDescribed
	})
	defer release()
	run(args)
	if got == nil {
		return nil
	}
	return got.FlagSet
}

// Run returns the arguments with which a command's Parse parses args,
// the command line the tree has already parsed with the flags Describe
// returned (so it parses without error); release forgets the binding.
func Run(args []string) (bound []string, release func()) {
	return bind(func(f *FlagSet) error {
		f.FlagSet.SetOutput(io.Discard)
		return Explain(f.FlagSet, f.Name(), f.FlagSet.Parse(args))
	})
}

// Explain rewrites a parse error of fs as one line that names the flag,
// suggests the closest defined flag when one is close, and says where
// the flags are listed (command is the command's path).
func Explain(fs *pflag.FlagSet, command string, err error) error {
	if err == nil {
		return nil
	}
	hint := fmt.Sprintf("see %s --help", command)
	var notExist *pflag.NotExistError
	var needsValue *pflag.ValueRequiredError
	var invalid *pflag.InvalidValueError
	var syntax *pflag.InvalidSyntaxError
	switch {
	case errors.As(err, &notExist):
		given, name := "--"+notExist.GetSpecifiedName(), notExist.GetSpecifiedName()
		if s := notExist.GetSpecifiedShortnames(); s != "" {
			// A long name with one dash reads as a group of one-letter
			// flags: "-config" is -c -o -n -f -i -g.
			name, _, _ = strings.Cut(s, "=")
			given = "-" + name
		}
		msg := "unknown flag " + given
		if near := Closest(fs, name); near != "" {
			msg += fmt.Sprintf(" (did you mean --%s?)", near)
		}
		return &Error{Msg: msg + "; " + hint, Err: err}
	case errors.As(err, &needsValue):
		return &Error{Msg: fmt.Sprintf("--%s needs a value; %s", needsValue.GetFlag().Name, hint), Err: err}
	case errors.As(err, &invalid):
		return &Error{Msg: fmt.Sprintf("--%s: invalid value %q: %v; %s", invalid.GetFlag().Name, invalid.GetValue(), unwrapStrconv(invalid.Unwrap()), hint), Err: err}
	case errors.As(err, &syntax):
		return &Error{Msg: fmt.Sprintf("bad flag syntax %s; %s", syntax.GetSpecifiedFlag(), hint), Err: err}
	}
	return &Error{Msg: err.Error() + "; " + hint, Err: err}
}

// unwrapStrconv keeps what a strconv error says about the value, without
// the function name and the value repeated.
func unwrapStrconv(err error) error {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return ne.Err
	}
	return err
}

// Error is a flag error explained for the user; it unwraps to pflag's.
type Error struct {
	Msg string
	Err error
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// Closest is the defined flag nearest to name: one that starts with it,
// or else one within a third of its length in edits (at least 1, at most
// 3); "" if none is that close.
func Closest(fs *pflag.FlagSet, name string) string {
	if name == "" {
		return ""
	}
	best, bestD := "", max(1, min(3, len(name)/3))+1
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Hidden {
			return
		}
		d := editdist.Levenshtein(name, fl.Name)
		if strings.HasPrefix(fl.Name, name) && len(name) >= 3 {
			d = min(d, 1)
		}
		if d < bestD || (d == bestD && best != "" && fl.Name < best) {
			best, bestD = fl.Name, d
		}
	})
	if bestD > max(1, min(3, len(name)/3)) {
		return ""
	}
	return best
}
