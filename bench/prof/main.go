// Command prof times the two phases of a memsnap command on one snapshot, the load and the
// analysis, in one process, N times (the fastest of each is printed), with the peak resident
// memory (anonymous and file-backed, sampled every 5 ms) and optional profiles. A development
// aid for the loader benchmark (bench/loader.sh):
//
//	go run ./bench/prof -cmd replay -n 3 -cpuprofile /tmp/cpu.prof /tmp/big.pickle
//
// -cmd is summarize, top-stacks, oom, fragmentation, replay, check (a peak budget), convert
// (a pickle, written nowhere), whatif (expandable segments), diff (the file against itself) or
// none (the load alone). With MEMSTATS=1 in the environment it prints the heap after each load.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/analysis/snapshot"
	"github.com/memsnap/memsnap/render"
)

func main() {
	cpu := flag.String("cpuprofile", "", "write a CPU profile to this file")
	mem := flag.String("memprofile", "", "write an allocation profile to this file")
	cmd := flag.String("cmd", "summarize", "the analysis: summarize, top-stacks, oom, fragmentation, replay, check, convert, whatif, plot, diff or none")
	n := flag.Int("n", 1, "repetitions (the fastest is printed)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: prof [-cmd NAME] [-n N] [-cpuprofile FILE] [-memprofile FILE] SNAPSHOT")
		os.Exit(2)
	}
	if err := run(*cmd, *n, *cpu, *mem, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "prof:", err)
		os.Exit(1)
	}
}

func run(cmd string, n int, cpu, mem, path string) error {
	debug.SetGCPercent(200) // as the CLI does
	if mem != "" {
		runtime.MemProfileRate = 64 << 10
	}
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx := context.Background()
	go sampleRSS()
	var minLoad, minAn time.Duration
	for i := range max(n, 1) {
		t0 := time.Now()
		snap, err := load.File(ctx, path, load.Options{})
		if err != nil {
			return err
		}
		t1 := time.Now()
		if os.Getenv("MEMSTATS") != "" {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Fprintf(os.Stderr, "after load: heap %d MiB in use, %d MiB from the OS, %d MiB allocated in all, %d GCs\n",
				ms.HeapInuse>>20, ms.HeapSys>>20, ms.TotalAlloc>>20, ms.NumGC)
		}
		switch cmd {
		case "none":
		case "summarize":
			_, err = analysis.Summarize(ctx, snap, analysis.SummaryOptions{})
		case "top-stacks":
			_, err = analysis.TopStacks(snap, analysis.TopStacksOptions{Device: analysis.AllDevices, GroupBy: "site", State: "allocated", Limit: 20})
		case "oom":
			_, err = analysis.OOMReport(ctx, snap, analysis.OOMOptions{})
		case "fragmentation":
			_, err = analysis.Fragmentation(snap, analysis.FragOptions{Device: analysis.AllDevices})
		case "replay":
			_, err = analysis.ReplaySnapshot(ctx, snap, nil, analysis.ReplayOptions{Limit: 10})
		case "check":
			_, err = analysis.Check(ctx, snap, analysis.CheckOptions{MaxPeakBytes: 1 << 40, MaxGrowthPercent: -1, Device: analysis.AllDevices})
		case "convert":
			err = writer.EncodeTo(ctx, io.Discard, snap, writer.Options{})
		case "whatif":
			_, err = analysis.WhatIf(ctx, snap, nil, analysis.WhatIfOptions{Settings: []analysis.WhatIfSetting{{Key: "expandable_segments", Value: "True"}}})
		case "plot":
			var pic *analysis.PictureResult
			if pic, err = analysis.Picture(ctx, snap, analysis.PictureOptions{Kind: analysis.PictureTimeline, Top: analysis.DefaultTimelineTop}); err == nil {
				err = render.Picture(io.Discard, pic, render.Options{Format: render.PNG, Width: render.DefaultWidth, Height: render.DefaultHeight})
			}
		case "diff":
			var other *snapshot.Snapshot
			if other, err = load.File(ctx, path, load.Options{}); err == nil {
				t1 = time.Now()
				_, err = analysis.Diff(snap, other, analysis.DiffOptions{Device: analysis.AllDevices})
			}
		default:
			return fmt.Errorf("unknown -cmd %q", cmd)
		}
		if err != nil {
			return err
		}
		t2 := time.Now()
		if i == 0 || t1.Sub(t0) < minLoad {
			minLoad = t1.Sub(t0)
		}
		if i == 0 || t2.Sub(t1) < minAn {
			minAn = t2.Sub(t1)
		}
		runtime.GC()
	}
	if mem != "" {
		f, err := os.Create(mem)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "load %v, %s %v (fastest of %d); peak RSS %d MiB: anonymous %d, file %d\n",
		minLoad.Round(time.Millisecond), cmd, minAn.Round(time.Millisecond), max(n, 1),
		peakTotal.Load()>>10, peakAnon.Load()>>10, peakFile.Load()>>10)
	return nil
}

var peakTotal, peakAnon, peakFile atomic.Int64

// sampleRSS records the peak resident memory (KiB), anonymous and file-backed, every 5 ms
// (Linux: /proc/self/status; elsewhere nothing).
func sampleRSS() {
	for {
		data, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return
		}
		var anon, file int64
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			v, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "RssAnon:":
				anon = v
			case "RssFile:":
				file = v
			}
		}
		if anon+file > peakTotal.Load() {
			peakTotal.Store(anon + file)
			peakAnon.Store(anon)
			peakFile.Store(file)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
