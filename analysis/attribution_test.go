package analysis

import (
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

func fr(file string, line int, name string) snapshot.Frame {
	return snapshot.Frame{Filename: file, Line: int64(line), Name: name}
}

func TestAttributeSite(t *testing.T) {
	sp := "/opt/conda/lib/python3.11/site-packages/"
	tests := []struct {
		name     string
		opt      AttributionOptions
		frames   []snapshot.Frame
		noStack  bool
		caps     snapshot.Capabilities
		site     string
		kind     string
		category string
	}{
		{"user over torch", AttributionOptions{}, []snapshot.Frame{
			fr("??", 0, "c10::cuda::CUDACachingAllocator::malloc"),
			fr(sp+"torch/nn/modules/linear.py", 125, "forward"),
			fr(sp+"torch/nn/modules/module.py", 1747, "_call_impl"),
			fr("/home/u/proj/model.py", 214, "forward"),
			fr("/home/u/proj/train.py", 30, "main"),
			fr("/usr/lib/python3.11/runpy.py", 88, "_run_code"),
		}, false, snapshot.Capabilities{}, "model.py:214", SiteKindUser, CategoryActivation},
		{"transformers modeling is model code", AttributionOptions{}, []snapshot.Frame{
			fr(sp+"torch/nn/functional.py", 2000, "softmax"),
			fr(sp+"transformers/models/llama/modeling_llama.py", 300, "forward"),
			fr(sp+"accelerate/hooks.py", 170, "new_forward"),
			fr("run.py", 12, "<module>"),
		}, false, snapshot.Capabilities{}, "modeling_llama.py:300", SiteKindUser, CategoryActivation},
		{"windows paths", AttributionOptions{}, []snapshot.Frame{
			fr(`C:\Users\me\venv\Lib\site-packages\torch\optim\adamw.py`, 500, "_init_group"),
			fr(`D:\work\cs336\train.py`, 77, "train_step"),
		}, false, snapshot.Capabilities{}, "train.py:77", SiteKindUser, CategoryOptimizerState},
		{"torch fallback", AttributionOptions{}, []snapshot.Frame{
			fr(sp+"torch/optim/adam.py", 400, "_multi_tensor_adam"),
			fr(sp+"torch/optim/optimizer.py", 480, "wrapper"),
			fr("/usr/lib/python3.11/threading.py", 900, "run"),
		}, false, snapshot.Capabilities{}, "adam.py:400", SiteKindTorch, CategoryOptimizerState},
		{"no python frame, autograd op", AttributionOptions{}, []snapshot.Frame{
			fr("??", 0, "at::native::mm"),
			fr("", 0, "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)"),
			fr("libtorch_cpu.so", 0, "torch::autograd::Engine::thread_main"),
		}, false, snapshot.Capabilities{CppFrames: true}, "<no Python frame> MmBackward0", SiteKindNone, CategoryBackwardTemporary},
		{"empty python-only stack", AttributionOptions{}, nil, false,
			snapshot.Capabilities{PythonOnly: true}, SiteNoPython, SiteKindNone, CategoryOther},
		{"no stack", AttributionOptions{}, nil, true, snapshot.Capabilities{}, SiteNoStack, SiteKindNone, CategoryOther},
		{"library skipped", AttributionOptions{}, []snapshot.Frame{
			fr(sp+"torch/_tensor.py", 600, "to"),
			fr(sp+"lightning/pytorch/core/module.py", 44, "transfer"),
			fr("/src/app/data.py", 9, "load_batch"),
		}, false, snapshot.Capabilities{}, "data.py:9", SiteKindUser, CategoryOther},
		{"user root wins", AttributionOptions{UserRoots: []string{`C:\src\app`}}, []snapshot.Frame{
			fr("/other/helpers.py", 5, "helper"),
			fr(`C:\src\app\main.py`, 50, "main"),
		}, false, snapshot.Capabilities{}, "main.py:50", SiteKindUser, CategoryOther},
		{"skip regex", AttributionOptions{Skip: []string{`helpers\.py`}}, []snapshot.Frame{
			fr("/w/helpers.py", 5, "helper"),
			fr("/w/main.py", 50, "main"),
		}, false, snapshot.Capabilities{}, "main.py:50", SiteKindUser, CategoryOther},
		{"keep regex makes a library frame the site", AttributionOptions{Keep: []string{`mylib/`}}, []snapshot.Frame{
			fr(sp+"mylib/layers.py", 8, "make"),
			fr("/w/main.py", 50, "main"),
		}, false, snapshot.Capabilities{}, "layers.py:8", SiteKindUser, CategoryOther},
		{"parameter", AttributionOptions{}, []snapshot.Frame{
			fr(sp+"torch/nn/modules/module.py", 1300, "convert"),
			fr(sp+"torch/nn/modules/module.py", 900, "_apply"),
			fr("/w/main.py", 20, "main"),
		}, false, snapshot.Capabilities{}, "main.py:20", SiteKindUser, CategoryParameter},
		{"communication", AttributionOptions{}, []snapshot.Frame{
			fr(sp+"torch/distributed/distributed_c10d.py", 2500, "all_reduce"),
			fr("/w/main.py", 21, "sync"),
		}, false, snapshot.Capabilities{}, "main.py:21", SiteKindUser, CategoryCommunication},
		{"python 3.13 unknown line", AttributionOptions{}, []snapshot.Frame{
			{Filename: "/w/main.py", Line: snapshot.LineUnknown, Name: "main"},
		}, false, snapshot.Capabilities{}, "main.py:?", SiteKindUser, CategoryOther},
		{"frozen and importlib are runtime", AttributionOptions{}, []snapshot.Frame{
			fr("<frozen importlib._bootstrap>", 1, "_call_with_frames_removed"),
			fr(sp+"torch/cuda/__init__.py", 10, "init"),
		}, false, snapshot.Capabilities{}, "__init__.py:10", SiteKindTorch, CategoryOther},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAttributor(tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			at := a.AttributeFrames(tc.frames, tc.noStack, tc.caps)
			if at.Site != tc.site || at.Kind != tc.kind || at.Category != tc.category {
				t.Errorf("got site %q kind %q category %q (%s), want %q %q %q", at.Site, at.Kind, at.Category, at.Evidence, tc.site, tc.kind, tc.category)
			}
			if at.Stack == nil {
				t.Error("nil stack")
			}
		})
	}
}

