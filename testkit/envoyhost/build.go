package envoyhost

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// ErrNoCompiler is returned by BuildHost when no C++ compiler is on PATH:
// callers skip what needs the host, saying so.
var ErrNoCompiler = errors.New("no C++ compiler on PATH")

// ModuleRoot is the llmesh module's directory in the source tree this
// package was built from.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// EnvoyModuleDir is where the Go module cache holds the SDK's sources.
func EnvoyModuleDir() (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/envoyproxy/envoy")
	cmd.Dir = ModuleRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/envoyproxy/envoy: %v", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildSO builds the c-shared filter from the main package pkg (such as
// ./cmd/llmesh-filter) into dir and returns its path.
func BuildSO(pkg, dir string) (string, error) {
	so := filepath.Join(dir, filepath.Base(pkg)+".so")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", so, pkg)
	cmd.Dir = ModuleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-Wno-deprecated-declarations")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", pkg, err, out)
	}
	return so, nil
}

// BuildHost compiles the host (host/*.cc, with $CXX or g++) into a cache
// directory keyed by its sources and the SDK's api.h, once per source
// change, and returns the binary's path. Without a compiler the error
// wraps ErrNoCompiler.
func BuildHost() (string, error) {
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	if _, err := exec.LookPath(cxx); err != nil {
		return "", fmt.Errorf("%w (%s): the Envoy host cannot run", ErrNoCompiler, cxx)
	}
	mod, err := EnvoyModuleDir()
	if err != nil {
		return "", err
	}
	files, err := filepath.Glob(filepath.Join(ModuleRoot(), "testkit", "envoyhost", "host", "*"))
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	h := sha256.New()
	var ccs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\n%d\n", filepath.Base(f), len(b))
		h.Write(b)
		if strings.HasSuffix(f, ".cc") {
			ccs = append(ccs, f)
		}
	}
	api := filepath.Join(mod, "contrib", "golang", "common", "go", "api")
	fmt.Fprintf(h, "%s\n", api)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "llmesh-envoyhost", hex.EncodeToString(h.Sum(nil))[:16])
	bin := filepath.Join(dir, "envoyhost")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := bin + fmt.Sprintf(".%d", os.Getpid())
	args := append([]string{"-std=c++17", "-O1", "-g", "-Wall", "-pthread", "-rdynamic", "-I" + api, "-o", tmp}, ccs...)
	args = append(args, "-ldl")
	if out, err := exec.Command(cxx, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the host: %s %s: %v\n%s", cxx, strings.Join(args, " "), err, out)
	}
	return bin, os.Rename(tmp, bin)
}
