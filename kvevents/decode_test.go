package kvevents

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// mp builds msgpack by hand, byte by byte, from the format's spec, so that
// the golden payloads below do not depend on the encoder under test.
type mp []byte

func (b mp) arr(n int) mp  { return append(b, 0x90|byte(n)) } // fixarray, n < 16
func (b mp) mapn(n int) mp { return append(b, 0x80|byte(n)) } // fixmap, n < 16
func (b mp) str(s string) mp {
	if len(s) < 32 {
		b = append(b, 0xa0|byte(len(s)))
	} else {
		b = append(b, 0xd9, byte(len(s)))
	}
	return append(b, s...)
}
func (b mp) null() mp { return append(b, 0xc0) }
func (b mp) u(v uint64) mp {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v < 256:
		return append(b, 0xcc, byte(v))
	case v < 1<<16:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v < 1<<32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}
func (b mp) f64(v float64) mp {
	return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(v))
}
func (b mp) bin(v []byte) mp { return append(append(b, 0xc4, byte(len(v))), v...) }
func (b mp) uints(vs ...uint64) mp {
	b = append(b, 0xdc, byte(len(vs)>>8), byte(len(vs))) // array16
	for _, v := range vs {
		b = b.u(v)
	}
	return b
}

// legacyGolden is a batch as vLLM encoded it before pull request 42892
// (every struct array_like): [ts, [[tag, fields…], …], data_parallel_rank],
// BlockStored with its fields up to medium, block size 2.
const legacyGolden = "93" + // batch: array of 3
	"cb3ff8000000000000" + // ts 1.5
	"93" + // events: array of 3
	"97" + "ab426c6f636b53746f726564" + // ["BlockStored",
	"920102" + // block_hashes [1, 2]
	"c0" + // parent_block_hash null
	"9401020304" + // token_ids [1, 2, 3, 4]
	"02" + // block_size 2
	"c0" + // lora_id null
	"a3475055" + // medium "GPU"]
	"93" + "ac426c6f636b52656d6f766564" + "9101" + "a3475055" + // ["BlockRemoved", [1], "GPU"]
	"91" + "b0416c6c426c6f636b73436c6561726564" + // ["AllBlocksCleared"]
	"00" // data_parallel_rank 0

