package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/llmesh/llmesh/internal/editdist"
	"gopkg.in/yaml.v3"
)

// MaxFileSize bounds the config file; larger files are refused before
// parsing.
const MaxFileSize = 4 << 20

// maxNodes bounds the nodes visited while checking a document, which also
// bounds alias expansion ("billion laughs").
const maxNodes = 200_000

// Parse decodes a YAML (or JSON) mesh config strictly: unknown fields,
// duplicate keys and values of the wrong type are errors naming their field
// path. It applies no defaults and does not validate; see Load.
func Parse(data []byte) (*Mesh, error) {
	if len(data) > MaxFileSize {
		return nil, Errors{{Msg: fmt.Sprintf("config is %d bytes, over the limit of %d", len(data), MaxFileSize)}}
	}
	m := &Mesh{}
	if _, err := DecodeStrict(data, m); err != nil {
		return nil, err
	}
	return m, nil
}

// DecodeStrict decodes one YAML (or JSON) document into v, a pointer to a
// struct with yaml tags, the way Parse decodes a mesh config: unknown
// fields (with a did-you-mean), duplicate keys and values of the wrong type
// are all reported at once as Errors naming their field path and line.
// Fields whose type implements yaml.Unmarshaler are checked by decoding
// them. It reports found=false, and leaves v alone, for an empty document.
func DecodeStrict(data []byte, v any) (found bool, err error) {
	found, _, err = decodeStrict(data, v)
	return found, err
}

// decodeStrict is DecodeStrict; when the strict check finds problems in a
// document that is safe to decode anyway (no node limit or alias problem,
// under MaxErrors problems), it also returns that document's root, so
// that Load can report the problems compiling finds in the same report.
func decodeStrict(data []byte, v any) (found bool, lenient *yaml.Node, err error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return false, nil, nil
		}
		return false, nil, Errors{{Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return false, nil, Errors{{Line: extra.Line, Msg: "more than one YAML document"}}
	} else if !errors.Is(err, io.EOF) {
		return false, nil, Errors{{Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return false, nil, nil
		}
		root = root.Content[0]
	}
	var c collector
	s := &strict{c: &c}
	s.check(root, reflect.TypeOf(v), nil)
	if err := c.err(); err != nil {
		if s.unsafe || c.full() {
			return true, nil, err
		}
		return true, root, err
	}
	if err := root.Decode(v); err != nil {
		return true, nil, Errors{{Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	return true, nil, nil
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// Load parses, defaults, validates and compiles a mesh config.
//
// Every problem of the file is reported at once: when the strict decoding
// finds some (an unknown field, a value of the wrong type), what it could
// not refuse is still decoded and compiled, and the compiler's problems
// follow, except those about a field already reported (see shadowed).
func Load(data []byte) (*Config, error) {
	if len(data) > MaxFileSize {
		_, err := Parse(data)
		return nil, err
	}
	m := &Mesh{}
	_, root, err := decodeStrict(data, m)
	if err == nil {
		applyDefaults(m)
		return Compile(m)
	}
	var strictErrs Errors
	if root == nil || !errors.As(err, &strictErrs) {
		return nil, err
	}
	_ = root.Decode(m) // what does not fit its field stays zero; reported above
	applyDefaults(m)
	_, cerr := Compile(m)
	var compileErrs Errors
	if !errors.As(cerr, &compileErrs) {
		return nil, strictErrs
	}
	all := append(Errors(nil), strictErrs...)
	for _, e := range compileErrs {
		if !shadowed(e.Path, strictErrs) && len(all) < MaxErrors {
			all = append(all, e)
		}
	}
	return nil, all
}

// shadowed reports whether a compiler problem at path is about a field
// the strict check already reported: the field itself, a field inside it,
// one that holds it (an endpoint whose "adress" was refused has no
// address), or the field an unknown one suggests ("nmae" → "name").
func shadowed(path string, strict Errors) bool {
	if path == "" {
		return false
	}
	for _, e := range strict {
		if e.Path == "" {
			continue
		}
		if within(path, e.Path) || within(e.Path, path) {
			return true
		}
		if _, s, ok := strings.Cut(e.Msg, `(did you mean "`); ok && !strings.HasSuffix(e.Path, "]") {
			s, _, _ = strings.Cut(s, `"`)
			parent := ""
			if i := strings.LastIndex(e.Path, "."); i >= 0 {
				parent = e.Path[:i]
			}
			if within(path, join(parent, s)) {
				return true
			}
		}
	}
	return false
}

// within reports whether path is field or inside it.
func within(path, field string) bool {
	return path == field || strings.HasPrefix(path, field+".") || strings.HasPrefix(path, field+"[")
}

// LoadFile reads and loads the config at path.
func LoadFile(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Load(data)
}

// ReadFile reads a config file, refusing one over MaxFileSize (the size is
// checked by Load, which reads one byte more than the limit), and expands
// environment variables in it (ExpandEnv).
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, MaxFileSize+1)); err != nil {
		return nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	out, err := ExpandEnv(buf.Bytes(), os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	return out, nil
}

// strict walks a YAML node tree against a Go type, reporting every unknown
// field and type mismatch with its path. yaml.v3's own KnownFields stops at
// the first problem and names lines, not paths.
type strict struct {
	c     *collector
	nodes int
	// unsafe: the document may not be decoded even leniently (too many
	// nodes or aliases, an unresolved alias).
	unsafe bool
}

func (s *strict) check(n *yaml.Node, t reflect.Type, path *pathSeg) {
	s.nodes++
	if s.c.full() {
		s.c.more++
		return
	}
	if s.nodes > maxNodes {
		s.unsafe = true
		if s.nodes == maxNodes+1 {
			s.c.add(path.String(), n.Line, "document too large or too many aliases (over %d nodes)", maxNodes)
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			s.unsafe = true
			s.c.add(path.String(), n.Line, "unresolved alias")
			return
		}
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == endpointSpecType && n.Kind == yaml.ScalarNode {
		t = reflect.TypeOf("") // the address-only form
	}
	// A type that decodes itself is checked by decoding it; EndpointSpec
	// decodes itself only for its two forms, so its object form is walked
	// field by field like any struct.
	if t != endpointSpecType && reflect.PointerTo(t).Implements(unmarshalerType) {
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			s.c.add(path.String(), n.Line, "%s", strings.TrimPrefix(err.Error(), fmt.Sprintf("line %d: ", n.Line)))
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		s.checkStruct(n, t, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			s.c.add(path.String(), n.Line, "must be a list, got %s", describe(n))
			return
		}
		for i, e := range n.Content {
			s.check(e, t.Elem(), path.index(i))
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			s.c.add(path.String(), n.Line, "must be a mapping, got %s", describe(n))
			return
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				s.c.add(path.String(), k.Line, "keys must be strings, got %s", describe(k))
				continue
			}
			if seen[k.Value] {
				s.c.add(path.key(k.Value).String(), k.Line, "duplicate key")
				continue
			}
			seen[k.Value] = true
			s.check(v, t.Elem(), path.key(k.Value))
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			s.c.add(path.String(), n.Line, "must be a string, got %s", describe(n))
		}
	case reflect.Int, reflect.Int64, reflect.Int32:
		var v int64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
			s.c.add(path.String(), n.Line, "must be an integer, got %s", describe(n))
		}
	case reflect.Float64:
		var v float64
		if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") || n.Decode(&v) != nil {
			s.c.add(path.String(), n.Line, "must be a number, got %s", describe(n))
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			s.c.add(path.String(), n.Line, "must be true or false, got %s", describe(n))
		}
	default:
		s.c.add(path.String(), n.Line, "unsupported field type %s", t)
	}
}

func (s *strict) checkStruct(n *yaml.Node, t reflect.Type, path *pathSeg) {
	if n.Kind != yaml.MappingNode {
		s.c.add(path.String(), n.Line, "must be a mapping, got %s", describe(n))
		return
	}
	fields := yamlFields(t)
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			s.c.add(path.String(), k.Line, "keys must be strings, got %s", describe(k))
			continue
		}
		p := path.field(k.Value)
		if k.Value == "<<" {
			s.c.add(p.String(), k.Line, "merge keys are not supported")
			continue
		}
		f, ok := fields[k.Value]
		if !ok {
			s.c.add(p.String(), k.Line, "unknown field%s", suggest(k.Value, fields))
			continue
		}
		if seen[k.Value] {
			s.c.add(p.String(), k.Line, "duplicate field")
			continue
		}
		seen[k.Value] = true
		s.check(v, f.Type, p)
	}
}

