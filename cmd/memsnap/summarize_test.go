package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const scenarios = "../../testdata/scenarios"

// run executes the CLI in-process and returns stdout and the error main would print.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

type totals struct {
	Device           int   `json:"device"`
	ReservedBytes    int64 `json:"reserved_bytes"`
	AllocatedBytes   int64 `json:"allocated_bytes"`
	PendingFreeBytes int64 `json:"pending_free_bytes"`
	InactiveBytes    int64 `json:"inactive_bytes"`
	RequestedBytes   int64 `json:"requested_bytes"`
	Segments         int   `json:"segments"`
	Blocks           int   `json:"blocks"`
}

type summaryJSON struct {
	Devices []totals `json:"devices"`
	Totals  totals   `json:"totals"`
	Ranks   []struct {
		Rank   int    `json:"rank"`
		File   string `json:"file"`
		Totals totals `json:"totals"`
	} `json:"ranks"`
	Notes []string `json:"notes"`
}

func summarizeJSON(t *testing.T, args ...string) summaryJSON {
	t.Helper()
	out, err := run(t, args...)
	if err != nil {
		t.Fatalf("memsnap %s: %v", strings.Join(args, " "), err)
	}
	var s summaryJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	return s
}

// The expected numbers were computed independently with CPython's pickle over the same files.
var basicTotals = totals{Device: 0, ReservedBytes: 153092096, AllocatedBytes: 84677120, PendingFreeBytes: 0,
	InactiveBytes: 68414976, RequestedBytes: 84674580, Segments: 10, Blocks: 32}

func TestSummarizeEveryContainerGivesSameTotals(t *testing.T) {
	for _, name := range []string{"summarize_basic.pickle", "summarize_basic_p2_typetag.pickle", "summarize_basic_p5.pickle",
		"summarize_basic.pickle.gz", "summarize_basic.json.gz", "summarize_basic_segment_list.pickle",
		"summarize_basic_legacy20.pickle", "summarize_basic_list_per_traceback.pickle", "summarize_basic_trailing_nul.pickle"} {
		t.Run(name, func(t *testing.T) {
			s := summarizeJSON(t, "summarize", filepath.Join(scenarios, name), "--json") // flag after the path
			want := basicTotals
			want.Device = 0
			if len(s.Devices) != 1 || s.Devices[0] != want {
				t.Fatalf("devices %+v, want [%+v]", s.Devices, want)
			}
			if s.Totals != want {
				t.Fatalf("totals %+v", s.Totals)
			}
		})
	}
}

func TestSummarizeRanks(t *testing.T) {
	s := summarizeJSON(t, "summarize", "--json", filepath.Join(scenarios, "multirank"))
	small := totals{ReservedBytes: 130023424, AllocatedBytes: 76026368, InactiveBytes: 53997056, RequestedBytes: 76023828, Segments: 8, Blocks: 28}
	big := totals{ReservedBytes: 1740636160, AllocatedBytes: 1686639104, InactiveBytes: 53997056, RequestedBytes: 1686636564, Segments: 11, Blocks: 31}
	if len(s.Ranks) != 4 {
		t.Fatalf("ranks %+v", s.Ranks)
	}
	for i, r := range s.Ranks {
		want := small
		if i == 1 {
			want = big
		}
		if r.Rank != i || filepath.Base(r.File) != "rank"+string(rune('0'+i))+".pickle" || r.Totals != want {
			t.Errorf("rank %d: %+v, want totals %+v", i, r, want)
		}
		if s.Devices[i].Device != i {
			t.Errorf("rank %d device %d", i, s.Devices[i].Device)
		}
	}
	if s.Totals.ReservedBytes != 3*small.ReservedBytes+big.ReservedBytes || s.Totals.Blocks != 3*28+31 {
		t.Errorf("totals %+v", s.Totals)
	}
	if len(s.Notes) != 4 || !strings.Contains(s.Notes[0], "rank 1 is an outlier: allocated 1.6 GiB vs median 72.5 MiB") ||
		!strings.Contains(s.Notes[2], "data-parallel replication (DDP style)") || !strings.Contains(s.Notes[3], "FSDP") {
		t.Errorf("notes %q, want rank 1 named as the outlier and the DDP replication with its fix", s.Notes)
	}
}

func TestSummarizeDeviceAndPendingFree(t *testing.T) {
	s := summarizeJSON(t, "summarize", "--device", "0", "--json", filepath.Join(scenarios, "cross_stream_pending.pickle"))
	want := totals{ReservedBytes: 23068672, AllocatedBytes: 524288, PendingFreeBytes: 4194304, InactiveBytes: 18350080, RequestedBytes: 524288, Segments: 2, Blocks: 6}
	if len(s.Devices) != 1 || s.Devices[0] != want {
		t.Fatalf("devices %+v, want %+v", s.Devices, want)
	}
	if _, err := run(t, "summarize", "--device", "3", filepath.Join(scenarios, "cross_stream_pending.pickle")); err == nil || !strings.Contains(err.Error(), "no device 3 (the file has devices [0])") {
		t.Fatalf("err %v", err)
	}
}

