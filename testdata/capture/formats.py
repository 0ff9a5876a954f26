"""Re-encode one snapshot in the other containers memsnap reads: pickle protocol 5, gzip,
gzip-compressed JSON (json.dumps indent=4, as users share them) and the oldest form (PyTorch <= 1.13,
and torch.cuda.memory_snapshot() today): a bare list of segments.

The protocol-2 TorchScript writer (restore_type_tag wrapping) is the C++ function
torch::cuda::_memory_snapshot_pickled(), used by libtorch programs and the R torch package; it is not
reachable from Python, so that fixture stays synthetic (analysis/pickle/writer, TypeTag option).

    python formats.py snapshots/summarize_basic.pickle
"""
import gzip
import json
import pickle
import sys


class _Refuse(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"snapshot needs no globals, refusing {module}.{name}")


def write_variants(path):
    with open(path, "rb") as f:
        snap = _Refuse(f).load()
    base = path[: -len(".pickle")] if path.endswith(".pickle") else path
    with open(base + "_p5.pickle", "wb") as f:
        pickle.dump(snap, f, protocol=5)
    with open(path, "rb") as f, gzip.open(path + ".gz", "wb", mtime=0) as g:
        g.write(f.read())
    with gzip.open(base + ".json.gz", "wt", mtime=0) as g:
        json.dump(snap, g, indent=4)
    with open(base + "_segment_list.pickle", "wb") as f:
        pickle.dump(snap["segments"], f, protocol=4)
    print(f"wrote {base}_p5.pickle, {path}.gz, {base}.json.gz, {base}_segment_list.pickle")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        write_variants(p)