func TestDecodeLegacyArrayGolden(t *testing.T) {
	raw, err := hex.DecodeString(legacyGolden)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := Batch{TS: 1.5, DPRank: 0, Events: []Event{
		{Kind: BlockStored, Hashes: []uint64{1, 2}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2, Medium: "GPU", Group: -1},
		{Kind: BlockRemoved, Hashes: []uint64{1}, Medium: "GPU", Group: -1},
		{Kind: AllBlocksCleared, Group: -1},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
}

// mapCapture is the shape vLLM 0.26 publishes (events as maps tagged by
// "type", the batch an array), with every field its BlockStored writes,
// as a real engine's capture shows it.
func mapCapture() []byte {
	toks := []uint64{151644, 872, 198, 9064, 374, 279, 6722, 315, 5616, 30, 151645, 198, 151644, 77091, 198, 151667}
	b := mp{}.arr(3).f64(1789095808.8378847).arr(2)
	b = b.mapn(12).str("type").str("BlockStored").
		str("block_hashes").arr(1).u(15760518052499183552).
		str("parent_block_hash").null().
		str("token_ids").uints(toks...).
		str("block_size").u(16).
		str("lora_id").null().
		str("medium").str("GPU").
		str("lora_name").null().
		str("extra_keys").arr(1).null().
		str("group_idx").u(0).
		str("kv_cache_spec_kind").str("full_attention").
		str("kv_cache_spec_sliding_window").null()
	b = b.mapn(4).str("type").str("BlockRemoved").
		str("block_hashes").arr(1).bin([]byte{9, 8, 7, 6, 5, 4, 3, 2, 1}).
		str("medium").str("GPU").str("group_idx").u(0)
	return b.u(0)
}

func TestDecodeMapEvents(t *testing.T) {
	got, err := Decode(mapCapture())
	if err != nil {
		t.Fatal(err)
	}
	toks := []uint32{151644, 872, 198, 9064, 374, 279, 6722, 315, 5616, 30, 151645, 198, 151644, 77091, 198, 151667}
	want := Batch{TS: 1789095808.8378847, DPRank: 0, Events: []Event{
		{Kind: BlockStored, Hashes: []uint64{15760518052499183552}, Tokens: toks, BlockSize: 16, Medium: "GPU", Group: 0},
		// A bytes hash keeps its last 8 bytes, big endian.
		{Kind: BlockRemoved, Hashes: []uint64{0x0807060504030201}, Medium: "GPU", Group: 0},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
}

func TestDecodeMapBatchAndAdapters(t *testing.T) {
	b := mp{}.mapn(3).str("events").arr(1).
		mapn(6).str("block_hashes").arr(1).u(5).str("token_ids").arr(2).u(1).u(2).
		str("block_size").u(2).str("type").str("BlockStored").
		str("parent_block_hash").u(4).str("lora_name").str("sql-adapter").
		str("ts").f64(2).str("data_parallel_rank").null()
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Batch{TS: 2, DPRank: -1, Events: []Event{
		{Kind: BlockStored, Hashes: []uint64{5}, Parent: 4, HasParent: true, Tokens: []uint32{1, 2}, BlockSize: 2, Adapted: true, Group: -1},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
}

func TestEncodeIsWhatVLLMSends(t *testing.T) {
	b := Batch{TS: 3.25, DPRank: 0, Events: []Event{
		{Kind: BlockStored, Hashes: []uint64{300, 1 << 40}, Parent: 7, HasParent: true, Tokens: []uint32{1, 2, 70000, 4}, BlockSize: 2, Medium: "GPU"},
		{Kind: BlockRemoved, Hashes: []uint64{300}, Medium: "GPU"},
		{Kind: AllBlocksCleared},
	}}
	want := mp{}.arr(3).f64(3.25).arr(3).
		mapn(8).str("type").str("BlockStored").str("block_hashes").arr(2).u(300).u(1 << 40).
		str("parent_block_hash").u(7).str("token_ids").arr(4).u(1).u(2).u(70000).u(4).
		str("block_size").u(2).str("lora_id").null().str("medium").str("GPU").str("lora_name").null().
		mapn(3).str("type").str("BlockRemoved").str("block_hashes").arr(1).u(300).str("medium").str("GPU").
		mapn(1).str("type").str("AllBlocksCleared").
		u(0)
	got := Encode(b)
	if d := cmp.Diff([]byte(want), got); d != "" {
		t.Errorf("encoding (-want +got)\n%s", d)
	}
	back, err := Decode(got)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b.Events {
		b.Events[i].Group = -1
	}
	if d := cmp.Diff(b, back); d != "" {
		t.Errorf("round trip (-want +got)\n%s", d)
	}
}

func TestDecodeErrors(t *testing.T) {
	stored := func(f func(mp) mp) []byte {
		return f(mp{}.arr(2).f64(1).arr(1))
	}
	for _, c := range []struct {
		name, want string
		raw        []byte
	}{
		{"empty", "batch", nil},
		{"not a container", "batch: want an array or a map", mp{}.u(5)},
		{"no events", "want ts and events", mp{}.arr(1).f64(1)},
		{"bad ts", "ts:", mp{}.arr(2).str("x").arr(0)},
		{"unknown tag", `events[0]: unknown tag "BlockMoved"`, stored(func(b mp) mp { return b.arr(1).str("BlockMoved") })},
		{"no tag", `events[0]: no "type" tag`, stored(func(b mp) mp { return b.mapn(1).str("block_size").u(2) })},
		{"empty event", "events[0]: empty", stored(func(b mp) mp { return b.arr(0) })},
		{"negative token", "events[0].token_ids[1]: -3 is not a token id", stored(func(b mp) mp {
			return b.arr(5).str("BlockStored").arr(1).u(1).null().arr(2).u(1).append(0xfd).u(2)
		})},
		{"token count", "events[0].token_ids: 3 tokens for 1 blocks of 2", stored(func(b mp) mp {
			return b.arr(5).str("BlockStored").arr(1).u(1).null().arr(3).u(1).u(2).u(3).u(2)
		})},
		{"block size", "events[0].block_size: 0 must be in", stored(func(b mp) mp {
			return b.arr(5).str("BlockStored").arr(0).null().arr(0).u(0)
		})},
		{"missing fields", "BlockStored needs block_hashes, token_ids and block_size", stored(func(b mp) mp {
			return b.arr(3).str("BlockStored").arr(0).null()
		})},
		{"null hash", "events[0].block_hashes[0]: null", stored(func(b mp) mp { return b.arr(2).str("BlockRemoved").arr(1).null() })},
		{"float hash", "events[0].block_hashes[0]: want an integer or bytes", stored(func(b mp) mp { return b.arr(2).str("BlockRemoved").arr(1).f64(1) })},
		{"trailing bytes", "1 bytes after the batch", append(mp{}.arr(2).f64(1).arr(0), 0)},
		{"huge length", "events", mp{}.arr(2).f64(1).append(0xdd, 0xff, 0xff, 0xff, 0xff)},
	} {
		_, err := Decode(c.raw)
		if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want ErrMalformed mentioning %q", c.name, err, c.want)
		}
	}
}

func (b mp) append(bs ...byte) mp { return append(b, bs...) }

func FuzzDecode(f *testing.F) {
	raw, _ := hex.DecodeString(legacyGolden)
	f.Add(raw)
	f.Add([]byte(mapCapture()))
	f.Add(Encode(Batch{TS: 1, DPRank: 2, Events: []Event{{Kind: BlockStored, Hashes: []uint64{1}, Tokens: []uint32{5, 6}, BlockSize: 2}}}))
	f.Add([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90})
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := Decode(raw)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		for i, ev := range b.Events {
			if ev.Kind == BlockStored && len(ev.Tokens) != len(ev.Hashes)*ev.BlockSize {
				t.Fatalf("event %d: %d tokens for %d blocks of %d", i, len(ev.Tokens), len(ev.Hashes), ev.BlockSize)
			}
		}
		// What Encode writes of it decodes to the same events.
		back, err := Decode(Encode(b))
		if err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if len(back.Events) != len(b.Events) {
			t.Fatalf("%d events, re-encoded %d", len(b.Events), len(back.Events))
		}
		for i := range b.Events {
			x, y := b.Events[i], back.Events[i]
			if x.Kind != y.Kind || !cmp.Equal(x.Hashes, y.Hashes) || !cmp.Equal(x.Tokens, y.Tokens) || x.HasParent != y.HasParent || x.Parent != y.Parent {
				t.Fatalf("event %d changed on re-encoding: %+v, %+v", i, x, y)
			}
		}
	})
}
