package facts

import "testing"

func TestProduct(t *testing.T) {
	cases := []struct {
		size          int64
		product, want string
	}{
		{151936 * 2048 * 4, "151936 × 2048 × 4 B (fp32) or 151936 × 4096 × 2 B (bf16/fp16)",
			"guess: an embedding or LM head (vocabulary × hidden size), or its gradient; the size alone cannot tell which factorisation (the model's hidden size does)"}, // two readings: no bf16 claim
		{50257 * 12288 * 4, "50257 × 12288 × 4 B (fp32)", "guess: an embedding or LM head (vocabulary × hidden size), or its gradient; in fp32, bf16 would halve it"}, // 2 × 12288 is past any hidden size: one fp32 reading
		{151936 * 896 * 2, "151936 × 896 × 2 B (bf16/fp16)", "guess: an embedding or LM head (vocabulary × hidden size), or its gradient"},
		{152064 * 11968 * 2, "", ""}, // a hidden size of 11968 is no model's (not a multiple of 128)
		{3 << 30, "", ""},            // 3 GiB: no vocabulary divides it into a hidden size
		{32000 * 100 * 4, "", ""},    // a hidden size of 100 is no model's
		{408 * 1 << 20, "", ""},      // 408 MiB
		{50257*768*4 + 512, "", ""},  // one allocator round-up past a product
	}
	for _, tc := range cases {
		p, g := Product(tc.size)
		if p != tc.product || g != tc.want {
			t.Errorf("Product(%d) = %q, %q; want %q, %q", tc.size, p, g, tc.product, tc.want)
		}
	}
}

// TestSizes: the answer key's state-only OOM dump (#19) read by its block sizes.
func TestSizes(t *testing.T) {
	const mib = 1 << 20
	var sizes, req []int64
	add := func(n int, size int64) {
		for range n {
			sizes = append(sizes, size)
			req = append(req, 0)
		}
	}
	add(5, 3277*mib)
	add(1, 3482*mib)
	add(12, 408*mib)
	add(5, 816*mib)
	sizes = append(sizes, 151936*2048*4)
	req = append(req, 151936*2048*4)
	st := Sizes(sizes, req)
	if st.Blocks != 24 || st.GroupsTotal != 5 {
		t.Fatalf("%d blocks in %d groups, want 24 in 5", st.Blocks, st.GroupsTotal)
	}
	want := []struct {
		size  int64
		count int
	}{{3277 * mib, 5}, {408 * mib, 12}, {816 * mib, 5}, {3482 * mib, 1}, {151936 * 2048 * 4, 1}}
	for i, w := range want {
		g := st.Groups[i]
		if g.Size != w.size || g.Count != w.count || g.Bytes != w.size*int64(w.count) {
			t.Errorf("group %d: %d × %d (%d B), want %d × %d", i, g.Count, g.Size, g.Bytes, w.count, w.size)
		}
	}
	if g := st.Groups[4]; g.Product != "151936 × 2048 × 4 B (fp32) or 151936 × 4096 × 2 B (bf16/fp16)" {
		t.Errorf("the embedding's product %q", g.Product)
	}
	if st.Groups[0].Product != "" {
		t.Errorf("3.2 GiB blocks given a product %q", st.Groups[0].Product)
	}
}

// TestSizesConfirmed: a LLaMA-7B dump in fp32 (answer key #2): 64 MiB blocks are 4096 × 4096 × 4 B
// projections, which settle the 500 MiB block as the 32000 × 4096 fp32 embedding.
func TestSizesConfirmed(t *testing.T) {
	const mib = 1 << 20
	// 1 MiB is 512 × 512 × 4 B, the square of Gemma's 256000 × 512 × 4 B reading: a stray
	// buffer with a twentieth of the projections' bytes does not settle it.
	sizes := []int64{500 * mib, 500 * mib, 64 * mib, 64 * mib, 172 * mib, 1 * mib, 1 * mib}
	st := Sizes(sizes, nil)
	g := st.Groups[0]
	if g.Size != 500*mib || g.Count != 2 {
		t.Fatalf("first group %+v", g)
	}
	const want = "guess: an embedding or LM head (vocabulary × hidden size), or its gradient; 2 blocks of 4096 × 4096 × 4 B (a hidden × hidden projection) confirm the hidden size; in fp32, bf16 would halve it"
	if g.Product != "32000 × 4096 × 4 B (fp32)" || g.Guess != want {
		t.Errorf("500 MiB: %q, %q; want 32000 × 4096 × 4 B (fp32), %q", g.Product, g.Guess, want)
	}
}
