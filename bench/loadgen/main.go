// Command loadgen is an open-loop load generator for Kafka group coordinators (Kafka's own, or groupgate):
// N members in M groups running the classic JoinGroup/SyncGroup/Heartbeat/OffsetCommit sequence or KIP-848
// ConsumerGroupHeartbeat with reconciliation and OffsetCommit, on fixed timetables, latency measured from
// the intended send time. It only ever connects to 127.0.0.1 and stops by itself (-max-seconds).
//
// Phases: "join" (every member joins; the time until every group is stable), then stepped rates
// ("warm-xK" then "step-xK" for each multiplier K of the base heartbeat and commit rates, stopping after
// the first saturated step), or with -mass-join N: "idle" (the small groups heartbeat and commit) then
// "mass-join" (a group of N members joins at once; until it is stable, and at least as long as "idle"). Prints one JSON document.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

type config struct {
	bootstrap          string
	protocol           string
	groups             int
	members            int
	massJoin           int
	topic              string
	partitions         int
	hbRate             float64
	commitRate         float64
	steps              []float64
	stepSeconds        float64
	warmSeconds        float64
	idleSeconds        float64
	joinTimeout        float64
	maxSeconds         float64
	p99LimitMs         float64
	sessionTimeoutMs   int
	rebalanceTimeoutMs int
	groupPrefix        string
	maxDials           int
}

type Run struct {
	cfg      config
	rec      *Recorder
	stop     chan struct{}
	schedPtr atomic.Pointer[Schedule]
	dialSem  chan struct{}
	topicMu  sync.Mutex
	topicID  [16]byte
	connsMu  sync.Mutex
	conns    []*Conn
	groups   []*group
	seq      atomic.Int64
	nMembers int
	// resultMu guards the result map drive() fills: main() takes it for good once it reports, so a
	// drive() still running (stopped at -max-seconds) never writes while the map is encoded.
	resultMu sync.Mutex
}

// put records one figure of the run's result.
func (r *Run) put(result map[string]any, key string, value any) {
	r.resultMu.Lock()
	defer r.resultMu.Unlock()
	result[key] = value
}

func (r *Run) sched() *Schedule { return r.schedPtr.Load() }

func (r *Run) setSchedule(hbRate, commitRate float64) {
	s := &Schedule{id: 1, start: time.Now(), changed: make(chan struct{})}
	if hbRate > 0 {
		s.hbInterval = time.Duration(float64(time.Second) / hbRate)
	}
	if commitRate > 0 {
		s.commitInterval = time.Duration(float64(time.Second) / commitRate)
	}
	old := r.schedPtr.Load()
	if old != nil {
		s.id = old.id + 1
	}
	r.schedPtr.Store(s)
	if old != nil {
		close(old.changed)
	}
}

func (r *Run) setTopicID(id [16]byte) {
	r.topicMu.Lock()
	r.topicID = id
	r.topicMu.Unlock()
}

// offset spreads the members' timetables evenly over the interval (golden-ratio sequence).
func (r *Run) offset(*member) float64 {
	n := r.seq.Add(1)
	x := float64(n) * 0.6180339887498949
	return x - float64(int64(x))
}

func (r *Run) track(c *Conn) {
	r.connsMu.Lock()
	r.conns = append(r.conns, c)
	r.connsMu.Unlock()
}

func (r *Run) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.stop:
		return false
	case <-t.C:
		return true
	}
}

// findCoordinator asks the bootstrap address for the group's coordinator, until one is named.
func (r *Run) findCoordinator(g *group) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		r.dialSem <- struct{}{}
		c, err := Dial(r.cfg.bootstrap, "groupgate-loadgen", 10*time.Second)
		<-r.dialSem
		if err != nil {
			return err
		}
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.Version = 4
		req.CoordinatorKeys = []string{g.name}
		t0 := time.Now()
		resp, err := c.Do(req)
		c.Close()
		if err != nil {
			r.rec.Record(g.prefix+"find_coordinator", t0, time.Since(t0), codeTransport)
			return err
		}
		fr := resp.(*kmsg.FindCoordinatorResponse)
		code := int16(-1)
		if len(fr.Coordinators) == 1 {
			code = fr.Coordinators[0].ErrorCode
		}
		r.rec.Record(g.prefix+"find_coordinator", t0, time.Since(t0), code)
		if code == 0 {
			co := fr.Coordinators[0]
			addr := fmt.Sprintf("%s:%d", co.Host, co.Port)
			if err := checkLoopback(addr); err != nil {
				return fmt.Errorf("coordinator of %s: %w", g.name, err)
			}
			g.coord = addr
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no coordinator for %s: %s", g.name, errorName(code))
		}
		if !r.sleep(200 * time.Millisecond) {
			return fmt.Errorf("stopped")
		}
	}
}

