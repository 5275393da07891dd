package framed

import (
	"bufio"
	"errors"
	"strings"
	"testing"
)

func TestPrefaceHeaders(t *testing.T) {
	for _, tc := range []struct {
		in, token string
		headers   bool
		err       bool
	}{
		{in: Preface, headers: false},
		{in: PrefaceHeaders + "\r\n", headers: true},
		{in: PrefaceHeaders + "authorization: Bearer s3cret\r\n\r\n", headers: true, token: "s3cret"},
		{in: PrefaceHeaders + "x-other: 1\r\nAuthorization:   bearer  tok \r\n\r\n", headers: true, token: "tok"},
		{in: PrefaceHeaders + "authorization: Basic abc\r\n\r\n", err: true},
		{in: PrefaceHeaders + "no colon\r\n\r\n", err: true},
		{in: PrefaceHeaders + "authorization: Bearer x\n\r\n", err: true},
		{in: PrefaceHeaders + strings.Repeat("a: b\r\n", maxHeaders+1) + "\r\n", err: true},
		{in: PrefaceHeaders + "a: " + strings.Repeat("b", maxHeaderLine) + "\r\n\r\n", err: true},
		{in: PrefaceHeaders + "authorization: Bearer x\r\n", err: true}, // ends inside the headers
		{in: "LLMESH-SESSION/3\r\n", err: true},
	} {
		r := bufio.NewReader(strings.NewReader(tc.in))
		h, err := readPrefaceVersion(r, true)
		var tok string
		if err == nil && h {
			tok, err = readHeaders(r)
		}
		if (err != nil) != tc.err {
			t.Errorf("%q: error %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("%q: %v does not wrap ErrProtocol", tc.in, err)
			}
			continue
		}
		if h != tc.headers || tok != tc.token {
			t.Errorf("%q: headers %v token %q, want %v %q", tc.in, h, tok, tc.headers, tc.token)
		}
	}
	// A client of the plain protocol is refused PrefaceHeaders where
	// headers are not allowed (the client's side reading the service's).
	if _, err := readPrefaceVersion(bufio.NewReader(strings.NewReader(PrefaceHeaders)), false); err == nil {
		t.Error("PrefaceHeaders accepted without headers allowed")
	}
}

// The preface and header reader never panics, never reads past its
// bounds, and returns a token only from a well-formed authorization line.
func FuzzPrefaceHeaders(f *testing.F) {
	f.Add([]byte(PrefaceHeaders + "authorization: Bearer s3cret\r\n\r\n"))
	f.Add([]byte(Preface + "\x00\x00\x00\x00"))
	f.Add([]byte(PrefaceHeaders + "a:b\r\nc: d\r\n\r\n"))
	f.Add([]byte(PrefaceHeaders + "authorization: Bearer\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(strings.NewReader(string(b)))
		h, err := readPrefaceVersion(r, true)
		if err != nil || !h {
			return
		}
		tok, err := readHeaders(r)
		if err != nil {
			return
		}
		if strings.ContainsAny(tok, " \r\n") {
			t.Fatalf("token %q holds whitespace", tok)
		}
		if tok != "" && !strings.Contains(strings.ToLower(string(b)), "authorization") {
			t.Fatalf("token %q without an authorization header", tok)
		}
	})
}
