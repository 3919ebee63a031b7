package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSetConfines makes a Set on this machine's real cgroup hierarchies
// (skipped without root and cgroup v1, and make test says so):
// a process placed in a group runs on the group's CPU only, and so does
// a child it forks afterwards; the quota reads back; the calling process
// joins a group and Remove takes it home; no directory is left.
func TestSetConfines(t *testing.T) {
	if err := Check(true, true); err != nil {
		t.Skip(err) // make test says so
	}
	allowed, err := AllowedCPUs(os.Getpid())
	must(t, err)
	cpus, err := ParseList(allowed)
	must(t, err)
	last := strconv.Itoa(cpus[len(cpus)-1])
	homeBefore, err := os.ReadFile("/proc/self/cgroup")
	must(t, err)

	name := "coffer-test-" + strconv.Itoa(os.Getpid())
	s, err := NewSet(name, true, true)
	must(t, err)
	removed := false
	t.Cleanup(func() {
		if !removed {
			_ = s.Remove()
		}
	})
	g, err := s.Group("server", last, 0.25)
	must(t, err)
	// A shell placed in the group, which forks a sleep once it is there.
	sh := exec.Command("sh", "-c", "read go; sleep 60 & echo $!; wait")
	stdin, err := sh.StdinPipe()
	must(t, err)
	stdout, err := sh.StdoutPipe()
	must(t, err)
	must(t, sh.Start())
	t.Cleanup(func() { _ = sh.Process.Kill(); _ = sh.Wait() })
	must(t, g.Add(sh.Process.Pid))
	_, err = stdin.Write([]byte("go\n"))
	must(t, err)
	line := make([]byte, 32)
	n, err := stdout.Read(line)
	must(t, err)
	child, err := strconv.Atoi(strings.TrimSpace(string(line[:n])))
	must(t, err)
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	for _, pid := range []int{sh.Process.Pid, child} {
		if got, err := AllowedCPUs(pid); err != nil || got != last {
			t.Fatalf("process %d runs on CPUs %q (%v), want %s", pid, got, err, last)
		}
	}
	if got := readFile(t, filepath.Join(Root, "cpuset", name, "server", "cpuset.effective_cpus")); got != last {
		t.Fatalf("cpuset.effective_cpus %q, want %s", got, last)
	}
	period, quota := readFile(t, filepath.Join(Root, "cpu", name, "server", "cpu.cfs_period_us")), readFile(t, filepath.Join(Root, "cpu", name, "server", "cpu.cfs_quota_us"))
	if period != "10000" || quota != "2500" {
		t.Fatalf("cpu.cfs_period_us %s, cpu.cfs_quota_us %s: want a quarter of 10 ms", period, quota)
	}
	// A busy loop in a group of a tenth of a core runs out of its quota.
	spin := exec.Command("sh", "-c", "while :; do :; done")
	must(t, spin.Start())
	t.Cleanup(func() { _ = spin.Process.Kill(); _ = spin.Wait() })
	tenth, err := s.Group("spin", "", 0.1)
	must(t, err)
	must(t, tenth.Add(spin.Process.Pid))
	for i := 0; ; i++ {
		periods, throttled, err := tenth.Throttling()
		must(t, err)
		if throttled > 0 && periods >= throttled {
			break
		}
		if i == 600 {
			t.Fatalf("a busy loop on a tenth of a core: %d periods, %d throttled after a minute", periods, throttled)
		}
		time.Sleep(100 * time.Millisecond)
	}
	must(t, spin.Process.Kill())
	_ = spin.Wait()
	if procs := readFile(t, filepath.Join(Root, "cpu", name, "server", "cgroup.procs")); !slices.Contains(strings.Fields(procs), strconv.Itoa(child)) {
		t.Fatalf("the child %d is not in the cpu group: %q", child, procs)
	}

	// The calling process in a group of its own, then home again.
	self, err := s.Group("self", FormatList(cpus), 0)
	must(t, err)
	must(t, self.Add(os.Getpid()))
	if home, _ := os.ReadFile("/proc/self/cgroup"); !strings.Contains(string(home), "cpuset:/"+name+"/self") {
		t.Fatalf("not moved: %s", home)
	}
	// The shell waits for the sleep, reaps it and exits.
	must(t, exec.Command("kill", strconv.Itoa(child)).Run())
	_ = sh.Wait()
	must(t, s.Remove())
	removed = true
	if home, _ := os.ReadFile("/proc/self/cgroup"); string(home) != string(homeBefore) {
		t.Fatalf("not home again:\n%s\nwas:\n%s", home, homeBefore)
	}
	for _, c := range []string{"cpuset", "cpu"} {
		if _, err := os.Stat(filepath.Join(Root, c, name)); !os.IsNotExist(err) {
			t.Fatalf("%s/%s left behind: %v", c, name, err)
		}
	}
}

// A Set whose group still holds a process says so, and removes the rest.
func TestRemoveNamesAProcessLeft(t *testing.T) {
	if err := Check(false, true); err != nil {
		t.Skip(err) // make test says so
	}
	name := "coffer-test-busy-" + strconv.Itoa(os.Getpid())
	s, err := NewSet(name, false, true)
	must(t, err)
	g, err := s.Group("server", "", 0.5)
	must(t, err)
	sleep := exec.Command("sleep", "60")
	must(t, sleep.Start())
	must(t, g.Add(sleep.Process.Pid))
	err = s.Remove()
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(sleep.Process.Pid)) {
		t.Fatalf("Remove with a process left: %v", err)
	}
	must(t, rmdir(g.Dirs()[0]))
	must(t, rmdir(filepath.Join(Root, "cpu", name)))
}

// The refusals name what is missing.
func TestCheckRefuses(t *testing.T) {
	v1, v2, none := t.TempDir(), t.TempDir(), t.TempDir()
	for _, c := range []string{"cpuset", "cpu"} {
		must(t, os.MkdirAll(filepath.Join(v1, c), 0o755))
		must(t, os.WriteFile(filepath.Join(v1, c, "cgroup.procs"), nil, 0o644))
	}
	must(t, os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpuset cpu"), 0o644))
	for _, tc := range []struct {
		root string
		euid int
		cs   []string
		want string
	}{
		{v1, 1000, []string{"cpuset"}, "needs root"},
		{v2, 0, []string{"cpu"}, "cgroup v2 (unified) only"},
		{none, 0, []string{"cpuset"}, "no cgroup v1 cpuset hierarchy at " + filepath.Join(none, "cpuset")},
		{v1, 0, []string{"cpuset", "cpu"}, ""},
	} {
		err := check(tc.root, tc.euid, tc.cs)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("check(%s, %d, %v) = %v, want %q", tc.root, tc.euid, tc.cs, err, tc.want)
		}
	}
}

func TestCPUList(t *testing.T) {
	for list, want := range map[string][]int{"0": {0}, "0-3": {0, 1, 2, 3}, "0-1,4,6-7": {0, 1, 4, 6, 7}} {
		got, err := ParseList(list)
		if err != nil || !slices.Equal(got, want) || FormatList(got) != list {
			t.Errorf("%q: %v %v, formatted %q", list, got, err, FormatList(got))
		}
	}
	for _, bad := range []string{"", "a", "3-1", "1,1", "2,0", "-1"} {
		if _, err := ParseList(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	must(t, err)
	return strings.TrimSpace(string(raw))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
