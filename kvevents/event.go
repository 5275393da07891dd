package kvevents

// Kind is an event's tag.
type Kind uint8

// Event kinds, by their tags on the wire.
const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

func (k Kind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// Event is one decoded event. Fields that its kind does not carry are zero.
type Event struct {
	Kind Kind
	// Hashes are the engine's block hashes (BlockStored, BlockRemoved),
	// first block first.
	Hashes []uint64
	// Parent is the engine hash of the block before the first stored one;
	// valid when HasParent (a stored run that starts a sequence has none).
	Parent    uint64
	HasParent bool
	// Tokens are the token ids of the stored blocks, BlockSize per block
	// (BlockStored).
	Tokens    []uint32
	BlockSize int
	// Medium is where the blocks live ("GPU", "CPU", …); empty when the
	// publisher did not say, which vLLM's GPU cache does in older releases.
	Medium string
	// Adapted reports a block identity that depends on more than its token
	// ids: a LoRA adapter (lora_id, lora_name) or extra keys (multimodal
	// inputs, a cache salt).
	Adapted bool
	// Group is the KV cache group (hybrid models have several); -1 when
	// absent, which means the only group.
	Group int
}

// Batch is one published message's payload.
type Batch struct {
	TS     float64
	Events []Event
	// DPRank is the data-parallel rank of the publishing engine; -1 when
	// absent.
	DPRank int
}
