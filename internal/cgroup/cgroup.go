// Package cgroup confines processes to CPUs (a cpuset) and to a CPU
// budget (a CFS quota) with Linux control groups, version 1, as root: what
// `coffer bench --pg-cpus` needs to give each PostgreSQL server cores and a
// budget of its own, as production does with servers of their own.
//
// A Set is the cgroups one run makes: a directory named after the run
// under the root of each hierarchy it uses (cpuset, cpu), one Group per
// confined part inside. A process placed in a group takes it along to
// every child it forks afterwards (a PostgreSQL server's new backends, a
// bench's coffer serve). Remove takes the calling process home and removes
// every directory the Set made.
//
// cgroup v2 (the unified hierarchy) is refused: there a process cannot
// join a group whose parent hands controllers down, which the calling
// process's own move (into its group and home again) runs into; a machine
// with v2 only can pin by hand (taskset) or boot with the v1 hierarchies.
package cgroup

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Root is where the kernel's cgroup hierarchies are mounted.
const Root = "/sys/fs/cgroup"

// Controllers a Set may use: cpuset confines to CPUs, cpu sets a quota.
const (
	cpuset = "cpuset"
	cpu    = "cpu"
)

// Check tells whether this process may make a Set with these controllers
// here, and if not, names what is missing.
func Check(cpus, quota bool) error { return check(Root, os.Geteuid(), controllers(cpus, quota)) }

func controllers(cpus, quota bool) []string {
	var cs []string
	if cpus {
		cs = append(cs, cpuset)
	}
	if quota {
		cs = append(cs, cpu)
	}
	return cs
}

// check is Check for the hierarchies under root, as user euid.
func check(root string, euid int, cs []string) error {
	if euid != 0 {
		return errors.New("confining to CPUs needs root: cgroups are made under " + root)
	}
	for _, c := range cs {
		if _, err := os.Stat(filepath.Join(root, c, "cgroup.procs")); err == nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
			return fmt.Errorf("%s is cgroup v2 (unified) only; confining to CPUs needs the cgroup v1 %s hierarchy (taskset pins by hand)", root, c)
		}
		return fmt.Errorf("no cgroup v1 %s hierarchy at %s", c, filepath.Join(root, c))
	}
	return nil
}

// QuotaPeriod is the period of a group's CPU quota: the group runs for
// its quota, then waits for the next period. The kernel's default period,
// 100 ms, would hold a request up to 100 ms at every throttle, which a
// slower CPU would not; a short one spreads the budget evenly, like one.
const QuotaPeriod = 10 * time.Millisecond

// QuotaCoresMin is the least quota: the kernel takes 1 ms at least.
const QuotaCoresMin = 0.1

// Set is the cgroups of one run. It is not safe for concurrent use.
type Set struct {
	root string
	// dirs are the Set's directory in each hierarchy it uses, home the
	// cgroup the calling process was in there.
	dirs, home map[string]string
	groups     []*Group
}

// Group is one confined part of a Set: a directory in each hierarchy
// whose limit it has.
type Group struct {
	dirs []string
	// quotaDir is the directory in the cpu hierarchy, if the group has a
	// quota.
	quotaDir string
}

// NewSet makes the Set name (a directory under each hierarchy's root),
// with the cpuset hierarchy if cpus and the cpu one if quota. Its cpuset
// spans every CPU and memory node of the root's.
func NewSet(name string, cpus, quota bool) (*Set, error) {
	return newSet(Root, os.Geteuid(), "/proc/self/cgroup", name, controllers(cpus, quota))
}

func newSet(root string, euid int, self, name string, cs []string) (*Set, error) {
	if err := check(root, euid, cs); err != nil {
		return nil, err
	}
	home, err := homes(self, cs)
	if err != nil {
		return nil, err
	}
	s := &Set{root: root, dirs: map[string]string{}, home: home}
	for _, c := range cs {
		dir := filepath.Join(root, c, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, errors.Join(fmt.Errorf("cgroup: %w", err), s.Remove())
		}
		s.dirs[c] = dir
		if c == cpuset {
			// A v1 cpuset starts with no CPU and no memory node: no
			// process may join it until both are set.
			if err := inherit(dir, "cpuset.cpus", "cpuset.mems"); err != nil {
				return nil, errors.Join(err, s.Remove())
			}
		}
	}
	return s, nil
}

// homes reads the cgroup of the calling process in each hierarchy from
// /proc/self/cgroup (self), lines "id:controller[,controller]:path".
func homes(self string, cs []string) (map[string]string, error) {
	raw, err := os.ReadFile(self)
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	home := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			home[c] = parts[2]
		}
	}
	for _, c := range cs {
		if _, ok := home[c]; !ok {
			return nil, fmt.Errorf("cgroup: %s does not name this process's %s cgroup", self, c)
		}
	}
	return home, nil
}

// inherit copies files from dir's parent into dir.
func inherit(dir string, files ...string) error {
	for _, f := range files {
		v, err := read(filepath.Join(filepath.Dir(dir), f))
		if err != nil {
			return err
		}
		if err := write(filepath.Join(dir, f), v); err != nil {
			return err
		}
	}
	return nil
}

