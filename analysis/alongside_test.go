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

// TestInParallel: every f(i) runs, and a panic in one of them reaches the caller (with its
// value) once all are done, instead of ending the process.
func TestInParallel(t *testing.T) {
	var ran [4]bool
	inParallel(len(ran), func(i int) { ran[i] = true })
	if ran != [4]bool{true, true, true, true} {
		t.Fatalf("ran %v", ran)
	}
	ran = [4]bool{}
	defer func() {
		if r := recover(); r != "boom 2" {
			t.Fatalf("recovered %v, want boom 2", r)
		}
		if ran != [4]bool{true, true, false, true} {
			t.Fatalf("ran %v: the others did not finish", ran)
		}
	}()
	inParallel(len(ran), func(i int) {
		if i == 2 {
			panic("boom 2")
		}
		ran[i] = true
	})
	t.Fatal("no panic")
}
