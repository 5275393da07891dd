// Package provenance records what a benchmark result came from: each
// build's module version and VCS revision (or the binary's sha256 when it
// carries none), the hashes of the mesh, workload and trace files, the
// seeds, and the host's cores and load at the start. A result without it
// cannot be reproduced or trusted to compare two builds.
//
// The package holds no state and starts no goroutines.
package provenance

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
)

// Build identifies one llmesh build.
type Build struct {
	// Path is the binary's path as given (empty for the running binary).
	Path string `json:"path,omitempty"`
	// Module and Version are the main module's path and version
	// ("(devel)" for a build from a work tree).
	Module  string `json:"module,omitempty"`
	Version string `json:"version,omitempty"`
	// Revision is the VCS revision the build was made from; Modified is
	// set when the work tree had uncommitted changes.
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// GoVersion is the toolchain that built it.
	GoVersion string `json:"go_version,omitempty"`
	// SHA256 is the binary's hash: set for a build run from a file (an
	// exec: arm), and for the running binary when it has no revision.
	SHA256 string `json:"sha256,omitempty"`
}

// String is a one-line summary: "module@version rev (modified)" or the hash.
func (b Build) String() string {
	var parts []string
	if b.Path != "" {
		parts = append(parts, b.Path)
	}
	if b.Module != "" {
		parts = append(parts, b.Module+"@"+b.Version)
	}
	if b.Revision != "" {
		r := "rev " + b.Revision
		if b.Modified {
			r += " (modified)"
		}
		parts = append(parts, r)
	}
	if b.SHA256 != "" {
		parts = append(parts, "sha256:"+short(b.SHA256))
	}
	if len(parts) == 0 {
		return "unknown build"
	}
	return strings.Join(parts, " ")
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// fromInfo fills b from a binary's build information.
func (b *Build) fromInfo(bi *debug.BuildInfo) {
	b.Module, b.Version, b.GoVersion = bi.Main.Path, bi.Main.Version, bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
}

// Self is the running binary's build. Without a VCS revision it carries
// the executable's sha256 (empty when the executable cannot be read).
func Self() Build {
	var b Build
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.fromInfo(bi)
	}
	if b.Revision == "" {
		if exe, err := os.Executable(); err == nil {
			b.SHA256, _ = FileSHA256(exe)
		}
	}
	return b
}

// Of is the build of the binary at path: its embedded build information
// when it has any, and always its sha256 (two copies of one build hash the
// same; a rebuild from the same revision may not).
func Of(path string) (Build, error) {
	b := Build{Path: path}
	sum, err := FileSHA256(path)
	if err != nil {
		return b, err
	}
	b.SHA256 = sum
	if bi, err := buildinfo.ReadFile(path); err == nil {
		b.fromInfo(bi)
	}
	return b, nil
}

// FileSHA256 is the hex sha256 of the file at path.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Host describes the machine a result was measured on.
type Host struct {
	OS    string `json:"os"`
	Arch  string `json:"arch"`
	Cores int    `json:"cores"`
	// LoadAvg is the 1, 5 and 15 minute load averages at the start, from
	// /proc/loadavg; empty where the system has none.
	LoadAvg string `json:"loadavg,omitempty"`
}

// HostNow describes this host now.
func HostNow() Host {
	h := Host{OS: runtime.GOOS, Arch: runtime.GOARCH, Cores: runtime.NumCPU()}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.LoadAvg = ParseLoadAvg(string(data))
	}
	return h
}

// ParseLoadAvg keeps the three load averages of a /proc/loadavg line
// ("0.52 0.58 0.59 1/467 12345"); anything else gives "".
func ParseLoadAvg(s string) string {
	f := strings.Fields(s)
	if len(f) < 3 {
		return ""
	}
	for _, v := range f[:3] {
		var x float64
		if _, err := fmt.Sscanf(v, "%g", &x); err != nil || x < 0 {
			return ""
		}
	}
	return strings.Join(f[:3], " ")
}

// Provenance is what a result came from.
type Provenance struct {
	// Builds maps an arm ("A", "B") or "self" to its build.
	Builds map[string]Build `json:"builds"`
	// Files maps each input file (mesh, workload, trace) as given to its
	// sha256; an arm's mesh is keyed "A mesh FILE".
	Files map[string]string `json:"files,omitempty"`
	// Seeds are the seeds run, per unit in order.
	Seeds []int64 `json:"seeds,omitempty"`
	Host  Host    `json:"host"`
}

// New starts a provenance with this host's facts and the running build.
func New() *Provenance {
	return &Provenance{Builds: map[string]Build{"self": Self()}, Files: map[string]string{}, Host: HostNow()}
}

// AddFile records the sha256 of the file at path under key (path itself
// when key is empty); an empty path is skipped.
func (p *Provenance) AddFile(key, path string) error {
	if path == "" {
		return nil
	}
	sum, err := FileSHA256(path)
	if err != nil {
		return err
	}
	if key == "" {
		key = path
	}
	p.Files[key] = sum
	return nil
}

// Rows lists p as label and value pairs, in the order every report shows
// them: builds, input files, seeds, host.
func (p *Provenance) Rows() [][2]string {
	var rows [][2]string
	for _, k := range sortedKeys(p.Builds) {
		rows = append(rows, [2]string{"build " + k, p.Builds[k].String()})
	}
	for _, k := range sortedKeys(p.Files) {
		rows = append(rows, [2]string{k, "sha256:" + short(p.Files[k])})
	}
	if len(p.Seeds) > 0 {
		rows = append(rows, [2]string{"seeds", seedList(p.Seeds)})
	}
	rows = append(rows, [2]string{"host", fmt.Sprintf("%s/%s, %d cores, load average %s at start", p.Host.OS, p.Host.Arch, p.Host.Cores, orNone(p.Host.LoadAvg))})
	return rows
}

// WriteMarkdown writes p as a short section for a pull-request summary.
func (p *Provenance) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("\n<details><summary>provenance</summary>\n\n| | |\n|---|---|\n")
	for i, r := range p.Rows() {
		if i < len(p.Builds) {
			fmt.Fprintf(&b, "| %s | `%s` |\n", r[0], r[1])
			continue
		}
		fmt.Fprintf(&b, "| %s | %s |\n", r[0], r[1])
	}
	b.WriteString("\n</details>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteText writes p as indented lines under a "provenance:" heading, for
// a terminal.
func (p *Provenance) WriteText(w io.Writer) error {
	var b strings.Builder
	b.WriteString("provenance:\n")
	for _, r := range p.Rows() {
		fmt.Fprintf(&b, "  %s: %s\n", r[0], r[1])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// seedList writes consecutive seeds as a range.
func seedList(s []int64) string {
	consecutive := true
	for i := 1; i < len(s); i++ {
		consecutive = consecutive && s[i] == s[i-1]+1
	}
	if consecutive && len(s) > 2 {
		return fmt.Sprintf("%d…%d (%d)", s[0], s[len(s)-1], len(s))
	}
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
