// Package hostconformance holds the cross-host conformance table: the same
// requests go through the embedded gateway (gateway/) and through the Envoy
// host (filter/envoy driven by the fake SDK in filter/filtertest, Envoy's
// router played by the test) in front of the real simulated engine, and what
// each host recorded and what its client saw are compared field by field.
//
// The package has no code of its own: it is a test package that imports both
// hosts, which neither host's own tests may do without an import cycle or a
// dependency of one host on the other. It lives under internal/ because it
// runs in-process (the e2e/ tests drive real processes).
//
// A difference between the hosts is either declared in the table with its
// reason (intended, per the design) or marked "bug:" until it is fixed; a
// declaration that no longer differs fails the test, so the table shrinks as
// the hosts converge.
package hostconformance
