package analysis

import "testing"

// TestSiteText: one way to write a site with its function; no empty parentheses, no function
// repeated when the site already ends with it, and a function whose name is part of the file's
// kept.
func TestSiteText(t *testing.T) {
	for _, tc := range []struct{ site, function, want string }{
		{"model.py:41", "forward", "model.py:41 in forward"},
		{"train.py:52", "train", "train.py:52 in train"},
		{SiteNoStack, "", SiteNoStack},
		{"<no Python frame> MmBackward0", "MmBackward0", "<no Python frame> MmBackward0"},
	} {
		if got := SiteText(tc.site, tc.function); got != tc.want {
			t.Errorf("SiteText(%q, %q) = %q, want %q", tc.site, tc.function, got, tc.want)
		}
	}
}
