package bound

import (
	"strings"
	"testing"
)

type inner struct {
	Name  string
	Names []string
}

type answer struct {
	Title  string
	Inner  *inner
	Rows   []inner
	ByName map[string]int
	Any    any
	PNG    []byte
	hidden string
}

// TestStringsCutsEveryString: every long string reachable from an answer is cut to
// MaxString with the same marker for the same string, and the original is left whole.
func TestStringsCutsEveryString(t *testing.T) {
	huge := strings.Repeat("é", 3<<20) // 6 MiB of two-byte characters
	a := &answer{Title: "ok", Inner: &inner{Name: huge}, Rows: []inner{{Names: []string{"a", huge}}},
		ByName: map[string]int{huge: 1}, Any: huge, PNG: []byte(huge), hidden: huge}
	b := Strings(a)
	if b == a || a.Inner.Name != huge || a.Rows[0].Names[1] != huge {
		t.Fatal("the original was changed or not copied")
	}
	want := String(huge)
	if len(want) > MaxString || !strings.HasSuffix(want, " bytes, sha256 "+want[len(want)-13:]) || !strings.Contains(want, Marker+"6291456 bytes") {
		t.Fatalf("cut %d bytes: %q", len(want), want[len(want)-60:])
	}
	if !IsCut(want) || IsCut("plain") || String(want) != want {
		t.Error("a cut string is not recognised or is cut again")
	}
	for _, got := range []string{b.Inner.Name, b.Rows[0].Names[1], b.Any.(string)} {
		if got != want {
			t.Errorf("got %d bytes, want the same cut string", len(got))
		}
	}
	if _, ok := b.ByName[want]; !ok || len(b.ByName) != 1 {
		t.Errorf("map keys %d", len(b.ByName))
	}
	if b.Title != "ok" || b.Rows[0].Names[0] != "a" || len(b.PNG) != len(huge) || b.hidden != huge {
		t.Error("short strings, bytes or unexported fields changed")
	}
	if c := Strings(&answer{Title: "short"}); c.Title != "short" {
		t.Error("short answer changed")
	}
	other := String(huge[:len(huge)-2] + "e")
	if other == want {
		t.Error("two strings with the same prefix and length cut alike")
	}
}
