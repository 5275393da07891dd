// Package grpcframe builds the gRPC length-prefixed frames that llmesh's
// tests feed to the hosts and the core: a one-byte flag (0 plain, 1
// compressed, 0x80 a gRPC-Web trailer frame), the payload's length as a
// big-endian uint32, then the payload. Only tests import it.
package grpcframe

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"

	"google.golang.org/protobuf/proto"
)

// Raw is one frame of payload with flag.
func Raw(flag byte, payload []byte) []byte {
	out := make([]byte, 5, 5+len(payload))
	out[0] = flag
	binary.BigEndian.PutUint32(out[1:], uint32(len(payload)))
	return append(out, payload...)
}

// Message is m marshalled into one uncompressed frame. It panics when m
// does not marshal: a test's own message is always valid.
func Message(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic("grpcframe: " + err.Error())
	}
	return Raw(0, b)
}

// Gzip is payload gzip-compressed into one frame with the compressed flag.
func Gzip(payload []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(payload) // a bytes.Buffer does not fail
	_ = zw.Close()
	return Raw(1, buf.Bytes())
}
