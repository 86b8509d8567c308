package integration

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// threadCPU returns process pid's CPU time (user + system, USER_HZ = 100)
// per thread group: its threads' names (/proc/<pid>/task/<tid>/stat's
// comm, 15 bytes at most in Linux) with their numbering taken off, so the
// broker's "data-plane-kafka-request-handler-0" and "-1" (cut to
// "data-plane-kafk") or "GC Thread#3" count together. Threads that ended
// are not in it: a difference of two snapshots counts only the threads of
// both, or of the later one. Empty when pid cannot be read.
func threadCPU(pid int) map[string]time.Duration {
	out := map[string]time.Duration{}
	if pid <= 0 {
		return out
	}
	dirs, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return out
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(fmt.Sprintf("/proc/%d/task", pid), d.Name(), "stat"))
		if err != nil {
			continue // the thread ended meanwhile
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) <= 12 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[threadGroup(s[open+1:end])] += time.Duration(u+st) * 10 * time.Millisecond
	}
	return out
}

// threadGroup is a thread name without its numbering: trailing digits and
// the separators before them ("GC Thread#3" → "GC Thread",
// "kafka-request-handler-1" → "kafka-request-handler").
func threadGroup(name string) string {
	g := strings.TrimRight(name, "0123456789")
	if g != name {
		g = strings.TrimRight(g, "#-_ ")
	}
	if g == "" {
		return name
	}
	return g
}

// threadCPUSince is the CPU time each thread group of pid used since the
// snapshot before (threadCPU).
func threadCPUSince(pid int, before map[string]time.Duration) map[string]time.Duration {
	used := map[string]time.Duration{}
	for g, t := range threadCPU(pid) {
		if d := t - before[g]; d > 0 {
			used[g] = d
		}
	}
	return used
}

// formatThreadCPU lists used's top n thread groups, the largest first, as
// "name 1.2 s", and the rest summed as "others"; "" when used is empty.
func formatThreadCPU(used map[string]time.Duration, n int) string {
	groups := slices.SortedFunc(maps.Keys(used), func(a, b string) int {
		if used[a] != used[b] {
			return int(used[b] - used[a])
		}
		return strings.Compare(a, b)
	})
	var parts []string
	var rest time.Duration
	for i, g := range groups {
		if i < n {
			parts = append(parts, fmt.Sprintf("%s %.1f s", g, used[g].Seconds()))
		} else {
			rest += used[g]
		}
	}
	if rest > 0 {
		parts = append(parts, fmt.Sprintf("others %.1f s", rest.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// jitCPU is the part of used spent by the JVM's JIT compiler threads
// (HotSpot's "C1 CompilerThread<n>" and "C2 CompilerThread<n>", cut to
// 15 bytes by Linux): a JVM's cost of its first hours of a workload, not
// of the workload.
func jitCPU(used map[string]time.Duration) time.Duration {
	var t time.Duration
	for g, d := range used {
		if strings.HasPrefix(g, "C1 Compiler") || strings.HasPrefix(g, "C2 Compiler") {
			t += d
		}
	}
	return t
}

// TestThreadGroup: numbered threads of one pool count together, names
// without numbering stay whole.
func TestThreadGroup(t *testing.T) {
	for name, want := range map[string]string{
		"GC Thread#3":     "GC Thread",
		"data-plane-kafk": "data-plane-kafk",
		"kafka-request-1": "kafka-request",
		"C2 CompilerThre": "C2 CompilerThre",
		"java":            "java",
		"1234":            "1234",
	} {
		if got := threadGroup(name); got != want {
			t.Errorf("threadGroup(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestThreadCPUOfThisProcess: this process's threads are read, and what
// one of them burns shows up in the difference.
func TestThreadCPUOfThisProcess(t *testing.T) {
	pid := os.Getpid()
	before := threadCPU(pid)
	if len(before) == 0 {
		t.Fatalf("no threads read under /proc/%d/task", pid)
	}
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
	}
	if got := formatThreadCPU(threadCPUSince(pid, before), 3); got == "" {
		t.Fatalf("300 ms of busy work counted nothing")
	}
}

// TestJITCPU: only the compiler threads count.
func TestJITCPU(t *testing.T) {
	used := map[string]time.Duration{"C2 CompilerThre": 3 * time.Second, "C1 CompilerThre": time.Second, "data-plane-kafk": 5 * time.Second, "GC Thread": time.Second}
	if got := jitCPU(used); got != 4*time.Second {
		t.Errorf("jitCPU = %v, want 4s", got)
	}
	if got, want := formatThreadCPU(used, 2), "data-plane-kafk 5.0 s, C2 CompilerThre 3.0 s, others 2.0 s"; got != want {
		t.Errorf("formatThreadCPU = %q, want %q", got, want)
	}
}
