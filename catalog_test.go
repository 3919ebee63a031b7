package coffer

import "testing"

// TestParseRate: a rate reads as a config writes it, "A:B" (A coins of
// the pair's from currency make B of its to), integers > 0 with spaces
// around each allowed, and prints back so.
func TestParseRate(t *testing.T) {
	for in, want := range map[string]string{"1:100": "1:100", " 2 : 3 ": "2:3", "+1:2": "1:2", "10:1": "10:1"} {
		r, ok := ParseRate(in)
		if !ok || r.String() != want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %s", in, r, ok, want)
		}
	}
	if r, _ := ParseRate("1:100"); r != (Rate{Num: 100, Den: 1}) {
		t.Errorf("1:100 is %+v, want to = from × 100", r)
	}
	for _, in := range []string{"0:1", "1:0", "-1:2", "1", "1:2:3", "a:b", "", "1/100", "99999999999999999999:1"} {
		if r, ok := ParseRate(in); ok {
			t.Errorf("ParseRate(%q) = %+v, accepted", in, r)
		}
	}
}
