package kvevents

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"
)

// Encode writes b as vLLM 0.26 publishes a KVEventBatch: the batch as the
// array [ts, events, data_parallel_rank] (the rank omitted when negative),
// each event as a map tagged by "type", with the fields vLLM always writes
// (BlockStored: block_hashes, parent_block_hash, token_ids, block_size,
// lora_id, medium, lora_name; BlockRemoved: block_hashes, medium). Hashes
// are written as unsigned integers. Events that are Adapted or carry a
// Group are written without those details: the engine model has neither.
func Encode(b Batch) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	e.UseCompactInts(true) // as msgspec writes integers
	// Writes to a bytes.Buffer cannot fail.
	n := 3
	if b.DPRank < 0 {
		n = 2
	}
	_ = e.EncodeArrayLen(n)
	_ = e.EncodeFloat64(b.TS)
	_ = e.EncodeArrayLen(len(b.Events))
	for i := range b.Events {
		encodeEvent(e, &b.Events[i])
	}
	if n == 3 {
		_ = e.EncodeInt(int64(b.DPRank))
	}
	return buf.Bytes()
}

func encodeEvent(e *msgpack.Encoder, ev *Event) {
	medium := func() {
		_ = e.EncodeString("medium")
		if ev.Medium == "" {
			_ = e.EncodeNil()
		} else {
			_ = e.EncodeString(ev.Medium)
		}
	}
	hashes := func() {
		_ = e.EncodeString("block_hashes")
		_ = e.EncodeArrayLen(len(ev.Hashes))
		for _, h := range ev.Hashes {
			_ = e.EncodeUint(h)
		}
	}
	switch ev.Kind {
	case BlockStored:
		_ = e.EncodeMapLen(8)
		_ = e.EncodeString("type")
		_ = e.EncodeString("BlockStored")
		hashes()
		_ = e.EncodeString("parent_block_hash")
		if ev.HasParent {
			_ = e.EncodeUint(ev.Parent)
		} else {
			_ = e.EncodeNil()
		}
		_ = e.EncodeString("token_ids")
		_ = e.EncodeArrayLen(len(ev.Tokens))
		for _, t := range ev.Tokens {
			_ = e.EncodeUint(uint64(t))
		}
		_ = e.EncodeString("block_size")
		_ = e.EncodeInt(int64(ev.BlockSize))
		_ = e.EncodeString("lora_id")
		_ = e.EncodeNil()
		medium()
		_ = e.EncodeString("lora_name")
		_ = e.EncodeNil()
	case BlockRemoved:
		_ = e.EncodeMapLen(3)
		_ = e.EncodeString("type")
		_ = e.EncodeString("BlockRemoved")
		hashes()
		medium()
	default:
		_ = e.EncodeMapLen(1)
		_ = e.EncodeString("type")
		_ = e.EncodeString("AllBlocksCleared")
	}
}
