package live

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseVector(t *testing.T) {
	got, err := ParseVector([]byte(`{"status":"success","data":{"resultType":"vector","result":[
		{"metric":{"llmesh_class":"a"},"value":[1700000000.5,"3"]},
		{"metric":{},"value":[1700000000,"NaN"]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Labels["llmesh_class"] != "a" || got[0].Value != 3 || !math.IsNaN(got[1].Value) {
		t.Fatalf("got %+v", got)
	}
}

func TestParseMatrix(t *testing.T) {
	got, err := ParseMatrix([]byte(`{"status":"success","data":{"resultType":"matrix","result":[
		{"metric":{"llmesh_class":"a"},"values":[[1700000000,"1"],[1700003600,"0.5"]]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Series{{Labels: map[string]string{"llmesh_class": "a"}, Points: []Point{
		{time.Unix(1700000000, 0).UTC(), 1}, {time.Unix(1700003600, 0).UTC(), 0.5}}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`<html>`, "not a Prometheus API answer"},
		{`{"status":"error","errorType":"bad_data","error":"parse error at char 3"}`, "bad_data: parse error at char 3"},
		{`{"status":"success","data":{"resultType":"matrix","result":[]}}`, `data.resultType: "matrix", want "vector"`},
		{`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1]}]}}`, "data.result[0].value: 1 elements"},
		{`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,2]}]}}`, "data.result[0].value: value 2 is not a string"},
		{`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":["x","2"]}]}}`, `data.result[0].value: time "x"`},
		{`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"two"]}]}}`, `data.result[0].value: value "two"`},
	} {
		_, err := ParseVector([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseVector(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	if _, err := ParseVector([]byte(`{"status":"error","errorType":"timeout","error":"x"}`)); !errors.Is(err, ErrAPI) {
		t.Errorf("API error %v does not wrap ErrAPI", err)
	}
}

// TestClient runs the client against a loopback server that answers as
// Prometheus does: the query and time as form values, errors in the JSON
// envelope with a 4xx status.
func TestClient(t *testing.T) {
	var gotQuery, gotTime string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotQuery, gotTime = r.FormValue("query"), r.FormValue("time")
		switch r.URL.Path {
		case "/api/v1/query":
			if gotQuery == "bad(" {
				w.WriteHeader(http.StatusBadRequest)
				w.Write([]byte(`{"status":"error","errorType":"bad_data","error":"unexpected end of input"}`))
				return
			}
			w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"b"},"value":[5,"7"]}]}}`))
		case "/api/v1/query_range":
			if r.FormValue("step") != "3600" || r.FormValue("start") != "100.000" {
				w.WriteHeader(http.StatusBadRequest)
				w.Write([]byte(`{"status":"error","errorType":"bad_data","error":"bad step"}`))
				return
			}
			w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[]}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := &Client{Base: srv.URL + "/"}
	ctx := context.Background()
	got, err := c.Query(ctx, `sum(x{a="b"})`, time.Unix(1700000000, 250e6))
	if err != nil || len(got) != 1 || got[0].Value != 7 {
		t.Fatalf("Query = %+v, %v", got, err)
	}
	if gotQuery != `sum(x{a="b"})` || gotTime != "1700000000.250" {
		t.Errorf("sent query %q time %q", gotQuery, gotTime)
	}
	_, err = c.Query(ctx, "bad(", time.Unix(1, 0))
	if err == nil || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), "unexpected end of input") || !errors.Is(err, ErrAPI) {
		t.Errorf("bad query error: %v", err)
	}
	if _, err := c.QueryRange(ctx, "x", time.Unix(100, 0), time.Unix(7300, 0), time.Hour); err != nil {
		t.Errorf("QueryRange: %v", err)
	}
	if _, err := (&Client{Base: srv.URL + "/nope"}).Query(ctx, "x", time.Unix(1, 0)); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("404: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"b"},"value":[1.5,"+Inf"]}]}}`))
	f.Add([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"],[2,"-2e3"]]}]}}`))
	f.Add([]byte(`{"status":"error","errorType":"bad_data","error":"x"}`))
	f.Add([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"value":[1e300,"1"]}]}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		vs, verr := ParseVector(in)
		if verr == nil && vs == nil {
			t.Fatal("nil vector without an error")
		}
		ms, merr := ParseMatrix(in)
		if merr == nil && ms == nil {
			t.Fatal("nil matrix without an error")
		}
		if verr == nil && merr == nil {
			t.Fatal("one answer parsed as both a vector and a matrix")
		}
	})
}
