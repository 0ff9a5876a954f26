package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/allocator"
)

func init() { register(newWhatIfCmd) }

// whatIfSettings checks --set values before the file is read: one line that names the accepted
// keys when one is wrong.
func whatIfSettings(sets []string) ([]analysis.WhatIfSetting, error) {
	out := make([]analysis.WhatIfSetting, 0, len(sets))
	var probe allocator.Settings
	for _, s := range sets {
		kv, err := analysis.ParseWhatIfSetting(s)
		if err == nil {
			err = probe.Set(kv.Key, kv.Value)
		}
		if err != nil {
			msg := err.Error()
			if !strings.Contains(msg, "accepted keys") && !strings.Contains(msg, "KEY one of") {
				msg += "; accepted keys: " + strings.Join(allocator.Keys, ", ")
			}
			return nil, fmt.Errorf("--set %s: %s", s, msg)
		}
		out = append(out, kv)
	}
	return out, nil
}

func newWhatIfCmd() *cobra.Command {
	var (
		lo        loadOptions
		sets      []string
		device    int
		devSize   string
		recommend bool
		asJSON    bool
	)
	c := &cobra.Command{
		Use:   "whatif PATH [--set KEY=VALUE]... [--recommend]",
		Short: "Would other allocator settings (expandable_segments, max_split_size_mb, …) have avoided the OOM? Replays the trace under them",
		Long: `whatif replays the trace's requests (sizes, streams, order, frees as recorded) through a
model of PyTorch's caching allocator, once with the file's own settings (the baseline, compared
with the recording: fidelity) and once with the settings given by --set, which change the
file's own. Keys, as PYTORCH_CUDA_ALLOC_CONF spells them:

  expandable_segments=True|False
  max_split_size_mb=N            (more than 20; 0 unsets it)
  roundup_power2_divisions=N     (0 or a power of two; or the bracket form [256:1,>:4])
  garbage_collection_threshold=F (in (0, 1); 0 turns it off)

It reports per device the peak reserved and allocated bytes, cudaMalloc calls and OOMs of both
replays, and for every recorded OOM whether each serves it, with the headroom. --recommend
tries a small grid (expandable segments, max_split_size_mb 128/256/512,
roundup_power2_divisions 4, garbage_collection_threshold 0.8/0.6) and ranks the settings:
` + analysis.WhatIfRanking + `.

The capacity (what PyTorch may reserve) is reserved + device_free at the first OOM event; else
--device-memory; else, when the trace shows cudaMalloc failures the allocator recovered from,
the recorded peak reserved; else unbounded (peaks only, no OOM verdicts). When the trace starts
after the allocator did, the replays start from the state rebuilt at its first event. The file
must hold a trace (torch.cuda.memory._record_memory_history).`,
		Example: `  memsnap whatif oom.pickle --set expandable_segments=True
  memsnap whatif oom.pickle --set max_split_size_mb=128 --set roundup_power2_divisions=4 --json
  memsnap whatif trace.pickle --recommend --device-memory 80GiB`,
		Args: needArgs(1, "a snapshot PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			var opt analysis.WhatIfOptions
			var err error
			if opt.Settings, err = whatIfSettings(sets); err != nil {
				return err
			}
			opt.Recommend = recommend
			if len(opt.Settings) == 0 && !recommend {
				return fmt.Errorf("give at least one --set KEY=VALUE (accepted keys: %s) or --recommend (see %s --help)", strings.Join(allocator.Keys, ", "), c.CommandPath())
			}
			if devSize != "" {
				if opt.DeviceMemory, err = parseSize(devSize); err != nil {
					return fmt.Errorf("--device-memory: %w", err)
				}
			}
			var dev *int
			if c.Flags().Changed("device") {
				dev = &device
			}
			snap, err := loadSnapshot(c.Context(), args[0], lo)
			if err != nil {
				return err
			}
			r, err := analysis.WhatIf(c.Context(), snap, dev, opt)
			if err != nil {
				return err
			}
			return emit(c, asJSON, r)
		},
	}
	lo.addFlags(c)
	c.Flags().StringArrayVar(&sets, "set", nil, "an allocator setting to change, KEY=VALUE (repeatable): expandable_segments, max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold")
	c.Flags().BoolVar(&recommend, "recommend", false, "try a small grid of settings and rank them by OOMs, then peak reserved")
	c.Flags().IntVar(&device, "device", 0, "only this CUDA device (default: every device with allocation events)")
	c.Flags().StringVar(&devSize, "device-memory", "", "what PyTorch may reserve on the device, e.g. 80GiB, when no OOM event measures it")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	return c
}
