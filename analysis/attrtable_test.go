package analysis

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestAttrTableMatchesAttribute: the attribution table the roles read (filled by helper
// goroutines through AttributeFrames) gives exactly Attributor.Attribute for every stack,
// with and without attribution options, on every real file.
func TestAttrTableMatchesAttribute(t *testing.T) {
	for _, path := range realFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			snap, err := load.File(context.Background(), path, load.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, opt := range []AttributionOptions{{}, {UserRoots: []string{"/home"}, Skip: []string{"forward"}}} {
				a, err := NewAttributor(opt)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := NewAttributor(opt)
				tab := newAttrTable(snap, a)
				for id := snapshot.NoStack; int(id) < len(snap.Stacks); id++ {
					if got, w := tab.get(id), want.Attribute(snap, id); !reflect.DeepEqual(got, w) {
						t.Fatalf("stack %d: table %+v, Attribute %+v", id, got, w)
					}
				}
			}
		})
	}
}
