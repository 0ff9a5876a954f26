// Package facts holds the facts about a snapshot that need nothing but numbers: what the sizes
// of memory without frames say about what it is. It may know block sizes and PyTorch's dtypes;
// it never imports the analyses above it (roles, reports, advice).
package facts

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// MaxSizeGroups bounds SizeStructure.Groups.
const MaxSizeGroups = 12

// SizeGroup is the blocks of one size.
type SizeGroup struct {
	Size  int64 `json:"size"`
	Count int   `json:"count"`
	Bytes int64 `json:"bytes"`
	// Product is an exact factorisation of Size into a known vocabulary size, a hidden size
	// and a dtype's width ("151936 × 2048 × 4 B"), empty when none fits.
	Product string `json:"product,omitempty"`
	// Guess says what the product suggests, marked "guess" (empty without a product).
	Guess string `json:"guess,omitempty"`
}

// SizeStructure is memory without frames read by its block sizes: how many blocks of each
// size, largest bytes first.
type SizeStructure struct {
	Blocks int   `json:"blocks"`
	Bytes  int64 `json:"bytes"`
	// Groups are the sizes holding the most bytes (at most MaxSizeGroups); GroupsTotal counts
	// them all.
	Groups      []SizeGroup `json:"groups"`
	GroupsTotal int         `json:"groups_total"`
}

// vocabSizes are the vocabulary sizes of widely used tokenizers: an embedding or LM head is
// vocab × hidden elements (GPT-2 50257 and its padded 50304, LLaMA/Mistral 32000, Phi-3 32064,
// GPT-NeoX 50277/50432, Gemma 256000, LLaMA-3 128256, Qwen2 151936 and 152064, BLOOM 250880,
// T5 32128).
var vocabSizes = []int64{32000, 32064, 32128, 50257, 50277, 50304, 50432, 65024, 100352, 128256, 151936, 152064, 250880, 256000}

// dtypeWidths are the element sizes a tensor of a model has: fp32, bf16/fp16.
var dtypeWidths = []struct {
	bytes int64
	name  string
}{{4, "fp32"}, {2, "bf16/fp16"}}

// factorisation is one way to read a size as vocabulary × hidden × dtype width.
type factorisation struct {
	vocab, hidden, width int64
	dtype                string
}

// factorisations reads size as vocab × hidden × width for a known vocabulary size, a hidden
// size that is a multiple of 128 between 512 and 16384 (every released model's with such a
// vocabulary), and a float
// width.
func factorisations(size int64) []factorisation {
	var found []factorisation
	for _, v := range vocabSizes {
		if size%v != 0 {
			continue
		}
		for _, w := range dtypeWidths {
			rest := size / v
			if rest%w.bytes != 0 {
				continue
			}
			h := rest / w.bytes
			if h%128 == 0 && h >= 512 && h <= 16384 {
				found = append(found, factorisation{v, h, w.bytes, w.name})
			}
		}
	}
	return found
}

// Product factors size as vocab × hidden × width (see factorisations) and says what that
// suggests. PyTorch's caching allocator rounds a request up to a multiple of 512 B, so an exact
// product is checked on the requested size when it is known. Some sizes factor more than one
// way (151936 × 2048 × 4 B = 151936 × 4096 × 2 B): then every factorisation is given and the
// dtype is not claimed.
func Product(size int64) (product, guess string) {
	return describe(factorisations(size), "")
}

// describe renders factorisations; confirm names the blocks that settled an ambiguity.
func describe(found []factorisation, confirm string) (product, guess string) {
	if len(found) == 0 {
		return "", ""
	}
	parts := make([]string, len(found))
	for i, f := range found {
		parts[i] = fmt.Sprintf("%d × %d × %d B (%s)", f.vocab, f.hidden, f.width, f.dtype)
	}
	product = strings.Join(parts, " or ")
	guess = "guess: an embedding or LM head (vocabulary × hidden size), or its gradient"
	if confirm != "" {
		guess += "; " + confirm
	}
	if len(found) > 1 {
		guess += "; the size alone cannot tell which factorisation (the model's hidden size does)"
	}
	// bf16 halves the tensor only when the one reading is fp32: where the size also reads as a
	// bf16 tensor of twice the hidden size, it may already be bf16.
	if len(found) == 1 && found[0].width == 4 {
		guess += "; in fp32, bf16 would halve it"
	}
	return product, guess
}

// Sizes groups blocks by size. requested[i] is the block's requested size when known (0: use
// sizes[i]): exact products are read off the requested size.
func Sizes(sizes, requested []int64) SizeStructure {
	type acc struct {
		count     int
		bytes     int64
		requested int64
	}
	by := map[int64]*acc{}
	var st SizeStructure
	for i, s := range sizes {
		a := by[s]
		if a == nil {
			a = &acc{}
			by[s] = a
		}
		a.count++
		a.bytes += s
		if i < len(requested) && requested[i] > 0 {
			a.requested = requested[i]
		}
		st.Blocks++
		st.Bytes += s
	}
	for s, a := range by {
		g := SizeGroup{Size: s, Count: a.count, Bytes: a.bytes}
		found := factorisations(cmp.Or(a.requested, s))
		confirm := ""
		if len(found) > 1 {
			// A hidden size the dump's own blocks confirm: a square hidden × hidden
			// projection of the same width (q/k/v/o weights) among the other sizes.
			// When several are, the one whose projections hold four times the bytes of any
			// other's (a model's dozens of layers, against a stray buffer of that size).
			var kept []factorisation
			var best, next int64
			for _, f := range found {
				if sq := f.hidden * f.hidden * f.width; sq != s && by[sq] != nil {
					switch b := by[sq].bytes; {
					case b > best:
						kept, best, next = []factorisation{f}, b, best
					case b > next:
						next = b
					}
				}
			}
			if len(kept) == 1 && best >= 4*next {
				found = kept
				confirm = fmt.Sprintf("%d blocks of %d × %d × %d B (a hidden × hidden projection) confirm the hidden size", by[kept[0].hidden*kept[0].hidden*kept[0].width].count, kept[0].hidden, kept[0].hidden, kept[0].width)
			}
		}
		g.Product, g.Guess = describe(found, confirm)
		st.Groups = append(st.Groups, g)
	}
	slices.SortFunc(st.Groups, func(a, b SizeGroup) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(b.Size, a.Size))
	})
	st.GroupsTotal = len(st.Groups)
	if len(st.Groups) > MaxSizeGroups {
		st.Groups = st.Groups[:MaxSizeGroups]
	}
	if st.Groups == nil {
		st.Groups = []SizeGroup{}
	}
	return st
}
