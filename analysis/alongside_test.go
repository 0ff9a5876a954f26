package analysis

import "testing"

// TestAlongside: both functions run, and a panic on the other goroutine reaches the caller
// (with its value) instead of ending the process.
func TestAlongside(t *testing.T) {
	a, b := 0, 0
	alongside(func() { a = 1 }, func() { b = 2 })
	if a != 1 || b != 2 {
		t.Fatalf("a %d, b %d", a, b)
	}
	defer func() {
		if r := recover(); r != "boom" {
			t.Fatalf("recovered %v, want boom", r)
		}
		if b != 3 {
			t.Fatal("the caller's function did not finish")
		}
	}()
	alongside(func() { panic("boom") }, func() { b = 3 })
	t.Fatal("no panic")
}
