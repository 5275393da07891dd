package scheduler

import "time"

// Ejection: an engine replica that dies fails fast, and a fast failure
// frees its slot at once, so to the picker's score a dead endpoint looks the
// least loaded of all and draws most new requests until the next capacity
// scrape drains it. The picker therefore learns from the outcomes hosts
// release leases with, as Envoy's outlier detection does:
//
//   - Unreachable (the host could not connect): the endpoint is ejected at
//     once;
//   - Failed (a 5xx, a reset or a stall, before any output or in the
//     middle of a stream: a dying engine cuts every stream it serves):
//     Burst of them in a row eject it;
//   - Done resets both counts; Cancelled and Preempted say nothing.
//
// An ejected endpoint takes no new admissions (as a drained one) until its
// ejection ends: Base the first time, doubled for each ejection in a row up
// to Max, so a replica that stays dead costs one failed attempt per
// ejection. The endpoint then takes requests again; the next failure ejects
// it for longer, the next success resets the doubling. The capacity
// watcher's health (drained) is separate: a scrape neither lifts an
// ejection nor is lifted by one.
//
// The last endpoint of a pool that is neither drained nor ejected is never
// ejected: requests then fail (and the host's retry finds nothing better)
// rather than wait in the queue for a replica to come back. A pool of one
// endpoint is never ejected.

// Ejection configures outcome-based ejection for a pool's endpoints.
type Ejection struct {
	// Base is the first ejection's length; 0 means DefaultEjectionBase,
	// negative turns ejection off.
	Base time.Duration
	// Max bounds the doubled length; 0 means max(Base, DefaultEjectionMax).
	Max time.Duration
	// Burst is how many failures in a row eject an endpoint; 0 means
	// DefaultEjectionBurst.
	Burst int
}

// Defaults of Ejection.
const (
	DefaultEjectionBase  = 2 * time.Second
	DefaultEjectionMax   = 30 * time.Second
	DefaultEjectionBurst = 5
)

func (e Ejection) withDefaults() Ejection {
	if e.Base == 0 {
		e.Base = DefaultEjectionBase
	}
	if e.Max == 0 {
		e.Max = max(e.Base, DefaultEjectionMax)
	}
	if e.Burst == 0 {
		e.Burst = DefaultEjectionBurst
	}
	return e
}

func validateEjection(path string, e Ejection, bad func(string, ...any)) {
	if e.Max < 0 {
		bad("%s.ejection.max: %v must not be negative", path, e.Max)
	}
	if e.Base > 0 && e.Max > 0 && e.Max < e.Base {
		bad("%s.ejection.max: %v must be at least ejection.base %v", path, e.Max, e.Base)
	}
	if e.Burst < 0 {
		bad("%s.ejection.burst: %d must not be negative", path, e.Burst)
	}
}

// ejectState is an endpoint's ejection bookkeeping (guarded as the rest of
// the Machine: by its caller).
type ejectState struct {
	until   time.Time // zero: not ejected
	streak  int       // failures in a row
	row     int       // ejections in a row (the doubling)
	ejected uint64    // ejections so far
}

// out reports whether the picker must leave ep out: drained by its health
// or ejected.
func (ep *endpoint) out() bool { return ep.drained || !ep.eject.until.IsZero() }

// endpointOutcome books how a request bound to e.ep ended.
func (m *Machine) endpointOutcome(now time.Time, p *pool, e *entry, o Outcome) {
	ep := e.ep
	if ep == nil {
		return
	}
	st := &ep.eject
	switch {
	case o == Unreachable:
		m.ejectEndpoint(now, p, ep)
	case o == Failed:
		st.streak++
		if st.streak >= p.ejection.Burst {
			m.ejectEndpoint(now, p, ep)
		}
	case o == Cancelled || o == Preempted:
		// Says nothing about the endpoint.
	default:
		st.streak, st.row = 0, 0
	}
}

// ejectEndpoint ejects ep unless ejection is off, ep is ejected already,
// or no other endpoint of p would be left to admit into.
func (m *Machine) ejectEndpoint(now time.Time, p *pool, ep *endpoint) {
	cfg := p.ejection
	if cfg.Base < 0 || len(p.endpoints) < 2 || !ep.eject.until.IsZero() {
		return
	}
	others := false
	for _, o := range p.endpoints {
		if o != ep && !o.out() {
			others = true
			break
		}
	}
	if !others {
		return
	}
	d := cfg.Base
	for i := 0; i < ep.eject.row && d < cfg.Max; i++ {
		d *= 2
	}
	ep.eject.until = now.Add(min(d, cfg.Max))
	ep.eject.row++
	ep.eject.streak = 0
	ep.eject.ejected++
}

// readmitEjected ends the ejections of p's endpoints that are over at now
// and asks for a wake-up when the next one ends.
func (m *Machine) readmitEjected(now time.Time, p *pool, d *Decisions) {
	for _, ep := range p.endpoints {
		u := ep.eject.until
		if u.IsZero() {
			continue
		}
		if !u.After(now) {
			ep.eject.until = time.Time{}
			continue
		}
		d.wakeAt(u)
	}
}
