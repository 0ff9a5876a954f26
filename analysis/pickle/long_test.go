package pickle

import (
	"math/rand/v2"
	"testing"
)

// TestDecodeLong8 pins the one-load LONG1 decoder of the fast paths to decodeLong, byte by
// byte, for every length and the bytes after the value set to anything.
func TestDecodeLong8(t *testing.T) {
	cases := []struct {
		raw  []byte
		want uint64
	}{
		{nil, 0},
		{[]byte{0x7f}, 0x7f},
		{[]byte{0x80}, 0xffffffffffffff80},       // -128
		{[]byte{0x00, 0x80}, 0xffffffffffff8000}, // -32768
		{[]byte{0x00, 0x00, 0x30, 0x8c, 0x10, 0x7f}, 0x7f108c300000},           // an address
		{[]byte{0x09, 0xb5, 0xc8, 0x3f, 0x40, 0x4c, 0x06}, 0x064c403fc8b509},   // a time in µs
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ^uint64(0)},   // -1 in 8 bytes
		{[]byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80}, 1 << 63},      // -2^63
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 1<<63 - 1},    // 2^63-1
		{[]byte{0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80}, 0xff80000000000001}, // 7 bytes, negative
	}
	for _, tc := range cases {
		buf := append(append([]byte(nil), tc.raw...), 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x11, 0x22)
		if got := decodeLong8(buf, len(tc.raw)); got != (val{k: kInt, x: tc.want}) {
			t.Errorf("decodeLong8(% x) = %+v, want %#x", tc.raw, got, tc.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 16)
	for range 100000 {
		for i := range buf {
			buf[i] = byte(r.Uint32())
		}
		n := r.IntN(9)
		want, ok := decodeLong(buf[:n])
		if got := decodeLong8(buf, n); !ok || got != want {
			t.Fatalf("decodeLong8(% x, %d) = %+v, decodeLong says %+v", buf, n, got, want)
		}
	}
}
