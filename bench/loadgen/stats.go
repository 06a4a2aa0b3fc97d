package main

import (
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Error names of the codes a group coordinator answers (Kafka's protocol error codes).
var errorNames = map[int16]string{
	-1: "UNKNOWN_SERVER_ERROR", 2: "CORRUPT_MESSAGE", 3: "UNKNOWN_TOPIC_OR_PARTITION", 7: "REQUEST_TIMED_OUT",
	14: "COORDINATOR_LOAD_IN_PROGRESS", 15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR",
	22: "ILLEGAL_GENERATION", 23: "INCONSISTENT_GROUP_PROTOCOL", 24: "INVALID_GROUP_ID", 25: "UNKNOWN_MEMBER_ID",
	26: "INVALID_SESSION_TIMEOUT", 27: "REBALANCE_IN_PROGRESS", 28: "INVALID_COMMIT_OFFSET_SIZE",
	30: "GROUP_AUTHORIZATION_FAILED", 35: "UNSUPPORTED_VERSION", 42: "INVALID_REQUEST", 69: "GROUP_ID_NOT_FOUND",
	79: "MEMBER_ID_REQUIRED", 81: "GROUP_MAX_SIZE_REACHED", 110: "FENCED_MEMBER_EPOCH",
	111: "UNRELEASED_INSTANCE_ID", 112: "UNSUPPORTED_ASSIGNOR", 113: "STALE_MEMBER_EPOCH",
}

func errorName(code int16) string {
	if n, ok := errorNames[code]; ok {
		return n
	}
	return "ERROR_" + strconv.Itoa(int(code))
}

type opStats struct {
	hist   *hdrhistogram.Histogram // microseconds
	ok     int64
	errors map[string]int64
}

// phase is a window of the run; an operation belongs to the phase its intended send time falls in.
type phase struct {
	name    string
	start   time.Time
	end     time.Time // zero while running
	offered map[string]float64
	ops     map[string]*opStats
	extra   map[string]any
}

type Recorder struct {
	mu     sync.Mutex
	phases []*phase
}

func (r *Recorder) Begin(name string, offered map[string]float64) *phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if n := len(r.phases); n > 0 && r.phases[n-1].end.IsZero() {
		r.phases[n-1].end = now
	}
	p := &phase{name: name, start: now, offered: offered, ops: map[string]*opStats{}, extra: map[string]any{}}
	r.phases = append(r.phases, p)
	return p
}

func (r *Recorder) End() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.phases); n > 0 && r.phases[n-1].end.IsZero() {
		r.phases[n-1].end = time.Now()
	}
}

func (r *Recorder) phaseAt(t time.Time) *phase {
	for i := len(r.phases) - 1; i >= 0; i-- {
		if !t.Before(r.phases[i].start) {
			return r.phases[i]
		}
	}
	if len(r.phases) > 0 {
		return r.phases[0]
	}
	return nil
}

// Record one operation: latency from its intended send time to its answer; code 0 is a success,
// code < -1 a transport failure.
func (r *Recorder) Record(op string, intended time.Time, latency time.Duration, code int16) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.phaseAt(intended)
	if p == nil {
		return
	}
	s := p.ops[op]
	if s == nil {
		s = &opStats{hist: hdrhistogram.New(1, 120_000_000, 3), errors: map[string]int64{}}
		p.ops[op] = s
	}
	us := latency.Microseconds()
	if us < 1 {
		us = 1
	}
	if us > s.hist.HighestTrackableValue() {
		us = s.hist.HighestTrackableValue()
	}
	_ = s.hist.RecordValue(us)
	if code == 0 {
		s.ok++
	} else if code == codeTransport {
		s.errors["TRANSPORT"]++
	} else {
		s.errors[errorName(code)]++
	}
}

// RecordError counts a failure that has no latency (e.g. a send skipped because the member was rejoining).
func (r *Recorder) Count(op string, at time.Time, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.phaseAt(at)
	if p == nil {
		return
	}
	s := p.ops[op]
	if s == nil {
		s = &opStats{hist: hdrhistogram.New(1, 120_000_000, 3), errors: map[string]int64{}}
		p.ops[op] = s
	}
	s.errors[what]++
}

const codeTransport = int16(-1000)

func ms(us int64) float64 { return float64(us) / 1000.0 }

func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }

// Summary of the phases as plain maps (JSON).
func (r *Recorder) Summary() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []map[string]any{}
	for _, p := range r.phases {
		end := p.end
		if end.IsZero() {
			end = time.Now()
		}
		secs := end.Sub(p.start).Seconds()
		ops := map[string]any{}
		names := make([]string, 0, len(p.ops))
		for n := range p.ops {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			s := p.ops[n]
			h := s.hist
			errs := make(map[string]int64, len(s.errors)) // a copy: members may still count after the summary
			for k, v := range s.errors {
				errs[k] = v
			}
			o := map[string]any{
				"ok":       s.ok,
				"ok_per_s": round2(float64(s.ok) / secs),
				"count":    h.TotalCount(),
				"p50_ms":   ms(h.ValueAtQuantile(50)),
				"p90_ms":   ms(h.ValueAtQuantile(90)),
				"p99_ms":   ms(h.ValueAtQuantile(99)),
				"p999_ms":  ms(h.ValueAtQuantile(99.9)),
				"max_ms":   ms(h.Max()),
				"errors":   errs,
			}
			if off, ok := p.offered[n]; ok {
				o["offered_per_s"] = round2(off)
			}
			ops[n] = o
		}
		m := map[string]any{"phase": p.name, "seconds": round2(secs), "ops": ops}
		for k, v := range p.extra {
			m[k] = v
		}
		out = append(out, m)
	}
	return out
}
