// Package gpu samples NVIDIA GPU telemetry through NVML (go-nvml) during a
// run: SM and memory utilization, memory used, power and clocks. Without a
// GPU, without the NVML library, or without permission, Start says why in a
// note ("no GPU telemetry: …") and nothing fails.
//
// A Sampler's goroutine owns the samples until Stop, which waits for it.
//
// NVML support is compiled in with the build tag nvml (make build sets it):
// go-nvml's cgo code takes a large share of a cold build and, with the
// C compiler's default flags, prints about 170 lines of deprecation
// warnings from nvml.h. Without the tag (a plain go run or go build) Start
// says so in its note and the binary needs no C compiler.
package gpu