func TestAttributorBadRegex(t *testing.T) {
	if _, err := NewAttributor(AttributionOptions{Skip: []string{"("}}); err == nil {
		t.Error("bad skip regex accepted")
	}
	if _, err := NewAttributor(AttributionOptions{Keep: []string{"[a"}}); err == nil {
		t.Error("bad keep regex accepted")
	}
}

func TestFilteredStack(t *testing.T) {
	sp := "/venv/lib/python3.11/site-packages/"
	a := DefaultAttributor()
	at := a.AttributeFrames([]snapshot.Frame{
		fr("??", 0, "malloc"),
		fr(sp+"torch/nn/functional.py", 10, "linear"),
		fr(sp+"torch/nn/modules/module.py", 1747, "_call_impl"),
		fr("/w/proj/model.py", 5, "forward"),
		fr(sp+"torch/nn/modules/module.py", 1747, "_call_impl"),
		fr("/w/proj/train.py", 9, "main"),
	}, false, snapshot.Capabilities{})
	want := []string{"torch/nn/functional.py:10 in linear", "w/proj/model.py:5 in forward", "w/proj/train.py:9 in main"}
	if len(at.Stack) != len(want) {
		t.Fatalf("stack = %q", at.Stack)
	}
	for i := range want {
		if at.Stack[i] != want[i] {
			t.Errorf("stack[%d] = %q, want %q", i, at.Stack[i], want[i])
		}
	}
}
