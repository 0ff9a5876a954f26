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
