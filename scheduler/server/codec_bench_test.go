package server

// benchCodec decodes and encodes BenchmarkSessionLease's messages as the
// service's gRPC server does (GRPCOptions).
var benchCodec = newCodec()
