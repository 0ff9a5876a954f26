package analysis

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// RankLayout says whether the files of a directory are the ranks of one job, and why.
type RankLayout struct {
	// Job is true when the files are taken as the ranks of one job.
	Job bool
	// ByName is true when every file name carries its own rank.
	ByName bool
	// Evidence is one sentence: the names or the facts that decided.
	Evidence string
}

// RankFromName returns the rank a file name carries, or -1.
func RankFromName(name string) int { return snapshot.RankFromName(name) }

// rankClockSlack is how far apart in time the traces of one job's ranks may end and begin.
const rankClockSlack = time.Minute

// ClassifyRanks decides whether the files of a directory (as load.Dir returns them) are the
// ranks of one job. They are when every file name carries a distinct rank (rank0.pickle,
// snap_rank_1.pkl, job-r3-oom.pickle), or, without such names, when the files themselves say
// so: every trace overlaps the others in time, the files share their format and allocator
// settings (one PyTorch, one PYTORCH_CUDA_ALLOC_CONF), and each file holds its own devices (one
// process per GPU). Anything else is a directory of unrelated snapshots.
func ClassifyRanks(ranks []snapshot.Rank) RankLayout {
	if len(ranks) < 2 {
		return RankLayout{Job: true, Evidence: "a single file"}
	}
	names := make([]string, len(ranks))
	seen := map[int]bool{}
	byName := true
	for i, r := range ranks {
		names[i] = filepath.Base(r.File)
		n := RankFromName(names[i])
		if n < 0 || seen[n] {
			byName = false
		}
		seen[n] = true
	}
	if byName {
		return RankLayout{Job: true, ByName: true, Evidence: "every file name carries its rank (" + listNames(names) + ")"}
	}
	if why := notOneJob(ranks, names); why != "" {
		return RankLayout{Evidence: "their names carry no rank each (" + listNames(names) + ") and " + why}
	}
	return RankLayout{Job: true, Evidence: "their names carry no rank each (" + listNames(names) + "), but their traces overlap in time, they share the format and allocator settings, and each holds its own devices"}
}

// notOneJob returns why the files cannot be the ranks of one job, or "" when they can.
func notOneJob(ranks []snapshot.Rank, names []string) string {
	var latestFirst, earliestLast int64
	devOwner := map[int]string{}
	for i, r := range ranks {
		s := r.Snap
		if s == nil {
			return names[i] + " holds no snapshot"
		}
		first, last := traceWindow(s)
		if first == 0 {
			return names[i] + " has no timed trace to place it beside the others"
		}
		if i == 0 || first > latestFirst {
			latestFirst = first
		}
		if i == 0 || last < earliestLast {
			earliestLast = last
		}
		f0, f := ranks[0].Snap.Format, s.Format
		if f.Encoding != f0.Encoding || f.Protocol != f0.Protocol || f.LegacyHistory != f0.LegacyHistory {
			return fmt.Sprintf("%s and %s are written in different formats", names[0], names[i])
		}
		if !sameSettings(ranks[0].Snap.Settings, s.Settings) {
			return fmt.Sprintf("%s and %s have different allocator settings", names[0], names[i])
		}
		for _, d := range s.Devices() {
			if other, ok := devOwner[d]; ok {
				return fmt.Sprintf("%s and %s both hold device %d (ranks of one job each hold their own GPU; with CUDA_VISIBLE_DEVICES every rank shows device 0, so name the files rank0.pickle, rank1.pickle, …)", other, names[i], d)
			}
			devOwner[d] = names[i]
		}
	}
	if latestFirst > earliestLast+rankClockSlack.Microseconds() {
		return "their traces do not overlap in time (one ends " + time.Duration((latestFirst-earliestLast)*int64(time.Microsecond)).Round(time.Second).String() + " before another starts)"
	}
	return ""
}