// pathSeg is one step of a field path, built as the walk descends and
// formatted only when an error needs it, so a large document costs one
// small allocation per node rather than a string per node.
type pathSeg struct {
	parent *pathSeg
	name   string // field name or map key
	idx    int
	kind   byte // 'f' field, 'i' index, 'k' map key
}

func (p *pathSeg) field(name string) *pathSeg { return &pathSeg{parent: p, name: name, kind: 'f'} }
func (p *pathSeg) index(i int) *pathSeg       { return &pathSeg{parent: p, idx: i, kind: 'i'} }
func (p *pathSeg) key(k string) *pathSeg      { return &pathSeg{parent: p, name: k, kind: 'k'} }

// String is the dotted path, "" for the root.
func (p *pathSeg) String() string {
	if p == nil {
		return ""
	}
	parent := p.parent.String()
	switch p.kind {
	case 'i':
		return index(parent, p.idx)
	case 'k':
		return key(parent, p.name)
	}
	return join(parent, p.name)
}

// fieldCache holds yamlFields results by type: the walk visits the same
// few struct types up to maxNodes times.
var fieldCache sync.Map // reflect.Type → map[string]reflect.StructField

func yamlFields(t reflect.Type) map[string]reflect.StructField {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.StructField)
	}
	out := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = f
	}
	fieldCache.Store(t, out)
	return out
}

// suggest names the closest known field, or lists them, so a typo is
// quick to fix.
func suggest(got string, fields map[string]reflect.StructField) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	best, bestD := "", 3
	for _, n := range names {
		if d := editdist.Levenshtein(strings.ToLower(strings.ReplaceAll(got, "-", "_")), n); d < bestD {
			best, bestD = n, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return fmt.Sprintf(" (known: %s)", strings.Join(names, ", "))
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return fmt.Sprintf("%q", v)
	case yaml.AliasNode:
		return "an alias"
	}
	return "an unexpected node"
}
