package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// ErrMalformed is wrapped by every Decode error; the message names the
// field (events[2].token_ids[5]) and what was wrong with it.
var ErrMalformed = errors.New("kvevents: malformed event batch")

// MaxPayload bounds a payload Decode accepts, far above what one engine
// step stores (a 32K-token prefill is 2,048 blocks, about 180 KB).
const MaxPayload = 64 << 20

// Decode parses one KVEventBatch payload (package doc). Unknown event tags
// and unknown map keys are errors and skipped fields respectively: a tag
// this package does not know changes what an engine holds in ways it
// cannot follow, so the caller should treat the endpoint's view as stale.
func Decode(payload []byte) (Batch, error) {
	if len(payload) > MaxPayload {
		return Batch{}, fmt.Errorf("%w: %d bytes, at most %d", ErrMalformed, len(payload), MaxPayload)
	}
	r := bytes.NewReader(payload)
	d := &decoder{r: r, d: msgpack.NewDecoder(r)}
	b, err := d.batch()
	if err != nil {
		return Batch{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if r.Len() != 0 {
		return Batch{}, fmt.Errorf("%w: %d bytes after the batch", ErrMalformed, r.Len())
	}
	return b, nil
}

type decoder struct {
	r *bytes.Reader
	d *msgpack.Decoder
}

// capFor bounds a slice's preallocation by the bytes left, each element
// taking at least one; a null array (length -1) gets none.
func (d *decoder) capFor(n int) int { return max(0, min(n, d.r.Len())) }

func (d *decoder) isNil() (bool, error) {
	c, err := d.d.PeekCode()
	if err != nil {
		return false, err
	}
	if c == msgpcode.Nil {
		return true, d.d.DecodeNil()
	}
	return false, nil
}

// container reports whether the next value is a map (else an array) and
// its length.
func (d *decoder) container(field string) (isMap bool, n int, err error) {
	c, err := d.d.PeekCode()
	if err != nil {
		return false, 0, fmt.Errorf("%s: %w", field, err)
	}
	switch {
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err = d.d.DecodeMapLen()
		return true, n, wrap(field, err)
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err = d.d.DecodeArrayLen()
		return false, n, wrap(field, err)
	}
	return false, 0, fmt.Errorf("%s: want an array or a map, got msgpack code 0x%02x", field, c)
}

func wrap(field string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

func (d *decoder) batch() (Batch, error) {
	b := Batch{DPRank: -1}
	isMap, n, err := d.container("batch")
	if err != nil {
		return b, err
	}
	seen := [3]bool{}
	for i := range n {
		f := i
		if isMap {
			k, err := d.str()
			if err != nil {
				return b, fmt.Errorf("batch: key %d: %w", i, err)
			}
			switch k {
			case "ts":
				f = 0
			case "events":
				f = 1
			case "data_parallel_rank":
				f = 2
			default:
				f = -1
			}
		}
		switch f {
		case 0:
			if b.TS, err = d.d.DecodeFloat64(); err != nil {
				return b, fmt.Errorf("ts: %w", err)
			}
		case 1:
			if b.Events, err = d.events(); err != nil {
				return b, err
			}
		case 2:
			if null, err := d.isNil(); err != nil {
				return b, fmt.Errorf("data_parallel_rank: %w", err)
			} else if !null {
				r, err := d.d.DecodeInt64()
				if err != nil || r < 0 || r > math.MaxInt32 {
					return b, fmt.Errorf("data_parallel_rank: %v must be a rank (%v)", r, err)
				}
				b.DPRank = int(r)
			}
		default:
			if err := d.skip(0); err != nil {
				return b, fmt.Errorf("batch: field %d: %w", i, err)
			}
		}
		if f >= 0 && f < len(seen) {
			seen[f] = true
		}
	}
	if !seen[0] || !seen[1] {
		return b, fmt.Errorf("batch: want ts and events, got %d fields", n)
	}
	return b, nil
}

func (d *decoder) events() ([]Event, error) {
	n, err := d.d.DecodeArrayLen()
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	evs := make([]Event, 0, d.capFor(n))
	for i := range n {
		ev, err := d.event(fmt.Sprintf("events[%d]", i))
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// Positional fields after the tag, in vLLM's declaration order.
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx"}
	removedFields = []string{"block_hashes", "medium", "group_idx"}
)

func kindOf(tag string) (Kind, []string, bool) {
	switch tag {
	case "BlockStored":
		return BlockStored, storedFields, true
	case "BlockRemoved":
		return BlockRemoved, removedFields, true
	case "AllBlocksCleared":
		return AllBlocksCleared, nil, true
	}
	return 0, nil, false
}

// event decodes one tagged event. In array form the tag comes first and
// the fields follow by position; in map form the tag is under "type",
// which msgspec writes first, and the fields are named.
func (d *decoder) event(path string) (Event, error) {
	ev := Event{Group: -1}
	isMap, n, err := d.container(path)
	if err != nil {
		return ev, err
	}
	if n < 1 {
		return ev, fmt.Errorf("%s: empty, want a tag", path)
	}
	var names []string
	var seen uint16
	readTag := func() error {
		tag, err := d.str()
		if err != nil {
			return fmt.Errorf("%s: tag: %w", path, err)
		}
		k, fields, ok := kindOf(tag)
		if !ok {
			return fmt.Errorf("%s: unknown tag %q, want BlockStored, BlockRemoved or AllBlocksCleared", path, tag)
		}
		ev.Kind, names = k, fields
		return nil
	}
	if !isMap {
		if err := readTag(); err != nil {
			return ev, err
		}
		for i := 1; i < n; i++ {
			name := ""
			if i-1 < len(names) {
				name = names[i-1]
			}
			if err := d.field(&ev, path, name, &seen); err != nil {
				return ev, err
			}
		}
	} else {
		// Fields may precede the tag in a map written by another encoder:
		// they are decoded by name regardless of the kind and checked once
		// the tag is known.
		for i := range n {
			k, err := d.str()
			if err != nil {
				return ev, fmt.Errorf("%s: key %d: %w", path, i, err)
			}
			if k == "type" {
				if ev.Kind != 0 {
					return ev, fmt.Errorf("%s: two tags", path)
				}
				if err := readTag(); err != nil {
					return ev, err
				}
				continue
			}
			if err := d.field(&ev, path, k, &seen); err != nil {
				return ev, err
			}
		}
		if ev.Kind == 0 {
			return ev, fmt.Errorf("%s: no \"type\" tag", path)
		}
	}
	return ev, check(&ev, path, seen)
}

const (
	seenHashes = 1 << iota
	seenTokens
	seenBlockSize
)

// field decodes the field name of ev (skipping names it does not use).
func (d *decoder) field(ev *Event, path, name string, seen *uint16) error {
	p := path + "." + name
	switch name {
	case "block_hashes":
		n, err := d.d.DecodeArrayLen()
		if err != nil {
			return wrap(p, err)
		}
		ev.Hashes = make([]uint64, 0, d.capFor(n))
		for i := range n {
			h, null, err := d.hash()
			if err == nil && null {
				err = errors.New("null")
			}
			if err != nil {
				return fmt.Errorf("%s[%d]: %w", p, i, err)
			}
			ev.Hashes = append(ev.Hashes, h)
		}
		*seen |= seenHashes
	case "parent_block_hash":
		h, null, err := d.hash()
		if err != nil {
			return wrap(p, err)
		}
		ev.Parent, ev.HasParent = h, !null
	case "token_ids":
		n, err := d.d.DecodeArrayLen()
		if err != nil {
			return wrap(p, err)
		}
		ev.Tokens = make([]uint32, 0, d.capFor(n))
		for i := range n {
			t, err := d.d.DecodeInt64()
			if err != nil {
				return fmt.Errorf("%s[%d]: %w", p, i, err)
			}
			if t < 0 || t > math.MaxUint32 {
				return fmt.Errorf("%s[%d]: %d is not a token id", p, i, t)
			}
			ev.Tokens = append(ev.Tokens, uint32(t))
		}
		*seen |= seenTokens
	case "block_size":
		s, err := d.d.DecodeInt64()
		if err != nil {
			return wrap(p, err)
		}
		if s < 1 || s > 1<<20 {
			return fmt.Errorf("%s: %d must be in [1, %d]", p, s, 1<<20)
		}
		ev.BlockSize = int(s)
		*seen |= seenBlockSize
	case "medium":
		null, err := d.isNil()
		if err != nil {
			return wrap(p, err)
		}
		if !null {
			if ev.Medium, err = d.str(); err != nil {
				return wrap(p, err)
			}
		}
	case "lora_id", "lora_name", "extra_keys":
		null, err := d.isNil()
		if err != nil {
			return wrap(p, err)
		}
		if null {
			return nil
		}
		if name == "extra_keys" {
			// One entry per block, null where the block has none.
			n, err := d.d.DecodeArrayLen()
			if err != nil {
				return wrap(p, err)
			}
			for i := range n {
				null, err := d.isNil()
				if err != nil {
					return fmt.Errorf("%s[%d]: %w", p, i, err)
				}
				if !null {
					ev.Adapted = true
					if err := d.skip(0); err != nil {
						return fmt.Errorf("%s[%d]: %w", p, i, err)
					}
				}
			}
			return nil
		}
		ev.Adapted = true
		return wrap(p, d.skip(0))
	case "group_idx":
		null, err := d.isNil()
		if err != nil {
			return wrap(p, err)
		}
		if !null {
			g, err := d.d.DecodeInt64()
			if err != nil {
				return wrap(p, err)
			}
			if g < 0 || g > math.MaxInt32 {
				return fmt.Errorf("%s: %d must be a group index", p, g)
			}
			ev.Group = int(g)
		}
	default:
		return wrap(p, d.skip(0))
	}
	return nil
}

// hash decodes an engine block hash: an integer (negative ones as their
// two's complement, as a signed 64-bit encoder writes a large hash) or
// bytes (their last 8, big endian), or null.
func (d *decoder) hash() (uint64, bool, error) {
	c, err := d.d.PeekCode()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c == msgpcode.Nil:
		return 0, true, d.d.DecodeNil()
	case msgpcode.IsBin(c) || msgpcode.IsString(c):
		b, err := d.raw()
		if err != nil {
			return 0, false, err
		}
		if len(b) == 0 {
			return 0, false, errors.New("empty hash")
		}
		var buf [8]byte
		copy(buf[8-min(8, len(b)):], b[max(0, len(b)-8):])
		return binary.BigEndian.Uint64(buf[:]), false, nil
	case msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64):
		v, err := d.d.DecodeUint64()
		return v, false, err
	}
	return 0, false, fmt.Errorf("want an integer or bytes, got msgpack code 0x%02x", c)
}

// check verifies what ev's kind requires.
func check(ev *Event, path string, seen uint16) error {
	switch ev.Kind {
	case BlockStored:
		if seen&seenHashes == 0 || seen&seenTokens == 0 || seen&seenBlockSize == 0 {
			return fmt.Errorf("%s: BlockStored needs block_hashes, token_ids and block_size", path)
		}
		if want := len(ev.Hashes) * ev.BlockSize; len(ev.Tokens) != want {
			return fmt.Errorf("%s.token_ids: %d tokens for %d blocks of %d", path, len(ev.Tokens), len(ev.Hashes), ev.BlockSize)
		}
	case BlockRemoved:
		if seen&seenHashes == 0 {
			return fmt.Errorf("%s: BlockRemoved needs block_hashes", path)
		}
	}
	return nil
}

// maxDepth bounds the nesting of skipped values (extra keys, unknown
// fields), so that a payload of nested arrays cannot exhaust the stack.
const maxDepth = 32

// skip skips one value, checking its nesting.
func (d *decoder) skip(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested deeper than %d", maxDepth)
	}
	c, err := d.d.PeekCode()
	if err != nil {
		return err
	}
	var n int
	switch {
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err = d.d.DecodeArrayLen()
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err = d.d.DecodeMapLen()
		n *= 2
	default:
		return d.d.Skip() // a scalar, string, bin or ext: no nesting
	}
	if err != nil {
		return err
	}
	for range n {
		if err := d.skip(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// raw reads a str or bin value's bytes, checking its length against what
// is left before allocating (a forged length cannot allocate gigabytes).
func (d *decoder) raw() ([]byte, error) {
	n, err := d.d.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, errors.New("null, want a string")
	}
	if n > d.r.Len() {
		return nil, fmt.Errorf("length %d, %d bytes left", n, d.r.Len())
	}
	b := make([]byte, n)
	_, err = io.ReadFull(d.r, b)
	return b, err
}

func (d *decoder) str() (string, error) {
	b, err := d.raw()
	return string(b), err
}
