package evals

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCaptureKitCompiles byte-compiles every capture script (torch is not needed for that; the
// scripts cannot run without a GPU).
func TestCaptureKitCompiles(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: cannot byte-compile testdata/capture/*.py")
	}
	scripts, err := filepath.Glob(filepath.Join("..", "testdata", "capture", "*.py"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no capture scripts: %v", err)
	}
	// One interpreter for all scripts (python3 starts slowly); compiled files go to a temp dir.
	prog := `import py_compile, sys, os
bad = 0
for s in sys.argv[2:]:
    try:
        py_compile.compile(s, cfile=os.path.join(sys.argv[1], os.path.basename(s) + "c"), doraise=True)
    except py_compile.PyCompileError as e:
        print(e.msg)
        bad += 1
sys.exit(bad)`
	args := append([]string{"-c", prog, t.TempDir()}, scripts...)
	if out, err := exec.Command(py, args...).CombinedOutput(); err != nil {
		t.Errorf("capture scripts do not compile: %v\n%s", err, out)
	}
}

// TestCaptureKitCoversScenarios checks that every scenario fixture has a capture script that
// writes a file of the same name.
func TestCaptureKitCoversScenarios(t *testing.T) {
	scripts, err := filepath.Glob(filepath.Join("..", "testdata", "capture", "*.py"))
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, s := range scripts {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	text := all.String()
	for _, name := range []string{
		"summarize_basic.pickle", "retained_graph_step5.pickle", "retained_graph_step50.pickle",
		"growing_container_step5.pickle", "growing_container_step50.pickle", "no_growth_step5.pickle",
		"no_growth_step50.pickle", "optimizer_first_step_before.pickle", "optimizer_step10.pickle",
		"activation_oom.pickle", "fragmentation_oom.pickle", "outside_pytorch_oom.pickle",
		"cross_stream_pending.pickle", "backward_no_python_frames.pickle", `rank{rank}.pickle`,
		"_p5.pickle", ".json.gz", "_segment_list.pickle",
	} {
		if !strings.Contains(text, name) {
			t.Errorf("no capture script writes %s", name)
		}
	}
}
