package bench

import (
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of CPU times in /proc/PID/stat: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds is the CPU time (user + system) of the processes, including
// that of their children already waited for. Missing processes count 0.
func cpuSeconds(pids []int) float64 {
	var ticks int64
	for _, pid := range pids {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces): state is
		// field 3; utime, stime, cutime, cstime are fields 14–17.
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		for _, i := range []int{11, 12, 13, 14} {
			if i < len(f) {
				n, _ := strconv.ParseInt(f[i], 10, 64)
				ticks += n
			}
		}
	}
	return float64(ticks) / clockTicks
}

// walsenders are those of pids that are PostgreSQL walsenders: they
// stream WAL to standbys and decode it for logical replication (the
// change feed), apart from the backends that run the statements.
func walsenders(pids []int) []int {
	var out []int
	for _, pid := range pids {
		cmd, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err == nil && strings.HasPrefix(string(cmd), "postgres: walsender") {
			out = append(out, pid)
		}
	}
	return out
}

// rssPeakBytes is the peak resident set (VmHWM) of a process, 0 if unknown.
func rssPeakBytes(pid int) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// machineTicks reads the first line of /proc/stat: the CPU time of the
// whole machine, and the part of it the hypervisor gave to other guests
// (steal). Zero if unknown.
func machineTicks() (total, steal int64) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal …
	for i := 1; i < len(f) && i <= 8; i++ {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		total += n
		if i == 8 {
			steal = n
		}
	}
	return total, steal
}
