package analysis

import "fmt"

// sizeHist counts a group's blocks by size, to recognise user containers.
type sizeHist map[int64]int

func (h sizeHist) add(size int64) { h[size]++ }

// dominant returns the most common size (the smallest on ties), its count and the total count.
func (h sizeHist) dominant() (size int64, count, total int) {
	for s, c := range h {
		total += c
		if c > count || (c == count && s < size) {
			size, count = s, c
		}
	}
	return size, count, total
}

// minContainerBlocks is the fewest same-size blocks that make a container.
const minContainerBlocks = 3

// containerGuess decides whether a site's live blocks are a user container: at least 3 blocks,
// 90% or more of them the same size, from one line of the user's own code whose stacks show no
// forward, backward, optimizer, model-building or communication frame (category "other"). Such
// memory is typically a Python list or dict that keeps one tensor per iteration
// (history.append(x)); a loss kept with its graph is not one (its site also holds the
// different-size log_softmax outputs). iterations, when above 0, is how many iterations of the
// trace the blocks were allocated in (more evidence). It returns the evidence, or "" when the
// site is not a container.
func containerGuess(kind, category, site, function string, h sizeHist, iterations int) string {
	if kind != SiteKindUser || category != CategoryOther {
		return ""
	}
	size, count, total := h.dominant()
	if count < minContainerBlocks || count*10 < total*9 {
		return ""
	}
	ev := fmt.Sprintf("%d live blocks of %s each from one line of your code (%s", count, FormatBytes(size), site)
	if function != "" {
		ev += " in " + function
	}
	ev += ") outside the forward and backward passes"
	if iterations > 1 {
		ev += fmt.Sprintf(", allocated in %d different iterations", iterations)
	}
	ev += ": a container (list, dict, deque) keeping one tensor per call, e.g. history.append(x); store x.detach().cpu() or x.item(), or bound the container"
	return ev
}
