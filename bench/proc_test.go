package bench

import (
	"os"
	"testing"
	"time"
)

// TestProcCounters reads this process's and the machine's counters: a
// parse that broke would read zeros, and the costs would vanish from the
// report.
func TestProcCounters(t *testing.T) {
	// Spin until the kernel has counted a tick of CPU time (10 ms).
	deadline := time.Now().Add(2 * time.Second)
	for cpuSeconds([]int{os.Getpid()}) == 0 && time.Now().Before(deadline) {
	}
	if cpuSeconds([]int{os.Getpid()}) <= 0 {
		t.Fatal("no CPU time read for this process")
	}
	if rss := rssPeakBytes(os.Getpid()); rss <= 0 {
		t.Fatalf("peak RSS %d", rss)
	}
	total, steal := machineTicks()
	if total <= 0 || steal < 0 || steal > total {
		t.Fatalf("machine ticks %d, steal %d", total, steal)
	}
	if cpuSeconds([]int{1 << 30}) != 0 {
		t.Fatal("a missing process has no CPU time")
	}
}

// TestWalsendersCPUIsPerProcess: a walsender that ended during a run
// (the relay stopped) takes nothing back from the run's figure, and one
// that began counts wholly.
func TestWalsendersCPUIsPerProcess(t *testing.T) {
	var s sideTotals
	s.add(counters{walsenders: map[int]float64{1: 5, 2: 3}}, counters{walsenders: map[int]float64{1: 6, 3: 2}}, 1)
	if s.walsenderCPU != 3 {
		t.Fatalf("walsenders' CPU %v, want 3", s.walsenderCPU)
	}
}
