package snapshot

import (
	"regexp"
	"strconv"
)

// Rank is one rank's snapshot from a directory of per-rank files.
type Rank struct {
	Rank int
	File string
	Snap *Snapshot
	// Err is why the file could not be read (Snap is nil then): one bad rank, such as a file
	// truncated when its process was killed, leaves the others readable.
	Err error
}

// rankInName matches a rank in a file name: rank5, rank_5, rank-5 anywhere, or r5 between
// separators (job-r5-oom.pickle, snap_r5.pkl).
var rankInName = regexp.MustCompile(`(?i)rank[_-]?(\d+)|(?:^|[^a-z0-9])r(\d+)(?:[^a-z0-9]|$)`)

// RankFromName returns the rank a file name carries, or -1.
func RankFromName(name string) int {
	m := rankInName.FindStringSubmatch(name)
	if m == nil {
		return -1
	}
	digits := m[1]
	if digits == "" {
		digits = m[2]
	}
	n, err := strconv.Atoi(digits)
	if err != nil {
		return -1
	}
	return n
}
