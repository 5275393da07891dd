package fakesdk

import (
	"strings"
	"sync"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
)

// CAPI is a fake of api.CommonCAPI: it collects log lines in memory so that
// api.Log* work outside Envoy.
type CAPI struct {
	mu    sync.Mutex
	level api.LogType
	lines []string
}

var _ api.CommonCAPI = (*CAPI)(nil)

var (
	installOnce sync.Once
	installed   = &CAPI{level: api.Debug}
)

// InstallCAPI points the SDK's package-level logger at a shared fake CAPI
// and returns it. Call it before anything logs through api.Log*; without it
// those functions panic ("To implement") outside Envoy. Safe to call from
// many tests: the fake is installed once and shared.
func InstallCAPI() *CAPI {
	installOnce.Do(func() { api.SetCommonCAPI(installed) })
	return installed
}

// Log records one line as "level: message".
func (c *CAPI) Log(level api.LogType, message string) {
	c.mu.Lock()
	c.lines = append(c.lines, level.String()+": "+message)
	c.mu.Unlock()
}

// LogLevel is the level below which api.Log* drop messages.
func (c *CAPI) LogLevel() api.LogType {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.level
}

// SetLevel changes the level LogLevel reports.
func (c *CAPI) SetLevel(l api.LogType) {
	c.mu.Lock()
	c.level = l
	c.mu.Unlock()
}

// Lines returns the recorded lines that contain substr (all when empty).
func (c *CAPI) Lines(substr string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range c.lines {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}
