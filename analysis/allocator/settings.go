package allocator

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Allocator constants (c10/cuda/CUDACachingAllocator.cpp).
const (
	MinBlockSize  = 512      // kMinBlockSize: every size rounds up to a multiple of this
	SmallSize     = 1 << 20  // kSmallSize: requests up to this use the small pool
	SmallBuffer   = 2 << 20  // kSmallBuffer: small-pool segment (and expandable page) size
	LargeBuffer   = 20 << 20 // kLargeBuffer: large-pool segment size below MinLargeAlloc, large expandable page
	MinLargeAlloc = 10 << 20 // kMinLargeAlloc
	RoundLarge    = 2 << 20  // kRoundLarge: larger segments round up to this
	// NumIntervals is kRoundUpPowerOfTwoIntervals: roundup_power2_divisions has one value per
	// power-of-two size interval from 1 MiB (every smaller size uses the first) to 32 GiB and up.
	NumIntervals = 16
	mib          = 1 << 20
)

// Keys are the PYTORCH_CUDA_ALLOC_CONF options the model replays, in the order they are
// written.
var Keys = []string{"expandable_segments", "max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold"}

// Settings are the PYTORCH_CUDA_ALLOC_CONF options that change where blocks go.
type Settings struct {
	ExpandableSegments bool
	// MaxSplitSize in bytes (max_split_size_mb × 1 MiB); 0 = unset (unlimited).
	MaxSplitSize int64
	// RoundupPower2Divisions[i] is the number of divisions of the size interval
	// [2^i MiB, 2^(i+1) MiB) (index 0 also covers every size below 1 MiB, the last index every
	// size from 32 GiB); 0 or 1 = plain 512-byte rounding.
	RoundupPower2Divisions [NumIntervals]int
	// GCThreshold is garbage_collection_threshold (0 = off). PyTorch acts on it only when a
	// memory fraction is set (torch.cuda.set_per_process_memory_fraction).
	GCThreshold float64
}

// Uniform returns the roundup_power2_divisions value shared by every interval, and false when
// the intervals differ.
func (s Settings) Uniform() (int, bool) {
	v := s.RoundupPower2Divisions[0]
	for _, d := range s.RoundupPower2Divisions[1:] {
		if d != v {
			return 0, false
		}
	}
	return v, true
}

// RoundupString writes roundup_power2_divisions as PYTORCH_CUDA_ALLOC_CONF does: one number
// when every interval has the same value, else the bracket form [1:4,2:8,>:1].
func (s Settings) RoundupString() string {
	if v, ok := s.Uniform(); ok {
		return strconv.Itoa(v)
	}
	var parts []string
	for i := 0; i < NumIntervals; i++ {
		if i == NumIntervals-1 || s.RoundupPower2Divisions[i] != s.RoundupPower2Divisions[i+1] {
			parts = append(parts, fmt.Sprintf("%d:%d", 1<<i, s.RoundupPower2Divisions[i]))
		}
	}
	// The last run is written with ">".
	last := parts[len(parts)-1]
	parts[len(parts)-1] = ">" + last[strings.IndexByte(last, ':'):]
	return "[" + strings.Join(parts, ",") + "]"
}

