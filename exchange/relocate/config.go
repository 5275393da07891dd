package relocate

import "github.com/llmesh/llmesh/config"

// FromConfig compiles the mesh config's relocation section, which the mesh
// config has already validated. Its section-wide limits apply to every
// rule: max_message to each gRPC rule's MaxMessage, max_body to each HTTP
// rule's MaxBody (zero, from a hand-built config.Relocation, means this
// package's defaults).
func FromConfig(c config.Relocation) (*Relocator, error) {
	cfg := Config{sectionLimits: true}
	for _, g := range c.GRPC {
		r := GRPCRule{Method: g.Method, Key: g.Metadata, Field: g.Field, Threshold: Threshold{Bytes: g.Threshold}, Max: g.Max, MaxMessage: c.MaxMessage}
		if g.Bytes {
			r.Type = Bytes
		}
		if g.Refuse {
			r.Compressed = Refuse
		}
		cfg.GRPC = append(cfg.GRPC, r)
	}
	for _, h := range c.HTTP {
		cfg.HTTP = append(cfg.HTTP, HTTPRule{PathPrefix: h.PathPrefix, Header: h.Header, Field: h.Field, Threshold: Threshold{Bytes: h.Threshold}, Max: h.Max, MaxBody: c.MaxBody})
	}
	return Compile(cfg)
}
