// Package kvevents reads the KV-cache events an engine publishes about its
// prefix cache, in vLLM's wire format (vLLM's --kv-events-config with the
// zmq publisher), and turns them into the endpoint picker's exact view of
// which blocks each engine holds (prefixindex.Exact).
//
// # Wire format
//
// A publisher sends ZMQ PUB multipart messages of three frames: the topic,
// an 8-byte big-endian sequence number (0, 1, 2, … per publisher), and a
// msgpack payload: one KVEventBatch, {ts, events, data_parallel_rank}.
// Each event is a tagged union of
//
//	BlockStored{block_hashes, parent_block_hash, token_ids, block_size,
//	            lora_id, medium, lora_name, extra_keys, group_idx, …}
//	BlockRemoved{block_hashes, medium, group_idx}
//	AllBlocksCleared{}
//
// vLLM encodes these with msgspec. Releases before vLLM pull request 42892
// encode every struct as a positional array (array_like), the tag first in
// an event; later ones encode events as maps whose "type" key is the tag,
// and a batch as an array or a map depending on the release. Decode
// accepts all of these: the batch as an array or a map, each event as an
// array or a map, absent trailing or optional fields as null. Block hashes
// are integers (older releases) or bytes (sha256-based hashing); both are
// kept as a uint64 (bytes: their last 8, big endian), as other consumers of
// these events do. Encode writes what vLLM 0.26 sends: the batch as an
// array, each event as a map.
//
// # From engine hashes to llmesh's
//
// An engine's block hashes are opaque (a seeded sha256 in vLLM), so they
// cannot be compared with the hashes a proxy computes from a prompt. A
// BlockStored carries the token ids of the blocks it stores, though, and
// its parent's hash: a View keeps, per engine, a map from the engine's hash
// to llmesh's chained kvblock hash of the same block, computes each stored
// block's llmesh hash from its tokens after its parent's llmesh hash, and
// tells a Sink, keyed the same way as the approximate index.
//
// # Ownership
//
//   - A Publisher's goroutine (started by NewPublisher, ended by Close) owns
//     its PUB socket; Publish only queues, from one goroutine at a time
//     (the sim's engine loop), and the sequence counter is that caller's.
//   - A Subscriber's Run goroutine owns its socket and its View; the View
//     calls its Sink from that goroutine, so a Sink shared with other
//     goroutines locks (scheduler.LockedBlockSink takes the scheduler's
//     mutex). Stats are atomics, readable from anywhere.
//   - Decode, Encode and ParseConfig are pure.
package kvevents
