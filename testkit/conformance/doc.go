// Package conformance holds the cross-host conformance table: the same
// requests go through the embedded gateway (gateway/) and through an Envoy
// host in front of the real simulated engine, and what each host recorded
// and what its client saw are compared field by field. There are two Envoy
// hosts, Envoy's router played by the test in both: envoyfilter driven by
// the fake SDK in testkit/fakesdk (TestHostConformance), and the real
// filter .so (recso: the product filter with recorder taps) under the C++
// host of testkit/envoyhost in its driven mode (TestHostConformanceRealSDK).
// The third host is the endpoint picker (epp/, `llmesh epp`), driven by
// epp/epptest as Envoy's ext_proc filter in full duplex mode, the test
// again playing Envoy's router (TestHostConformanceEPP); its differences
// are declared on their own (tcase.epp), since the picker is not an Envoy
// filter.
//
// The package has no code of its own (recso is the test build of the .so):
// it is a test package that imports both hosts, which neither host's own
// tests may do without an import cycle or a dependency of one host on the
// other. It lives under internal/ because it drives the hosts' libraries
// (the e2e/ tests drive the products' processes).
//
// A difference between the hosts is either declared in the table with its
// reason (intended, per the design) or marked "bug:" until it is fixed, for
// every Envoy host or for one of them; a declaration that no longer differs
// fails the test, so the table shrinks as the hosts converge.
package conformance
