package exchange

// defaultGenerationPaths are the calls scheduled and measured as
// generations when a route names none: OpenAI completions and chat
// completions (POST), and the gRPC generation methods of llm.v1 and vLLM's
// engine API. Everything else (model lists, health, tokenize, embeddings)
// is proxied without admission and recorded apart.
var defaultGenerationPaths = []string{"/v1/completions", "/v1/chat/completions", MethodLLMV1, MethodVLLM}

// Generations says which requests are generation calls: an exact request
// path (an HTTP path or a gRPC method's :path) from its list. The zero
// value and nil use defaultGenerationPaths.
type Generations struct {
	paths map[string]bool
}

// newGenerations returns the matcher for paths; empty paths means
// defaultGenerationPaths.
func newGenerations(paths []string) *Generations {
	if len(paths) == 0 {
		return nil
	}
	g := &Generations{paths: make(map[string]bool, len(paths))}
	for _, p := range paths {
		g.paths[p] = true
	}
	return g
}

var defaultGenerations = func() map[string]bool {
	m := map[string]bool{}
	for _, p := range defaultGenerationPaths {
		m[p] = true
	}
	return m
}()

// Match reports whether a request is a generation call. HTTP generations
// are POSTs (a GET of a generation path is not one); gRPC calls are POSTs
// by the protocol.
func (g *Generations) Match(method, path string) bool {
	if method != "" && method != "POST" {
		return false
	}
	if g == nil || g.paths == nil {
		return defaultGenerations[path]
	}
	return g.paths[path]
}
