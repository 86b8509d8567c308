package stage

import (
	"sync"
	"time"
)

// This file notices the process standing still: stopped by SIGSTOP, a
// VM's or container's pause, a laptop's sleep. A transaction open across
// such a stall is aborted by the broker at its timeout although the stage
// did little work in it; txntimeout.go must not take that for an attempt
// too large for the timeout (a longer timeout would only make every later
// failover of the stage's tasks slower).

// stallTick is how often the stall watch's goroutine wakes; stallMin is
// how much later than a tick a wake must come to be recorded as a stall.
// A Go process that runs never sleeps past its timer by seconds: a GC
// pause is milliseconds, scheduling delay on a loaded machine tens of
// milliseconds.
const (
	stallTick = 100 * time.Millisecond
	stallMin  = time.Second
)

// stallWatch is the process's stall record: last is the watch's latest
// wake, stalls the most recent stalls (at most 64), oldest first.
var stallWatch struct {
	once   sync.Once
	mu     sync.Mutex
	last   time.Time
	stalls []stall
}

// stall is one stretch [from, to) in which the watch did not wake.
type stall struct{ from, to time.Time }

// startStallWatch starts the process's stall watch once; later calls do
// nothing. The goroutine lives as long as the process.
func startStallWatch() {
	stallWatch.once.Do(func() {
		stallWatch.last = time.Now()
		go func() {
			for {
				time.Sleep(stallTick)
				noteWake(time.Now())
			}
		}()
	})
}

// noteWake records a wake of the watch at now, and the stall before it
// if the wake came stallMin or more late.
func noteWake(now time.Time) {
	stallWatch.mu.Lock()
	defer stallWatch.mu.Unlock()
	if now.Sub(stallWatch.last) >= stallTick+stallMin {
		stallWatch.stalls = append(stallWatch.stalls, stall{from: stallWatch.last, to: now})
		if n := len(stallWatch.stalls); n > 64 {
			stallWatch.stalls = append(stallWatch.stalls[:0], stallWatch.stalls[n-64:]...)
		}
	}
	stallWatch.last = now
}

// stalledSince is how long the process stood still between from and now:
// the recorded stalls' overlap with [from, now], and the stall under way
// if the watch has not woken since one (a SIGCONT wakes the stage's
// goroutine and the watch's together; either may run first).
func stalledSince(from, now time.Time) time.Duration {
	stallWatch.mu.Lock()
	defer stallWatch.mu.Unlock()
	var d time.Duration
	for _, s := range stallWatch.stalls {
		d += overlap(s.from, s.to, from, now)
	}
	if !stallWatch.last.IsZero() && now.Sub(stallWatch.last) >= stallTick+stallMin {
		d += overlap(stallWatch.last, now, from, now)
	}
	return d
}

// overlap is the length of [a, b) ∩ [c, d).
func overlap(a, b, c, d time.Time) time.Duration {
	if a.Before(c) {
		a = c
	}
	if b.After(d) {
		b = d
	}
	if !b.After(a) {
		return 0
	}
	return b.Sub(a)
}