// Group makes group name of the Set: confined to cpus (a CPU list such as
// "1" or "2-3", in the cpuset hierarchy) unless empty, and to quotaCores
// cores of CPU time (a CFS quota, in the cpu hierarchy) unless 0.
func (s *Set) Group(name, cpus string, quotaCores float64) (*Group, error) {
	g := &Group{}
	add := func(c string) (string, error) {
		parent, ok := s.dirs[c]
		if !ok {
			return "", fmt.Errorf("cgroup: the set has no %s hierarchy", c)
		}
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", fmt.Errorf("cgroup: %w", err)
		}
		g.dirs = append(g.dirs, dir)
		return dir, nil
	}
	s.groups = append(s.groups, g)
	if cpus != "" {
		dir, err := add(cpuset)
		if err != nil {
			return nil, err
		}
		if err := inherit(dir, "cpuset.mems"); err != nil {
			return nil, err
		}
		if err := write(filepath.Join(dir, "cpuset.cpus"), cpus); err != nil {
			return nil, err
		}
	}
	if quotaCores > 0 {
		dir, err := add(cpu)
		if err != nil {
			return nil, err
		}
		g.quotaDir = dir
		quota := int64(math.Round(quotaCores * float64(QuotaPeriod.Microseconds())))
		if err := write(filepath.Join(dir, "cpu.cfs_period_us"), strconv.FormatInt(QuotaPeriod.Microseconds(), 10)); err != nil {
			return nil, err
		}
		if err := write(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10)); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Add moves process pid (all its threads) into the group. Children it
// forks afterwards are born in it; those it forked before stay where they
// are.
func (g *Group) Add(pid int) error {
	for _, dir := range g.dirs {
		if err := write(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// Throttling reads the group's quota periods so far in which it ran
// (periods) and those in which its quota ran out before the period's end
// (throttled): how often the budget was what held it back. Zero without
// a quota.
func (g *Group) Throttling() (periods, throttled int64, err error) {
	if g.quotaDir == "" {
		return 0, 0, nil
	}
	stat, err := read(filepath.Join(g.quotaDir, "cpu.stat"))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(stat, "\n") {
		name, value, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseInt(value, 10, 64)
		switch name {
		case "nr_periods":
			periods = n
		case "nr_throttled":
			throttled = n
		}
	}
	return periods, throttled, nil
}

// Dirs are the group's directories, one per hierarchy.
func (g *Group) Dirs() []string { return g.dirs }

// removeWait bounds how long Remove waits for the processes of a group
// to leave it: one that has exited is still listed until its parent reaps
// it.
const removeWait = 5 * time.Second

// Remove takes the calling process back to the cgroups it was in when the
// Set was made and removes the Set's directories, groups first. A group
// still holding a process after removeWait is an error; the other
// directories are removed all the same.
func (s *Set) Remove() error {
	var errs []error
	for c := range s.dirs {
		home := filepath.Join(s.root, c, s.home[c], "cgroup.procs")
		if err := write(home, strconv.Itoa(os.Getpid())); err != nil {
			errs = append(errs, err)
		}
	}
	for _, g := range s.groups {
		for _, dir := range g.dirs {
			errs = append(errs, rmdir(dir))
		}
	}
	for _, dir := range s.dirs {
		errs = append(errs, rmdir(dir))
	}
	s.groups, s.dirs = nil, map[string]string{}
	return errors.Join(errs...)
}

// rmdir removes a cgroup directory, waiting up to removeWait while the
// processes in it are all exiting.
func rmdir(dir string) error {
	deadline := time.Now().Add(removeWait)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		procs, _ := read(filepath.Join(dir, "cgroup.procs"))
		if !errors.Is(err, syscall.EBUSY) || !exiting(strings.Fields(procs)) || time.Now().After(deadline) {
			return fmt.Errorf("cgroup: remove %s (processes in it: %q): %w", dir, procs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exiting tells whether there are processes and each has exited (a
// zombie) or is gone.
func exiting(pids []string) bool {
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		if state := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(state) > 0 && state[0] != "Z" && state[0] != "X" {
			return false
		}
	}
	return len(pids) > 0
}

func read(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	return strings.TrimSpace(string(raw)), nil
}

func write(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", value, path, err)
	}
	return nil
}

// AllowedCPUs is the CPU list process pid may run on (Cpus_allowed_list
// of /proc/PID/status): what its cpuset and affinity leave it.
func AllowedCPUs(pid int) (string, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(rest), nil
		}
	}
	return "", fmt.Errorf("cgroup: no Cpus_allowed_list for process %d", pid)
}

// ParseList reads a CPU list such as "0-3,6": the CPUs in ascending order.
func ParseList(list string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(list), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		last := first
		if err == nil && isRange {
			last, err = strconv.Atoi(hi)
		}
		if err != nil || first < 0 || last < first || len(cpus) > 0 && first <= cpus[len(cpus)-1] {
			return nil, fmt.Errorf("cgroup: %q is not a CPU list", list)
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// FormatList writes ascending CPUs as the kernel writes a CPU list, runs
// as ranges: "0-2,5".
func FormatList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		part := strconv.Itoa(cpus[i])
		if j > i {
			part += "-" + strconv.Itoa(cpus[j])
		}
		parts = append(parts, part)
		i = j + 1
	}
	return strings.Join(parts, ",")
}
