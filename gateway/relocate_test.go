package gateway

import (
	"strconv"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/config"
)

func TestRelocationHeaderLimitFromMesh(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int
		want int
	}{
		{"no rules", 0, 0},
		{"small rule keeps the net/http default", 4096, 1 << 20},
		{"4 MiB as base64 plus 64 KiB", 4 << 20, (4<<20+2)/3*4 + 64<<10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mesh := strings.Replace(relocMesh, "[SIM]", "[127.0.0.1:1]", 1)
			if tc.max == 0 {
				mesh = mesh[:strings.Index(mesh, "relocation:")]
			} else {
				mesh = strings.Replace(mesh, "max: 4194304", "max: "+strconv.Itoa(tc.max), 1)
			}
			c, err := configLoad(mesh)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := ConfigFromMesh(c, "")
			if err != nil {
				t.Fatal(err)
			}
			if cfg.MaxHeaderBytes != tc.want {
				t.Errorf("MaxHeaderBytes = %d, want %d", cfg.MaxHeaderBytes, tc.want)
			}
		})
	}
}

func configLoad(s string) (*config.Config, error) { return config.Load([]byte(s)) }