// traceWindow returns the trace clock (epoch µs) of the first and last timed event; 0, 0 when
// no event has a time.
func traceWindow(s *snapshot.Snapshot) (first, last int64) {
	for _, evs := range s.DeviceTraces {
		for _, e := range evs {
			if e.TimeUS == 0 {
				continue
			}
			if first == 0 || e.TimeUS < first {
				first = e.TimeUS
			}
			last = max(last, e.TimeUS)
		}
	}
	return first, last
}

func sameSettings(a, b snapshot.AllocatorSettings) bool {
	return a.Present == b.Present && a.AllocConf == b.AllocConf && a.MaxSplitSize == b.MaxSplitSize &&
		a.GCThreshold == b.GCThreshold && a.ExpandableSegments == b.ExpandableSegments
}

// listNames lists up to four names, then how many more.
func listNames(names []string) string {
	if len(names) <= 4 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:4], ", ") + fmt.Sprintf(", … %d more", len(names)-4)
}

// SummarizeDir summarizes a directory of snapshots (as load.Dir returns them). When
// ClassifyRanks takes them for the ranks of one job it is SummarizeRanks, ranks numbered from
// the names, with a first note on the evidence when the names did not decide. Otherwise each
// file is summarized on its own: one entry per file in ranks (numbered by sorted position),
// no comparison between files, no totals across them, and a first note that says so. Files
// that could not be read (Rank.Err) are listed in files with their error; the others are
// summarized without them.
func SummarizeDir(ctx context.Context, dir string, ranks []snapshot.Rank, opt SummaryOptions) (*Summary, error) {
	var good []snapshot.Rank
	var bad []FileSummary
	for _, r := range ranks {
		if r.Err != nil || r.Snap == nil {
			msg := filepath.Base(r.File) + ": not read"
			if r.Err != nil {
				msg = r.Err.Error()
			}
			bad = append(bad, FileSummary{File: r.File, Rank: r.Rank, Error: msg})
			continue
		}
		good = append(good, r)
	}
	if len(good) == 0 {
		if len(bad) > 0 {
			return nil, fmt.Errorf("%s: no file could be read: %s", dir, bad[0].Error)
		}
		return nil, fmt.Errorf("%s: holds no snapshot files", dir)
	}
	ranks = good
	layout := ClassifyRanks(ranks)
	if layout.Job && layout.ByName {
		ranks = slices.Clone(ranks)
		for i := range ranks {
			ranks[i].Rank = RankFromName(filepath.Base(ranks[i].File))
		}
		slices.SortStableFunc(ranks, func(a, b snapshot.Rank) int { return a.Rank - b.Rank })
	}
	s, err := SummarizeRanks(ctx, dir, ranks, opt)
	if err != nil {
		return nil, err
	}
	switch {
	case len(ranks) < 2 || layout.ByName:
	case layout.Job:
		s.LayoutNote = "the files are taken as the ranks of one job (ranks numbered by sorted name): " + layout.Evidence
		s.Notes = append([]string{s.LayoutNote}, s.Notes...)
	default:
		// Outlier ranks, replication and totals compare or add up ranks: meaningless across
		// unrelated files.
		s.SeparateFiles = true
		s.Totals = nil
		s.TotalsNote = fmt.Sprintf("not summed: the %d files are not the ranks of one job", len(ranks))
		s.LayoutNote = fmt.Sprintf("the %d files are not taken as the ranks of one job: %s. Each file is summarized on its own: its number below is only its sorted position, and no file is compared with another or added to another. Name per-rank files rank0.pickle, rank1.pickle, … to compare ranks, or summarize one file at a time",
			len(ranks), layout.Evidence)
		s.Notes = []string{s.LayoutNote}
	}
	for _, r := range ranks {
		caps := r.Snap.Caps
		s.Files = append(s.Files, FileSummary{File: r.File, Rank: r.Rank, Capabilities: &caps})
	}
	s.Files = append(s.Files, bad...)
	if len(bad) > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("%d of %d files could not be read and are left out of everything above (see files[].error)", len(bad), len(bad)+len(ranks)))
	}
	return s, nil
}
