package framed

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A closing frame is the service's last word on a session it ends for a
// reason (a refused identity, a limit, a protocol violation): its length
// word has the top bit set (closingFrame | n, n ≤ MaxClosing), and its n
// bytes are a google.rpc.Status (code and message), what a gRPC session
// gets as its status. The client's Recv returns that status as its error,
// so a refusal reads the same on both transports.

// closingFrame is the length word's bit that marks a closing frame; no
// message frame comes near it (MaxFrame).
const closingFrame = 1 << 31

// MaxClosing bounds a closing frame's status.
const MaxClosing = 4096

// maxClosingMessage bounds the status message a closing frame carries (the
// rest of MaxClosing is the code and the encoding).
const maxClosingMessage = MaxClosing - 64

// lingerTimeout bounds how long CloseWith waits for the client to close
// after its closing frame (and the write of the frame itself).
const lingerTimeout = time.Second

// closingStatus is the error a closing frame's bytes carry: a gRPC status
// error, or io.EOF for a status of OK (an end without an error).
func closingStatus(b []byte) error {
	var st spb.Status
	if err := proto.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("%w: closing frame of %d bytes is not a google.rpc.Status: %w", ErrProtocol, len(b), err)
	}
	if codes.Code(st.GetCode()) == codes.OK {
		return io.EOF
	}
	return status.ErrorProto(&st)
}

// closingPayload is err's closing frame body: its gRPC status code (Unknown
// for an error without one) and message, cut to maxClosingMessage bytes of
// valid UTF-8.
func closingPayload(err error) []byte {
	st := status.Convert(err)
	msg := st.Message()
	if len(msg) > maxClosingMessage {
		msg = msg[:maxClosingMessage]
	}
	msg = strings.ToValidUTF8(msg, "?")
	code := st.Code()
	if code == codes.OK {
		code = codes.Unknown
	}
	b, merr := proto.Marshal(&spb.Status{Code: int32(code), Message: msg})
	if merr != nil { // cannot happen: valid UTF-8, no details
		b, _ = proto.Marshal(&spb.Status{Code: int32(code)})
	}
	return b
}

// CloseWith ends the session with err (nil: Close): the client gets a
// closing frame with err's gRPC status before the connection closes, so
// its Recv returns why (for example codes.Unauthenticated and the
// service's message). The close lingers: the write side is shut first and
// what the client still sends is read and dropped for up to a second, so
// that the client's unread bytes do not make the connection reset before
// the frame is read.
func (fc *Conn[In, Out]) CloseWith(err error) error {
	if err == nil {
		return fc.Close()
	}
	defer fc.Close()
	b := closingPayload(err)
	fc.sendMu.Lock()
	f := binary.BigEndian.AppendUint32(fc.out[:0], closingFrame|uint32(len(b)))
	f = append(f, b...)
	fc.out = f[:0]
	_ = fc.c.SetWriteDeadline(time.Now().Add(lingerTimeout))
	_, werr := fc.c.Write(f)
	if werr == nil {
		werr = closeWrite(fc.c)
	}
	fc.sendMu.Unlock()
	if werr != nil {
		return werr
	}
	_ = fc.c.SetReadDeadline(time.Now().Add(lingerTimeout))
	_, _ = io.Copy(io.Discard, io.LimitReader(fc.r, MaxFrame))
	return nil
}

// closeWrite shuts c's write side (over TLS, with its close_notify).
func closeWrite(c net.Conn) error {
	switch c := c.(type) {
	case *tls.Conn:
		return c.CloseWrite()
	case *net.TCPConn:
		return c.CloseWrite()
	}
	return nil
}
