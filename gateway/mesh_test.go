package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestPassAcceptEncodingForwardsClientValue(t *testing.T) {
	got := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Accept-Encoding")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	defer up.Close()
	_, base := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL, PassAcceptEncoding: true}}})
	req := mustReq(context.Background(), base+"/v1/completions", `{"model":"m","prompt":"x"}`)
	req.Header.Set("Accept-Encoding", "br")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if s := <-got; s != "br" {
		t.Errorf("upstream Accept-Encoding = %q, want the client's br with PassAcceptEncoding", s)
	}
}