// AllocConf writes the settings as a PYTORCH_CUDA_ALLOC_CONF value (options at their defaults
// are left out).
func (s Settings) AllocConf() string {
	var parts []string
	if s.ExpandableSegments {
		parts = append(parts, "expandable_segments:True")
	}
	if s.MaxSplitSize > 0 {
		parts = append(parts, fmt.Sprintf("max_split_size_mb:%d", s.MaxSplitSize/mib))
	}
	if v, ok := s.Uniform(); !ok || v > 1 {
		parts = append(parts, "roundup_power2_divisions:"+s.RoundupString())
	}
	if s.GCThreshold > 0 {
		parts = append(parts, "garbage_collection_threshold:"+strconv.FormatFloat(s.GCThreshold, 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

// FromSnapshot reads the settings a snapshot records (allocator_settings; a file without them
// ran with the defaults).
func FromSnapshot(st snapshot.AllocatorSettings) Settings {
	var s Settings
	s.ExpandableSegments = st.ExpandableSegments
	if st.MaxSplitSize > 0 {
		s.MaxSplitSize = st.MaxSplitSize
	}
	if st.GCThreshold > 0 && st.GCThreshold < 1 {
		s.GCThreshold = st.GCThreshold
	}
	if m, ok := st.Raw["roundup_power2_divisions"].(map[string]any); ok {
		// Keys are interval starts in MiB (1, 2, 4, … 32768), as memory_snapshot.cpp writes them.
		for k, v := range m {
			mb, err := strconv.ParseUint(k, 10, 64)
			if err != nil || mb == 0 || mb&(mb-1) != 0 {
				continue
			}
			i := min(bits.Len64(mb)-1, NumIntervals-1)
			if n, ok := toInt(v); ok && n >= 0 {
				s.RoundupPower2Divisions[i] = int(n)
			}
		}
	} else if l, ok := st.Raw["roundup_power2_divisions"].([]any); ok {
		for i, v := range l {
			if n, ok := toInt(v); ok && i < NumIntervals && n >= 0 {
				s.RoundupPower2Divisions[i] = int(n)
			}
		}
	}
	return s
}

func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case uint64:
		return int64(x), x <= 1<<62
	case float64:
		return int64(x), x == float64(int64(x))
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	}
	return 0, false
}

// SettingError is a key or value the model does not accept.
type SettingError struct{ Msg string }

func (e *SettingError) Error() string { return e.Msg }

func settingErrorf(format string, args ...any) error {
	return &SettingError{fmt.Sprintf(format, args...)}
}

// Set changes one option, given as PYTORCH_CUDA_ALLOC_CONF spells it (key
// expandable_segments, max_split_size_mb, roundup_power2_divisions or
// garbage_collection_threshold). A value of 0 (or False) turns an option off. Values are
// checked as PyTorch checks them.
func (s *Settings) Set(key, value string) error {
	value = strings.TrimSpace(value)
	switch strings.TrimSpace(key) {
	case "expandable_segments":
		switch strings.ToLower(value) {
		case "true", "1":
			s.ExpandableSegments = true
		case "false", "0":
			s.ExpandableSegments = false
		default:
			return settingErrorf("expandable_segments must be True or False, not %q", value)
		}
	case "max_split_size_mb":
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || n < 0 {
			return settingErrorf("max_split_size_mb must be a whole number of MiB (0 = unset), not %q", value)
		}
		if n != 0 && n <= LargeBuffer/mib {
			return settingErrorf("max_split_size_mb must be more than %d (PyTorch refuses smaller values), or 0 to unset it; got %d", LargeBuffer/mib, n)
		}
		if n > 1<<40 {
			return settingErrorf("max_split_size_mb %d is beyond any device", n)
		}
		s.MaxSplitSize = n * mib
	case "roundup_power2_divisions":
		d, err := ParseRoundup(value)
		if err != nil {
			return err
		}
		s.RoundupPower2Divisions = d
	case "garbage_collection_threshold":
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || f < 0 || f >= 1 {
			return settingErrorf("garbage_collection_threshold must be a number in (0, 1), or 0 to turn it off; got %q", value)
		}
		s.GCThreshold = f
	default:
		return settingErrorf("unknown allocator setting %q: the accepted keys are %s", key, strings.Join(Keys, ", "))
	}
	return nil
}

// ParseRoundup reads a roundup_power2_divisions value: one number for every interval, or
// PyTorch's bracket form [256:1,512:2,>:4] (interval starts in MiB, powers of two; ">" is every
// interval after the last one named; the first value also covers the intervals below it).
// Each value is 0 or a power of two.
func ParseRoundup(value string) ([NumIntervals]int, error) {
	var d [NumIntervals]int
	check := func(v string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n&(n-1) != 0 || n > 1<<20 {
			return 0, settingErrorf("roundup_power2_divisions values must be 0 or a power of two, not %q", v)
		}
		return n, nil
	}
	value = strings.TrimSpace(value)
	if !strings.HasPrefix(value, "[") {
		n, err := check(value)
		if err != nil {
			return d, err
		}
		for i := range d {
			d[i] = n
		}
		return d, nil
	}
	if !strings.HasSuffix(value, "]") {
		return d, settingErrorf("roundup_power2_divisions %q: a bracket list must end with ]", value)
	}
	first, last := true, 0
	items := strings.Split(value[1:len(value)-1], ",")
	for _, it := range items {
		k, v, ok := strings.Cut(it, ":")
		if !ok {
			return d, settingErrorf("roundup_power2_divisions entry %q must be INTERVAL_MB:DIVISIONS", it)
		}
		n, err := check(v)
		if err != nil {
			return d, err
		}
		k = strings.TrimSpace(k)
		if k == ">" {
			for i := last + 1; i < NumIntervals; i++ {
				d[i] = n
			}
			continue
		}
		mb, err := strconv.ParseUint(k, 10, 64)
		if err != nil || mb == 0 || mb&(mb-1) != 0 {
			return d, settingErrorf("roundup_power2_divisions interval %q must be a power of two (MiB)", k)
		}
		i := min(bits.Len64(mb)-1, NumIntervals-1)
		if first {
			for j := 0; j < i; j++ {
				d[j] = n
			}
			first = false
		}
		d[i] = n
		last = i
	}
	return d, nil
}

// divisions is CUDAAllocatorConfig::roundup_power2_divisions(size).
func (s *Settings) divisions(size int64) int {
	logSize := bits.Len64(uint64(size)) - 1
	i := 0
	if logSize > 20 {
		i = logSize - 20
	}
	return s.RoundupPower2Divisions[min(i, NumIntervals-1)]
}

// RoundSize is the allocator's round_size: at least 512 B, a multiple of 512 B, or the next
// power-of-two division when roundup_power2_divisions applies to the size.
func (s *Settings) RoundSize(size int64) int64 {
	if size < MinBlockSize {
		return MinBlockSize
	}
	if div := s.divisions(size); div > 1 && size > MinBlockSize*int64(div) {
		return roundupPower2NextDivision(size, div)
	}
	return (size + MinBlockSize - 1) / MinBlockSize * MinBlockSize
}

// roundupPower2NextDivision is roundup_power2_next_division.
func roundupPower2NextDivision(size int64, divisions int) int64 {
	u := uint64(size)
	if u&(u-1) == 0 {
		return size
	}
	floor := uint64(1) << (bits.Len64(u) - 1)
	step := floor >> (bits.Len64(uint64(divisions)) - 1)
	if step == 0 {
		return int64(floor << 1)
	}
	f := u &^ (step - 1)
	if f == u {
		return size
	}
	return int64(f + step)
}

// AllocationSize is get_allocation_size: the segment size cudaMalloc'd for a rounded request.
func AllocationSize(rounded int64) int64 {
	switch {
	case rounded <= SmallSize:
		return SmallBuffer
	case rounded < MinLargeAlloc:
		return LargeBuffer
	}
	return (rounded + RoundLarge - 1) / RoundLarge * RoundLarge
}

// sortedKeys returns m's keys in order (for deterministic iteration).
func sortedKeys[V any](m map[uint64]V) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
