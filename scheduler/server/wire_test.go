package server

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/schedulerv1"
)

func sessionRequest(leases ...*schedulerv1.LeaseRequest) *schedulerv1.SessionRequest {
	return &schedulerv1.SessionRequest{Leases: leases}
}

var wireSamples = []*schedulerv1.SessionRequest{
	sessionRequest(),
	sessionRequest(&schedulerv1.LeaseRequest{Lease: 7, Msg: &schedulerv1.LeaseRequest_Start{Start: &schedulerv1.Start{
		Id: "req-1", Pool: "gpu", Class: "premium", PromptTokens: 1000, MaxTokens: 1 << 31, AgeNs: 12345, Requeue: true, Affinity: "session-3"}}}),
	sessionRequest(
		&schedulerv1.LeaseRequest{Lease: 1, Msg: &schedulerv1.LeaseRequest_Progress{Progress: &schedulerv1.Progress{FirstToken: true, Tokens: 9}}},
		&schedulerv1.LeaseRequest{Lease: 1, Msg: &schedulerv1.LeaseRequest_Done{Done: &schedulerv1.Done{Outcome: schedulerv1.Outcome_OUTCOME_PREEMPTED}}},
		&schedulerv1.LeaseRequest{Lease: 2, Msg: &schedulerv1.LeaseRequest_Start{Start: &schedulerv1.Start{Pool: "gpu", Class: "bulk", AgeNs: -1}}},
		&schedulerv1.LeaseRequest{Lease: 3},
		&schedulerv1.LeaseRequest{Lease: 4, Msg: &schedulerv1.LeaseRequest_Done{Done: &schedulerv1.Done{}}},
	),
	sessionRequest(&schedulerv1.LeaseRequest{Lease: 5, Msg: &schedulerv1.LeaseRequest_Start{Start: &schedulerv1.Start{
		Pool: "gpu", Blocks: []uint64{1, 1 << 63, 0xdeadbeef, 7}}}}),
}

// decodeProto is what gRPC's codec makes of b, as leaseMsgs.
func decodeProto(b []byte) ([]leaseMsg, error) {
	var m schedulerv1.SessionRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	var out []leaseMsg
	for _, r := range m.GetLeases() {
		out = append(out, leaseMsgOf(r))
	}
	return out, nil
}

func TestDecodeSessionRequest(t *testing.T) {
	var msgs []leaseMsg
	n := names{}
	for _, m := range wireSamples {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		// Decoded into the same, reused slice each time.
		msgs, err = decodeSessionRequest(b, msgs, n)
		if err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		want, _ := decodeProto(b)
		if diff := cmp.Diff(want, msgs, cmp.AllowUnexported(leaseMsg{}, startMsg{})); diff != "" {
			t.Errorf("%v (-want +got):\n%s", m, diff)
		}
	}
	if len(n) != 3 { // the empty name is not interned
		t.Errorf("interned %v, want gpu, premium, bulk and nothing else", n)
	}
}

// The oneof's last field wins; a repeated Start merges; unknown fields
// and known ones of another wire type are skipped; bad strings and
// truncated messages are errors.
func TestDecodeSessionRequestEdges(t *testing.T) {
	lease := func(fields ...[]byte) []byte {
		var b []byte
		for _, f := range fields {
			b = append(b, f...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), b)
	}
	field := func(num protowire.Number, body []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), body)
	}
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	start := func(pool string) []byte { return field(2, field(2, []byte(pool))) }
	for name, b := range map[string][]byte{
		"oneof last wins":    lease(varint(1, 5), start("gpu"), field(4, varint(1, 2))),
		"start merges":       lease(varint(1, 5), field(2, varint(4, 10)), field(2, varint(5, 20))),
		"unknown fields":     append(lease(varint(1, 5), varint(99, 1), start("gpu")), varint(7, 3)...),
		"wrong wire type":    lease(field(1, []byte("x")), varint(2, 1), field(2, field(4, []byte("y")))),
		"bad utf-8":          lease(start("\xff")),
		"truncated":          lease(start("gpu"))[:5],
		"field number zero":  {0x00, 0x01},
		"group":              lease(protowire.AppendTag(nil, 9, protowire.StartGroupType), protowire.AppendTag(nil, 9, protowire.EndGroupType)),
		"wrong group end":    lease(protowire.AppendTag(nil, 9, protowire.StartGroupType), protowire.AppendTag(nil, 10, protowire.EndGroupType)),
		"big varint uint32s": lease(field(3, varint(2, 1<<40+3))),
		"blocks unpacked":    lease(field(2, append(varint(9, 5), varint(9, 1<<63)...))),
		"blocks mixed":       lease(field(2, append(append(varint(9, 5), field(9, protowire.AppendVarint([]byte{3}, 4))...), varint(9, 6)...))),
		"blocks empty":       lease(field(2, field(9, nil))),
		"blocks merge":       lease(field(2, field(9, []byte{1, 2})), field(2, field(9, []byte{3}))),
		"blocks truncated":   lease(field(2, field(9, []byte{1, 0x80}))),
		"blocks fixed64":     lease(field(2, protowire.AppendFixed64(protowire.AppendTag(nil, 9, protowire.Fixed64Type), 7))),
	} {
		want, werr := decodeProto(b)
		got, err := decodeSessionRequest(b, nil, names{})
		if (werr == nil) != (err == nil) {
			t.Errorf("%s: error %v, proto's %v", name, err, werr)
			continue
		}
		if err == nil {
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(leaseMsg{}, startMsg{})); diff != "" {
				t.Errorf("%s (-proto +ours):\n%s", name, diff)
			}
		}
	}
}

// The decoder agrees with protobuf's on any input: the same messages when
// protobuf accepts it, an error when protobuf refuses it.
func FuzzDecodeSessionRequest(f *testing.F) {
	for _, m := range wireSamples {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, werr := decodeProto(b)
		got, err := decodeSessionRequest(b, nil, names{})
		if (werr == nil) != (err == nil) {
			t.Fatalf("%x: error %v, proto's %v", b, err, werr)
		}
		if err == nil {
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(leaseMsg{}, startMsg{})); diff != "" {
				t.Fatalf("%x (-proto +ours):\n%s", b, diff)
			}
		}
	})
}
