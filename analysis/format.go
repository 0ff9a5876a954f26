// Package analysis answers questions about a loaded PyTorch CUDA memory snapshot: who holds the
// memory (attribution, top stacks), what grew between two snapshots (diff), how memory moved over
// the recorded trace (replay), why an allocation failed (oom) and how the cache is fragmented. Every
// function is pure: it reads a *snapshot.Snapshot and returns a result struct with JSON tags and a
// Text rendering; nothing here prints or talks to a client.
package analysis

import (
	"cmp"
	"fmt"
	"path"
	"strings"
)

// FormatBytes renders a byte count the short human way: "512 B", "3.0 KiB", "1.2 GiB".
func FormatBytes(n int64) string {
	neg := n < 0
	if neg {
		n = -n
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v := float64(n)
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	var s string
	switch {
	case i == 0:
		s = fmt.Sprintf("%d B", n)
	case v >= 100:
		s = fmt.Sprintf("%.0f %s", v, units[i])
	default:
		s = fmt.Sprintf("%.1f %s", v, units[i])
	}
	if neg {
		return "-" + s
	}
	return s
}

// formatDelta renders a signed byte count with an explicit sign.
func formatDelta(n int64) string {
	if n > 0 {
		return "+" + FormatBytes(n)
	}
	return FormatBytes(n)
}

// normPath turns Windows separators into slashes so path rules apply to every file.
func normPath(p string) string {
	return strings.ReplaceAll(p, `\`, "/")
}

// baseName is the last element of a (possibly Windows) path.
func baseName(p string) string {
	p = normPath(p)
	if p == "" {
		return p
	}
	return path.Base(p)
}

// pct is a percentage rounded to one decimal, 0 when total is 0.
func pct(part, total int64) float64 {
	if total <= 0 {
		return 0
	}
	return float64(int64(float64(part)*1000/float64(total)+0.5)) / 10
}

// emptyIfNil returns an empty slice for nil, so JSON never carries null lists.
func emptyIfNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

const (
	kib = int64(1024)
	mib = 1024 * kib
	gib = 1024 * mib
)

// largestFirst orders report rows by bytes, largest first, then by site name, so that every
// list is stable across runs.
func largestFirst(aBytes, bBytes int64, aSite, bSite string) int {
	return cmp.Or(cmp.Compare(bBytes, aBytes), strings.Compare(aSite, bSite))
}

// siteOrder is largestFirst for site records, with ties (one site in two roles, or two files
// with the same base name) broken by role and identity so the order never depends on a map.
func siteOrder(aBytes, bBytes int64, a, b SiteIdentity, aCat, bCat string) int {
	return cmp.Or(largestFirst(aBytes, bBytes, a.Site, b.Site), strings.Compare(aCat, bCat), strings.Compare(a.key(), b.key()))
}
