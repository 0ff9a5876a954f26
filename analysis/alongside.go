package analysis

import "sync"

// alongside runs other on another goroutine while here runs on this one, and returns when both
// are done. A panic in other is raised again here, as if it had run on this goroutine: the MCP
// server turns a tool's panic into an error, where one on a goroutine of its own would end the
// process.
func alongside(other, here func()) {
	var (
		wg       sync.WaitGroup
		panicked any
	)
	wg.Go(func() {
		defer func() { panicked = recover() }()
		other()
	})
	here()
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}

// inParallel runs f(0), …, f(n-1) on n goroutines and returns when all are done. A panic in
// any of them is raised again here (the first), as alongside does.
func inParallel(n int, f func(i int)) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		panicked any
	)
	for i := range n {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					mu.Lock()
					if panicked == nil {
						panicked = p
					}
					mu.Unlock()
				}
			}()
			f(i)
		})
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}
