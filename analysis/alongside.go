package analysis

import "sync"

// alongside runs other and here at once and returns when both are done. A panic in either is
// raised again here, once both have finished: the MCP server turns a tool's panic into an
// error, where one on a goroutine of its own would end the process.
func alongside(other, here func()) {
	inParallel(2, func(i int) {
		if i == 0 {
			other()
		} else {
			here()
		}
	})
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
