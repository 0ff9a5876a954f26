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

// containerEvidence decides whether a site's live blocks are a user container: at least 3
// blocks, 90% or more of them the same size, from one line of the user's own code whose role is
// "other" (no forward, backward, optimizer, model-building or communication frame near the
// allocation). Such memory is typically a Python list or dict that keeps one tensor per step
// (history.append(x)). across is the caller's proof that the blocks accumulate across steps
// ("allocated in 3 different steps", "grew from 5 to 50 blocks between the two snapshots"), or
// acrossNoTrace for a guess. It returns the evidence, or "" when the site is not a container.
func containerEvidence(site SiteIdentity, h sizeHist, across string) string {
	if site.Kind != SiteKindUser || site.UserSite == "" || across == "" {
		return ""
	}
	size, count, total := h.dominant()
	if count < minContainerBlocks || count*10 < total*9 {
		return ""
	}
	ev := fmt.Sprintf("%d live blocks of %s each from one line of your code (%s", count, FormatBytes(size), site.Site)
	if site.Function != "" {
		ev += " in " + site.Function
	}
	ev += ") outside the forward and backward passes, " + across
	if across == acrossNoTrace {
		ev = "guess: " + ev
	}
	return ev + ": a container (list, dict, deque) keeping one tensor per step, e.g. history.append(x); store x.detach().cpu() or x.item(), or bound the container"
}

// Why blocks accumulate across steps, as containerEvidence takes it.
const acrossNoTrace = "but the file has no trace, so it cannot show that they come from different steps"

func acrossSteps(steps int) string {
	if steps < 2 {
		return ""
	}
	return fmt.Sprintf("allocated in %d different steps", steps)
}

// containerGuess is containerEvidence for live blocks of device dev allocated at the given trace
// events: steps come from the device's trace; without a trace it is a guess, and with a trace
// whose steps are unknown it is never a container.
func (r *Roles) containerGuess(dev int, site SiteIdentity, h sizeHist, allocs []int) string {
	d := r.device(dev)
	if !d.hasTrace {
		return containerEvidence(site, h, acrossNoTrace)
	}
	return containerEvidence(site, h, acrossSteps(stepsSpanned(d.steps.Starts, allocs)))
}
