// Package compare judges paired A/B measurements: each metric is measured once
// per independent unit (a seed in virtual time, a repeat in real time) on both
// arms, and the comparison is made on the per-unit differences, never on
// requests pooled over units.
//
// Each metric gets a Student-t interval of the mean paired difference, a
// two-sided p-value and the minimum detectable effect at 80% power. Primary
// metrics (one per class, declared by the workload or mesh) are judged at the
// chosen alpha; the others are reported and Holm-corrected as one family. A
// degenerate interval (fewer than two units, or differences with zero spread
// that are not all zero) is never significant. Gates ("class.metric>+5%")
// turn the judgement into a CI decision.
//
// The package holds no state and starts no goroutines.
package compare
