# Writes protocols.pN.pickle: one snapshot-shaped object pickled with protocols 0 to 4
# (python3 gen_protocols.py). The loader must read all five to the same model.
import pickle

frame_a = {"filename": "model.py", "line": 214, "name": "MLP.forward"}
frame_b = {"filename": "C:\\work\\train.py", "line": 18446744073709551615, "name": "step \u00e9\u4e2d\U0001f600"}
frame_c = {"filename": "??", "line": 0, "name": "at::native::empty\nline two\\u0041 \x1a"}
stack = [frame_a, frame_b, frame_c]  # shared by a block and its alloc event
snap = {
    "segments": [
        {"device": 0, "address": 1 << 40, "total_size": 2 << 20, "allocated_size": 1024,
         "active_size": 1024, "requested_size": 1000, "stream": 0, "segment_type": "small",
         "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
         "blocks": [
             {"address": 1 << 40, "size": 1024, "requested_size": 1000, "state": "active_allocated", "frames": stack},
             {"address": (1 << 40) + 1024, "size": (2 << 20) - 1024, "requested_size": 0, "state": "inactive", "frames": []},
         ]},
        {"device": 1, "address": 3 << 40, "total_size": 20 << 20, "allocated_size": 0,
         "active_size": 0, "requested_size": 0, "stream": 140737488355328, "segment_type": "large",
         "segment_pool_id": (1, 7), "is_expandable": True, "frames": [frame_a],
         "blocks": [{"address": 3 << 40, "size": 20 << 20, "requested_size": 0, "state": "inactive", "frames": []}]},
    ],
    "device_traces": [
        [
            {"action": "segment_alloc", "addr": 1 << 40, "size": 2 << 20, "stream": 0, "time_us": 1700000000000000, "frames": [frame_a]},
            {"action": "alloc", "addr": 1 << 40, "size": 1024, "stream": 0, "time_us": 1700000000000001, "frames": stack,
             "compile_context": "N/A", "user_metadata": ""},
            {"action": "oom", "addr": 0, "size": 1 << 50, "device_free": 123456, "stream": 0, "time_us": 1700000000000002},
            {"action": "annotate", "addr": 0, "size": 0, "stream": 0, "time_us": 1700000000000003, "user_metadata": "x"},
        ],
        [],
    ],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "max_split_size": -1,
                           "garbage_collection_threshold": 0.5, "expandable_segments": True,
                           "roundup_power2_divisions": {"1": 4, "64": 8}, "pinned_num_register_threads": 1},
    "external_annotations": [{"name": "ProfilerStep#3", "stage": "START", "device": 0, "time_us": 1700000000000000}],
}
for proto in range(5):
    with open(f"protocols.p{proto}.pickle", "wb") as f:
        pickle.dump(snap, f, protocol=proto)
