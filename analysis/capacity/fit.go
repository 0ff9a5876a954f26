package capacity

import "math"

// Fit kinds: how one allocation's size depends on the batch size or sequence length.
const (
	FitFixed     = "fixed"
	FitLinear    = "linear"
	FitQuadratic = "quadratic"
)

// fit is size(x) = c0 + c1·x + c2·x², fitted to the sizes one allocation has in the files.
type fit struct {
	kind string
	c    [3]float64
	// above: the allocation exists only at sizes above this one (0: at every size). An
	// allocation recorded at the larger sizes only and absent from every smaller one is the
	// library choosing another algorithm (a cuBLAS or cuDNN workspace) past some size.
	above float64
}

func (f fit) at(x float64) float64 { return f.c[0] + f.c[1]*x + f.c[2]*x*x }

// sizeAt is the fitted size at x in whole bytes, at least 1.
func (f fit) sizeAt(x float64) int64 {
	if x <= f.above {
		return 0
	}
	v := math.Round(f.at(x))
	if v < 1 || math.IsNaN(v) {
		return 1
	}
	if v > math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return int64(v)
}

// fitTolerance is how far a recorded size may sit from a fit that still explains it: the
// allocator's 512-byte rounding, or 0.1% of the size.
func fitTolerance(y float64) float64 { return max(512, 0.001*math.Abs(y)) }

// fitSizes fits ys (sizes) over xs (distinct batch sizes or sequence lengths): fixed when every
// size is the same; else linear, unless three or more points leave a linear fit off one of
// them by more than the rounding (then quadratic: eager attention's T×T scores).
func fitSizes(xs, ys []float64) fit {
	same := true
	for _, y := range ys[1:] {
		same = same && y == ys[0]
	}
	if same || len(xs) < 2 {
		return fit{kind: FitFixed, c: [3]float64{ys[0]}}
	}
	lin := leastSquares(xs, ys, 1)
	if len(xs) < 3 || explains(lin, xs, ys) {
		return lin
	}
	return leastSquares(xs, ys, 2)
}

func explains(f fit, xs, ys []float64) bool {
	for i, x := range xs {
		if math.Abs(f.at(x)-ys[i]) > fitTolerance(ys[i]) {
			return false
		}
	}
	return true
}

// leastSquares fits a polynomial of degree 1 or 2 (x scaled to its largest value, so the normal
// equations stay well conditioned).
func leastSquares(xs, ys []float64, degree int) fit {
	s := 0.0
	for _, x := range xs {
		s = max(s, math.Abs(x))
	}
	if s == 0 {
		s = 1
	}
	n := degree + 1
	var m [3][4]float64
	for i, x := range xs {
		u := x / s
		pw := [3]float64{1, u, u * u}
		for r := 0; r < n; r++ {
			for c := 0; c < n; c++ {
				m[r][c] += pw[r] * pw[c]
			}
			m[r][n] += pw[r] * ys[i]
		}
	}
	// Gauss-Jordan with partial pivoting.
	for c := 0; c < n; c++ {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(m[r][c]) > math.Abs(m[p][c]) {
				p = r
			}
		}
		m[c], m[p] = m[p], m[c]
		if m[c][c] == 0 {
			continue
		}
		for r := 0; r < n; r++ {
			if r == c {
				continue
			}
			k := m[r][c] / m[c][c]
			for j := c; j <= n; j++ {
				m[r][j] -= k * m[c][j]
			}
		}
	}
	var f fit
	for r := 0; r < n; r++ {
		if m[r][r] != 0 {
			f.c[r] = m[r][n] / m[r][r]
		}
	}
	// Back from u = x/s to x.
	f.c[1] /= s
	f.c[2] /= s * s
	f.kind = FitLinear
	if degree == 2 {
		f.kind = FitQuadratic
	}
	return f
}
