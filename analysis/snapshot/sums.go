package snapshot

// SegmentSums are the byte sums over one segment's blocks, computed in one place so every
// analysis adds blocks up the same way. PyTorch's own segment fields follow the same rules:
// allocated_size counts active_allocated blocks, active_size adds active_pending_free ones, and
// requested_size sums requested_size over active blocks, pending-free included.
type SegmentSums struct {
	Allocated          int64 // active_allocated blocks
	PendingFree        int64 // active_pending_free blocks: freed by Python, still in use by a stream
	Inactive           int64 // cached free blocks
	Requested          int64 // requested_size over active blocks (allocated and pending free), as PyTorch sums it
	RequestedAllocated int64 // requested_size over active_allocated blocks only
}

// Active is allocated plus pending-free bytes: what the allocator cannot hand out.
func (s SegmentSums) Active() int64 { return s.Allocated + s.PendingFree }

// Sums adds up the segment's blocks by state.
func (s *Segment) Sums() SegmentSums {
	var out SegmentSums
	for _, b := range s.Blocks {
		switch b.State {
		case StateActiveAllocated:
			out.Allocated += b.Size
			out.Requested += b.RequestedSize
			out.RequestedAllocated += b.RequestedSize
		case StateActivePendingFree:
			out.PendingFree += b.Size
			out.Requested += b.RequestedSize
		case StateInactive:
			out.Inactive += b.Size
		}
	}
	return out
}
