package capacity

// Rule turns an engine sample into a pool admission limit. The aim is to
// keep the engine's own queue short, so that waiting happens in the
// scheduler (where priority and preemption act) rather than inside the
// engine (first come, first served), while never holding back capacity the
// engine has:
//
//   - KV-cache usage at or above KVHigh: the engine is about to preempt by
//     recompute, so the limit drops to what it actually runs (Running),
//     never above the current limit;
//   - more than Slack requests waiting in the engine: it has a backlog, so
//     the limit drops to Running + Slack, never above the current limit;
//   - at most Slack waiting and KV usage below KVLow: it has room, so the
//     limit grows by Step (additive increase) up to Max;
//   - in between the limit holds.
//
// Slack exists because a scrape sees requests the scheduler admitted since
// the engine's last step as waiting: engines pick up new requests only at
// step boundaries, and a long prefill step lasts hundreds of milliseconds.
// Treating those as a backlog would collapse the limit to Running under any
// steady load and leave the engine underfed.
//
// The result is always within [Min, Max]. Stale or failed scrapes do not
// reach the rule: the watcher falls back to Max (the static capacity).
type Rule struct {
	// Max is the static capacity (the pool's max_inflight); at least 1.
	Max int
	// Min is the floor; 0 means 1.
	Min int
	// Step is the additive increase per sample; 0 means max(1, Max/8).
	Step int
	// KVHigh and KVLow are the KV-usage thresholds; 0 means 0.95 and 0.85.
	KVHigh, KVLow float64
	// Slack is how many waiting requests the engine may report without
	// counting as backlogged; 0 means Step.
	Slack int
}

func (r Rule) defaults() Rule {
	r.Max = max(1, r.Max)
	r.Min = min(r.Max, max(1, r.Min))
	if r.Step <= 0 {
		r.Step = max(1, r.Max/8)
	}
	if r.KVHigh <= 0 {
		r.KVHigh = 0.95
	}
	if r.KVLow <= 0 {
		r.KVLow = 0.85
	}
	if r.Slack <= 0 {
		r.Slack = r.Step
	}
	return r
}

// Next returns the limit after sample s, starting from cur.
func (r Rule) Next(cur int, s Sample) int {
	r = r.defaults()
	next := cur
	switch {
	case s.HasKV && s.KVUsage >= r.KVHigh:
		next = min(cur, int(s.Running))
	case s.Waiting > float64(r.Slack):
		next = min(cur, int(s.Running)+r.Slack)
	case !s.HasKV || s.KVUsage < r.KVLow:
		next = cur + r.Step
	}
	return max(r.Min, min(r.Max, next))
}
