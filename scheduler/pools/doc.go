// Package pools is the scheduler set of one process: one in-process
// scheduler.Scheduler per pool, reloadable pool by pool (Set), kept in step
// with a mesh config together with the capacity watchers that learn each
// pool's and endpoint's capacity from the engines' /metrics (MeshSet).
// `llmesh scheduler serve`, the embedded gateway and the Envoy filter's
// process all schedule through one, and Config is the one place a mesh
// config becomes scheduler config.
//
// Concurrency: Set's mu guards the pool slots: the current scheduler of
// each pool, the replaced ones still holding leases, their lease counts and
// the learned limits; upd serialises Update. Each scheduler guards its own
// state with its own mutex, taken after mu, never before. Requests waiting
// in a replaced scheduler move to the new one on the goroutines that are
// waiting (Admit's callers), one at a time: Update's caller hands out their
// turns (finishMove), each once the previous waiter's arrival signal fired
// (it has its place in the new queue, or gave up). MeshSet owns one
// goroutine per capacity watcher, started by Start, restarted by Apply and
// stopped (and waited for) by Close.
package pools
