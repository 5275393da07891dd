package server

import (
	"fmt"
	"sort"
	"strings"
)

// Quirk names a behaviour of some real engine that the sim can reproduce,
// so that hosts and the harness can be tested against it without that
// engine. The zero Quirks has none: the sim then behaves as vLLM does.
type Quirk string

// Quirks the sim knows.
const (
	// QuirkGRPCNoUsage: gRPC streams end without usage (llm.v1: no usage
	// on the last message; vLLM's engine API: no prompt or completion
	// counts on any chunk nor on GenerateComplete, so they read as the
	// proto3 zero), as engines that do not fill those fields do.
	QuirkGRPCNoUsage Quirk = "grpc-no-usage"
	// QuirkNoAbort: a request whose client went away keeps generating to
	// its end (and keeps its slot and KV cache), as engines that do not
	// watch the connection do: preempting it frees nothing.
	QuirkNoAbort Quirk = "no-abort"
	// QuirkMergeDeltas: tokens that piled up while the writer lagged go out
	// as one SSE event with their text joined, as vLLM's API server does
	// (instead of one event per token): counting events undercounts tokens.
	QuirkMergeDeltas Quirk = "merge-deltas"
	// QuirkUsageWithoutStreamOptions: streams end with a usage event even
	// when the request did not ask for it (stream_options.include_usage).
	QuirkUsageWithoutStreamOptions Quirk = "usage-without-stream-options"
	// QuirkRoleChunkFirst: every SSE stream starts with an event that
	// carries no token: chat's is {"delta":{"role":"assistant"}} without a
	// content field, a completion's has "text":"". Neither is a first
	// token.
	QuirkRoleChunkFirst Quirk = "role-chunk-first"
	// QuirkNoContinueFinalMessage: chat ignores continue_final_message; a
	// final assistant message is not continued but answered anew from the
	// context before it, so a continuation request repeats the text that
	// message already holds, as engines without that feature do.
	QuirkNoContinueFinalMessage Quirk = "no-continue-final-message"
)

// quirkDocs lists every known quirk with what it does; ParseQuirks accepts
// exactly these.
var quirkDocs = map[Quirk]string{
	QuirkGRPCNoUsage:               "gRPC streams carry no usage (counts read as 0)",
	QuirkNoAbort:                   "keep generating after the client goes away",
	QuirkMergeDeltas:               "tokens that piled up go out as one SSE event",
	QuirkUsageWithoutStreamOptions: "SSE streams end with usage even when not asked",
	QuirkRoleChunkFirst:            "SSE streams start with an event without a token (a bare role, an empty text)",
	QuirkNoContinueFinalMessage:    "chat ignores continue_final_message: a final assistant message is answered anew, not continued",
}

// KnownQuirks returns the quirk names ParseQuirks accepts, sorted.
func KnownQuirks() []string {
	names := make([]string, 0, len(quirkDocs))
	for q := range quirkDocs {
		names = append(names, string(q))
	}
	sort.Strings(names)
	return names
}

// Quirks is a set of enabled quirks.
type Quirks map[Quirk]bool

// Has reports whether q is enabled (false on a nil set).
func (s Quirks) Has(q Quirk) bool { return s[q] }

// ParseQuirks reads quirk names (entries may themselves be comma-separated
// lists; blanks are skipped). Every unknown name is reported, each naming
// the quirk and the known ones.
func ParseQuirks(names []string) (Quirks, error) {
	var (
		set     Quirks
		unknown []string
	)
	for _, entry := range names {
		for _, n := range strings.Split(entry, ",") {
			n = strings.TrimSpace(n)
			if n == "" {
				continue
			}
			if _, ok := quirkDocs[Quirk(n)]; !ok {
				unknown = append(unknown, fmt.Sprintf("%q", n))
				continue
			}
			if set == nil {
				set = Quirks{}
			}
			set[Quirk(n)] = true
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("quirk %s unknown (known: %s)", strings.Join(unknown, ", "), strings.Join(KnownQuirks(), ", "))
	}
	return set, nil
}
