package epp

// Misuses counts the lifecycle calls s's streams made that their state
// refused (exchange.ExchangeConfig.Misuse).
func Misuses(s *Server) int64 { return s.misuses.Load() }

// PreemptedCount counts the requests s stopped after a preemption.
func PreemptedCount(s *Server) int64 { return s.preempted.Load() }
