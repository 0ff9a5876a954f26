//go:build !unix

package load

import "os"

func mapFile(*os.File, int64) ([]byte, bool) { return nil, false }

func unmapFile([]byte) {}
