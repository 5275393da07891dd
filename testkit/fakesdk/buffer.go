package fakesdk

import (
	"strconv"
	"sync"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
)

// Buffer is a fake of api.BufferInstance. Like the SDK, WriteUint16/32/64
// append decimal text, not binary.
type Buffer struct {
	mu    sync.Mutex
	b     []byte
	phase *phase
}

var _ api.BufferInstance = (*Buffer)(nil)

// NewBuffer returns a buffer holding a copy of data.
func NewBuffer(data []byte) *Buffer { return &Buffer{b: append([]byte(nil), data...)} }

// Reuse makes b hold data again and valid for a new phase, so benchmarks can
// drive many chunks without allocating. It must not be used while a filter
// may still hold b.
func (b *Buffer) Reuse(data []byte) {
	b.mu.Lock()
	b.b = append(b.b[:0], data...)
	b.phase = nil
	b.mu.Unlock()
}

// Peek returns a copy of the contents without a phase check, for tests.
func (b *Buffer) Peek() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.b...)
}

func (b *Buffer) use() { b.phase.check("buffer") }

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.use()
	b.mu.Lock()
	b.b = append(b.b, p...)
	b.mu.Unlock()
	return len(p), nil
}

// WriteString appends s.
func (b *Buffer) WriteString(s string) (int, error) { return b.Write([]byte(s)) }

// WriteByte appends p.
func (b *Buffer) WriteByte(p byte) error {
	_, err := b.Write([]byte{p})
	return err
}

// WriteUint16 appends p in decimal, as the SDK does.
func (b *Buffer) WriteUint16(p uint16) error { return b.writeDecimal(uint64(p)) }

// WriteUint32 appends p in decimal, as the SDK does.
func (b *Buffer) WriteUint32(p uint32) error { return b.writeDecimal(uint64(p)) }

// WriteUint64 appends p in decimal, as the SDK does.
func (b *Buffer) WriteUint64(p uint64) error { return b.writeDecimal(p) }

func (b *Buffer) writeDecimal(p uint64) error {
	_, err := b.WriteString(strconv.FormatUint(p, 10))
	return err
}

// Bytes returns the contents without copying (do not modify).
func (b *Buffer) Bytes() []byte {
	b.use()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b
}

// Drain removes the first offset bytes.
func (b *Buffer) Drain(offset int) {
	b.use()
	b.mu.Lock()
	defer b.mu.Unlock()
	if offset > len(b.b) {
		offset = len(b.b)
	}
	b.b = append(b.b[:0], b.b[offset:]...)
}

// Len returns the length of the contents.
func (b *Buffer) Len() int {
	b.use()
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.b)
}

// Reset empties the buffer.
func (b *Buffer) Reset() {
	b.use()
	b.mu.Lock()
	b.b = b.b[:0]
	b.mu.Unlock()
}

// String returns the contents as a string.
func (b *Buffer) String() string {
	b.use()
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b)
}

// Append appends data.
func (b *Buffer) Append(data []byte) error {
	_, err := b.Write(data)
	return err
}

// Set replaces the contents with data.
func (b *Buffer) Set(data []byte) error {
	b.use()
	b.mu.Lock()
	b.b = append(b.b[:0], data...)
	b.mu.Unlock()
	return nil
}

// SetString replaces the contents with s.
func (b *Buffer) SetString(s string) error { return b.Set([]byte(s)) }

// Prepend puts data before the contents.
func (b *Buffer) Prepend(data []byte) error {
	b.use()
	b.mu.Lock()
	b.b = append(append([]byte(nil), data...), b.b...)
	b.mu.Unlock()
	return nil
}

// PrependString puts s before the contents.
func (b *Buffer) PrependString(s string) error { return b.Prepend([]byte(s)) }

// AppendString appends s.
func (b *Buffer) AppendString(s string) error { return b.Append([]byte(s)) }
