package capacity

// Rule turns an engine sample into a pool admission limit. The aim is to
// keep the engine's own queue empty, so that waiting happens in the
// scheduler (where priority and preemption act) rather than inside the
// engine (first come, first served), while never holding back capacity the
// engine has:
//
//   - the engine is saturated when it reports waiting requests or KV-cache
//     usage at or above KVHigh: the limit drops to what the engine actually
//     runs (Running), never above the current limit;
//   - it has room when KV usage is below KVLow and nothing waits: the limit
//     grows by Step (additive increase) up to Max;
//   - in between the limit holds.
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
	return r
}

// Next returns the limit after sample s, starting from cur.
func (r Rule) Next(cur int, s Sample) int {
	r = r.defaults()
	next := cur
	switch {
	case s.Waiting > 0 || (s.HasKV && s.KVUsage >= r.KVHigh):
		next = min(cur, int(s.Running))
	case !s.HasKV || s.KVUsage < r.KVLow:
		next = cur + r.Step
	}
	return max(r.Min, min(r.Max, next))
}