func TestSummarizeStdinAndText(t *testing.T) {
	f, err := os.Open(filepath.Join(scenarios, "summarize_basic.pickle.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = old }()
	out, err := run(t, "summarize", "-")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"total: reserved 146 MiB, allocated 80.8 MiB", "10 segments, 32 blocks", "private(1,0) pool", "peak allocated"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}

func TestMaxTraceEvents(t *testing.T) {
	out, err := run(t, "summarize", filepath.Join(scenarios, "summarize_basic.pickle"), "--json", "--max-trace-events", "10")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Devices []struct {
			Trace struct {
				Events        int   `json:"events"`
				DroppedEvents int64 `json:"dropped_events"`
			} `json:"trace"`
		} `json:"devices"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	full, err := run(t, "summarize", filepath.Join(scenarios, "summarize_basic.pickle"), "--json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Devices []struct {
			Trace struct {
				Events int `json:"events"`
			} `json:"trace"`
		} `json:"devices"`
	}
	if err := json.Unmarshal([]byte(full), &f); err != nil {
		t.Fatal(err)
	}
	if len(s.Devices) != 1 || s.Devices[0].Trace.Events != 10 || int(s.Devices[0].Trace.DroppedEvents)+10 != f.Devices[0].Trace.Events {
		t.Fatalf("bounded trace %+v, full %+v", s.Devices, f.Devices)
	}
}

func TestCLIErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pickle")
	os.WriteFile(bad, []byte("\x80\x04\xff"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"summarize", filepath.Join(dir, "missing.pickle")}, "missing.pickle: no such file"},
		{[]string{"summarize", bad}, "bad.pickle: corrupt pickle: unsupported or invalid opcode 0xff (at byte 2)"},
		{[]string{"summarize"}, "summarize needs a snapshot PATH"},
		{[]string{"summarize", "--bogus", bad}, "unknown flag: --bogus (see memsnap summarize --help)"},
		{[]string{"diff", "-", "-"}, "only one of BEFORE and AFTER can be standard input"},
	} {
		_, err := run(t, c.args...)
		if err == nil || !strings.Contains(oneLine(err), c.want) || exitCode(err) != 2 {
			t.Errorf("%v: err %v (exit %d), want %q and exit 2", c.args, err, exitCode(err), c.want)
		}
	}
	out, err := run(t, "summarize", "--help")
	if err != nil || !strings.Contains(out, "--max-trace-events") {
		t.Errorf("--help: %v\n%s", err, out)
	}
}

func TestSummarizeRanksOneDevice(t *testing.T) {
	s := summarizeJSON(t, "summarize", "--json", "--device", "1", filepath.Join(scenarios, "multirank"))
	if len(s.Ranks) != 1 || s.Ranks[0].Rank != 1 || len(s.Devices) != 1 || s.Devices[0].Device != 1 || s.Totals.ReservedBytes != 1740636160 {
		t.Fatalf("ranks %+v devices %+v totals %+v", s.Ranks, s.Devices, s.Totals)
	}
	if _, err := run(t, "summarize", "--device", "7", filepath.Join(scenarios, "multirank")); err == nil || !strings.Contains(err.Error(), "multirank: no rank has device 7") {
		t.Fatalf("err %v", err)
	}
}

func TestNegativeFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"summarize", "--device", "-3", filepath.Join(scenarios, "summarize_basic.pickle")},
		{"top-stacks", "--device=-1", filepath.Join(scenarios, "summarize_basic.pickle")},
		{"summarize", "--max-trace-events", "-1", filepath.Join(scenarios, "summarize_basic.pickle")},
	} {
		_, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "must not be negative") || exitCode(err) != 2 {
			t.Errorf("%v: err %v", args, err)
		}
	}
}

func TestMaxDecompressedFlag(t *testing.T) {
	gz := scenarios + "/summarize_basic.pickle.gz"
	_, err := run(t, "summarize", gz, "--max-decompressed", "1KiB")
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "decompresses to more than 1 KiB, the limit for gzip input (raise it with --max-decompressed BYTES, or -1 for none)") {
		t.Fatalf("1 KiB limit: %v", err)
	}
	for _, v := range []string{"-1", "1GiB"} {
		if out, err := run(t, "summarize", gz, "--max-decompressed", v); err != nil || !strings.Contains(out, "allocated 80.8 MiB") {
			t.Fatalf("--max-decompressed %s: %v\n%s", v, err, out)
		}
	}
	if _, err := run(t, "summarize", gz, "--max-decompressed", "0"); err == nil || !strings.Contains(err.Error(), "use -1 for no limit") {
		t.Fatalf("0: %v", err)
	}
}
