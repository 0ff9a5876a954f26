package sim

import (
	"fmt"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TrainingLoop returns the snapshot taken at the end of a correct training loop of the small
// model run for steps steps. With profiled, every step runs under torch.profiler, which records
// ProfilerStep#N START/END annotations around it (numbered from 1); without, the trace has no
// annotation at all and iterations can only be inferred from its own periodicity. Both traces
// hold exactly the same events (annotations are not trace events). Ground truth: every step
// begins with the fc1 allocation of block 0 (model.py:41; block 1's fc1 has the same stack);
// step 1 also creates the AdamW state, so later steps allocate 19 tensors each (forward 11,
// backward 8) and step 1 allocates 34.
func TrainingLoop(steps int, profiled bool) *snapshot.Snapshot {
	t := newTrainer(New(Config{}), smallDims)
	t.setup()
	for i := 1; i <= steps; i++ {
		if profiled {
			t.s.Annotate(fmt.Sprintf("ProfilerStep#%d", i), "START")
		}
		t.step()
		if profiled {
			t.s.Annotate(fmt.Sprintf("ProfilerStep#%d", i), "END")
		}
	}
	return t.s.Snapshot()
}