func (r *Run) newGroup(name, prefix string, members int, big bool) *group {
	g := &group{name: name, prefix: prefix, big: big}
	for i := 0; i < members; i++ {
		g.members = append(g.members, &member{r: r, g: g, idx: i})
	}
	return g
}

// start finds each group's coordinator, then starts all its members at once.
func (r *Run) start(groups []*group, fatal chan<- error) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, g := range groups {
		wg.Add(1)
		sem <- struct{}{}
		go func(g *group) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := r.findCoordinator(g); err != nil {
				select {
				case fatal <- err:
				default:
				}
				return
			}
			for _, m := range g.members {
				if r.cfg.protocol == "classic" {
					go m.runClassic()
				} else {
					go m.runConsumer()
				}
			}
		}(g)
	}
	wg.Wait()
}

// groupStable: every member holds its assignment, has heard nothing new from the coordinator since the
// group's last join, is of one generation (classic), and together they own every partition exactly once.
func groupStable(g *group, partitions int, classic bool) bool {
	owned := make([][]int32, 0, len(g.members))
	lastJoin := time.Unix(0, g.lastJoin.Load())
	var gen int32
	for i, m := range g.members {
		m.mu.Lock()
		st, o, q, mg := m.stable, m.owned, m.quietSent, m.gen
		m.mu.Unlock()
		if !st || !q.After(lastJoin) || (classic && i > 0 && mg != gen) {
			return false
		}
		gen = mg
		owned = append(owned, o)
	}
	return covers(owned, partitions)
}

// awaitStable waits until every group is stable (or the timeout); returns the seconds from since until it
// was seen (checked every 100 ms; -1 if not reached) and how many groups were stable.
func (r *Run) awaitStable(groups []*group, partitions int, since time.Time, timeout time.Duration) (float64, int) {
	deadline := since.Add(timeout)
	for {
		n := 0
		for _, g := range groups {
			if groupStable(g, partitions, r.cfg.protocol == "classic") {
				n++
			}
		}
		if n == len(groups) {
			return round2(time.Since(since).Seconds()), n
		}
		if time.Now().After(deadline) || !r.sleep(100*time.Millisecond) {
			r.whyUnstable(groups, partitions)
			return -1, n
		}
	}
}

func parseSteps(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad step %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// saturated: a step whose answered rate fell below 90 % of the offered, whose p99 passed the limit, or
// with more than 1 % errors, for heartbeats or commits.
func saturated(p map[string]any, limitMs float64) (bool, string) {
	ops, _ := p["ops"].(map[string]any)
	for _, name := range []string{"heartbeat", "commit"} {
		o, ok := ops[name].(map[string]any)
		if !ok {
			continue
		}
		offered, _ := o["offered_per_s"].(float64)
		okps, _ := o["ok_per_s"].(float64)
		p99, _ := o["p99_ms"].(float64)
		var errs int64
		for _, n := range o["errors"].(map[string]int64) {
			errs += n
		}
		okN, _ := o["ok"].(int64)
		switch {
		case offered > 0 && okps < 0.9*offered:
			return true, fmt.Sprintf("%s answered %.0f/s of %.0f/s offered", name, okps, offered)
		case p99 > limitMs:
			return true, fmt.Sprintf("%s p99 %.1f ms > %.0f ms", name, p99, limitMs)
		case errs*100 > okN+errs:
			return true, fmt.Sprintf("%s errors %d of %d", name, errs, okN+errs)
		}
	}
	return false, ""
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func raiseNofile() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

func main() {
	var cfg config
	var steps string
	flag.StringVar(&cfg.bootstrap, "bootstrap", "127.0.0.1:9092", "bootstrap address (127.0.0.1 only)")
	flag.StringVar(&cfg.protocol, "protocol", "consumer", "classic | consumer (KIP-848)")
	flag.IntVar(&cfg.groups, "groups", 10, "groups")
	flag.IntVar(&cfg.members, "members", 10, "members per group")
	flag.IntVar(&cfg.massJoin, "mass-join", 0, "with N > 0: after an idle window a group of N members joins at once")
	flag.StringVar(&cfg.topic, "topic", "", "the topic every group subscribes to (must exist)")
	flag.IntVar(&cfg.partitions, "partitions", 0, "its partition count")
	flag.Float64Var(&cfg.hbRate, "hb-rate", 1, "base heartbeats per second per member")
	flag.Float64Var(&cfg.commitRate, "commit-rate", 1, "base commits per second per member")
	flag.StringVar(&steps, "steps", "1", "multipliers of the base rates, in order; stops after the first saturated step")
	flag.Float64Var(&cfg.stepSeconds, "step-seconds", 10, "measured seconds per step")
	flag.Float64Var(&cfg.warmSeconds, "warm-seconds", 2, "unmeasured seconds before each step")
	flag.Float64Var(&cfg.idleSeconds, "idle-seconds", 10, "mass join: seconds of the idle window")
	flag.Float64Var(&cfg.joinTimeout, "join-timeout", 120, "seconds to wait for every group to be stable")
	flag.Float64Var(&cfg.maxSeconds, "max-seconds", 900, "hard limit on the whole run")
	flag.Float64Var(&cfg.p99LimitMs, "p99-limit-ms", 50, "saturation: p99 above this")
	flag.IntVar(&cfg.sessionTimeoutMs, "session-timeout-ms", 45000, "classic session timeout")
	flag.IntVar(&cfg.rebalanceTimeoutMs, "rebalance-timeout-ms", 60000, "rebalance timeout")
	flag.StringVar(&cfg.groupPrefix, "group-prefix", "", "group id prefix (default: a fresh one)")
	flag.IntVar(&cfg.maxDials, "max-dials", 256, "connections being opened at once")
	flag.Parse()
	var err error
	if cfg.steps, err = parseSteps(steps); err != nil {
		fail(err)
	}
	if cfg.topic == "" || cfg.partitions <= 0 {
		fail(fmt.Errorf("-topic and -partitions are required"))
	}
	if cfg.protocol != "classic" && cfg.protocol != "consumer" {
		fail(fmt.Errorf("-protocol classic|consumer"))
	}
	if err := checkLoopback(cfg.bootstrap); err != nil {
		fail(err)
	}
	if cfg.groupPrefix == "" {
		cfg.groupPrefix = "lg-" + newMemberID()[:8]
	}
	raiseNofile()

	r := &Run{cfg: cfg, rec: &Recorder{}, stop: make(chan struct{}), dialSem: make(chan struct{}, cfg.maxDials)}
	r.setSchedule(cfg.hbRate, cfg.commitRate)
	began := time.Now()
	cpu0 := cpuSeconds()
	result := map[string]any{
		"protocol": cfg.protocol, "groups": cfg.groups, "members": cfg.members, "mass_join": cfg.massJoin,
		"partitions": cfg.partitions, "hb_rate": cfg.hbRate, "commit_rate": cfg.commitRate,
	}
	done := make(chan struct{})
	fatal := make(chan error, 1)
	go func() {
		defer close(done)
		r.drive(result, fatal)
	}()
	var ended string
	var failed error
	select {
	case <-done:
	case failed = <-fatal:
	case <-time.After(time.Duration(cfg.maxSeconds * float64(time.Second))):
		ended = fmt.Sprintf("stopped at -max-seconds %.0f", cfg.maxSeconds)
	}
	r.resultMu.Lock() // never released: drive() may still run, and must not touch result from here on
	r.rec.End()
	close(r.stop)
	r.leaveAll()
	wall := time.Since(began).Seconds()
	if failed != nil {
		result["error"] = failed.Error()
	}
	if ended != "" {
		result["aborted"] = ended
	}
	result["phases"] = r.rec.Summary()
	result["wall_s"] = round2(wall)
	result["loadgen_cpu_s"] = round2(cpuSeconds() - cpu0)
	result["loadgen_cores_used"] = round2((cpuSeconds() - cpu0) / wall)
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(result); err != nil {
		fail(err)
	}
	if _, ok := result["error"]; ok {
		os.Exit(2)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "loadgen:", err)
	os.Exit(2)
}

func (r *Run) drive(result map[string]any, fatal chan<- error) {
	cfg := r.cfg
	small := make([]*group, 0, cfg.groups)
	for i := 0; i < cfg.groups; i++ {
		small = append(small, r.newGroup(fmt.Sprintf("%s-g%05d", cfg.groupPrefix, i), "", cfg.members, false))
	}
	r.groups = small
	r.nMembers = cfg.groups * cfg.members
	n := float64(r.nMembers)
	joinStart := time.Now()
	r.rec.Begin("join", nil)
	r.start(small, fatal)
	stableS, stableN := r.awaitStable(small, cfg.partitions, joinStart, time.Duration(cfg.joinTimeout*float64(time.Second)))
	r.put(result, "stable_s", stableS)
	r.put(result, "groups_stable", stableN)

	if cfg.massJoin > 0 {
		offered := map[string]float64{"heartbeat": n * cfg.hbRate, "commit": n * cfg.commitRate}
		r.rec.Begin("warm", offered)
		r.sleep(time.Duration(cfg.warmSeconds * float64(time.Second)))
		r.rec.Begin("idle", offered)
		r.sleep(time.Duration(cfg.idleSeconds * float64(time.Second)))
		big := r.newGroup(fmt.Sprintf("%s-big", cfg.groupPrefix), "big.", cfg.massJoin, true)
		r.connsMu.Lock()
		r.groups = append(r.groups, big)
		r.connsMu.Unlock()
		p := r.rec.Begin("mass-join", offered)
		t0 := time.Now()
		r.start([]*group{big}, fatal)
		bs, _ := r.awaitStable([]*group{big}, cfg.partitions, t0, time.Duration(cfg.joinTimeout*float64(time.Second)))
		r.rec.mu.Lock()
		p.extra["big_stable_s"] = bs
		r.rec.mu.Unlock()
		r.put(result, "big_stable_s", bs)
		// The window lasts at least as long as the idle one, so that both p99s count alike.
		if rest := time.Duration(cfg.idleSeconds*float64(time.Second)) - time.Since(t0); rest > 0 {
			r.sleep(rest)
		}
		r.rec.Begin("after", offered)
		r.sleep(time.Duration(cfg.warmSeconds * float64(time.Second)))
		r.rec.End()
		return
	}

	var prev *phase
	var prevK float64
	check := func() bool {
		if prev == nil {
			return false
		}
		var sum map[string]any
		for _, s := range r.rec.Summary() {
			if s["phase"] == prev.name {
				sum = s
			}
		}
		sat, why := saturated(sum, cfg.p99LimitMs)
		if sat {
			r.put(result, "saturated_at", prevK)
			r.put(result, "saturated_because", why)
		}
		return sat
	}
	for _, k := range cfg.steps {
		offered := map[string]float64{"heartbeat": n * cfg.hbRate * k, "commit": n * cfg.commitRate * k}
		r.setSchedule(cfg.hbRate*k, cfg.commitRate*k)
		r.rec.Begin(fmt.Sprintf("warm-x%g", k), offered)
		if !r.sleep(time.Duration(cfg.warmSeconds * float64(time.Second))) {
			return
		}
		if check() { // the previous step, judged once its late answers are in
			r.rec.End()
			return
		}
		prev, prevK = r.rec.Begin(fmt.Sprintf("step-x%g", k), offered), k
		if !r.sleep(time.Duration(cfg.stepSeconds * float64(time.Second))) {
			return
		}
	}
	r.rec.Begin("drain", nil)
	r.sleep(time.Duration(cfg.warmSeconds * float64(time.Second)))
	check()
	r.rec.End()
}

// leaveAll: every member leaves (so that the coordinator does not expire them during a later run), bounded
// to 10 s, then every connection is closed.
func (r *Run) leaveAll() {
	r.connsMu.Lock()
	groups := append([]*group(nil), r.groups...)
	r.connsMu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 512)
	for _, g := range groups {
		for _, m := range g.members {
			wg.Add(1)
			sem <- struct{}{}
			go func(m *member) {
				defer wg.Done()
				defer func() { <-sem }()
				if r.cfg.protocol == "classic" {
					m.leaveClassic()
				} else {
					m.leaveConsumer()
				}
			}(m)
		}
	}
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
	}
	r.connsMu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.connsMu.Unlock()
}

// whyUnstable records, for a run whose groups did not all become stable, how many members were in each
// state when it gave up: without an assignment, not heard from since their group's last join, and the
// groups whose members' partitions were not exactly the topic's.
func (r *Run) whyUnstable(groups []*group, partitions int) {
	notStable, notQuiet, badCover := 0, 0, 0
	for _, g := range groups {
		lastJoin := time.Unix(0, g.lastJoin.Load())
		owned := make([][]int32, 0, len(g.members))
		for _, m := range g.members {
			m.mu.Lock()
			if !m.stable {
				notStable++
			} else if !m.quietSent.After(lastJoin) {
				notQuiet++
			}
			owned = append(owned, m.owned)
			m.mu.Unlock()
		}
		if !covers(owned, partitions) {
			badCover++
		}
	}
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	if n := len(r.rec.phases); n > 0 {
		r.rec.phases[n-1].extra["unstable"] = map[string]int{
			"members_reconciling": notStable, "members_not_heard_since_last_join": notQuiet,
			"groups_partitions_not_owned_once": badCover,
		}
	}
}
