package main

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Schedule is the current offered load: every member sends one heartbeat per hbInterval and one commit
// per commitInterval (0: none). A new Schedule re-anchors every member's timetable at its start.
type Schedule struct {
	id             int
	start          time.Time
	hbInterval     time.Duration
	commitInterval time.Duration
	changed        chan struct{} // closed when this schedule is replaced
}

// timetable is one member's open-loop timetable for one kind of request: sends are due at fixed times,
// whatever happened to earlier sends, and latency is measured from the due time.
type timetable struct {
	schedID int
	next    time.Time
	offset  float64 // the member's place in the interval, in [0, 1): spreads members evenly
}

// wait returns the next due time, sleeping until it; ok is false when the run stops.
func (t *timetable) wait(r *Run, interval func(*Schedule) time.Duration) (time.Time, bool) {
	for {
		s := r.sched()
		iv := interval(s)
		if t.schedID != s.id {
			// Anchored at the schedule's start, or now for a member that starts later.
			t.schedID = s.id
			base := s.start
			if now := time.Now(); now.Sub(base) > iv {
				base = now
			}
			t.next = base.Add(time.Duration(t.offset * float64(iv)))
		}
		if iv <= 0 {
			select {
			case <-r.stop:
				return time.Time{}, false
			case <-s.changed:
				continue
			}
		}
		due := t.next
		if d := time.Until(due); d > 0 {
			tm := time.NewTimer(d)
			select {
			case <-r.stop:
				tm.Stop()
				return time.Time{}, false
			case <-s.changed:
				tm.Stop()
				continue
			case <-tm.C:
			}
		} else {
			select {
			case <-r.stop:
				return time.Time{}, false
			default:
			}
		}
		t.next = due.Add(iv)
		return due, true
	}
}

type group struct {
	name    string
	coord   string
	big     bool
	prefix  string // operation name prefix ("big." for the mass-joining group)
	members []*member
	// lastJoin: when a member last joined (UnixNano); a member is only in sync once it has heard from the
	// coordinator after that.
	lastJoin atomic.Int64
}

type member struct {
	r     *Run
	g     *group
	idx   int
	conn  *Conn
	mu    sync.Mutex
	id    string
	gen   int32 // classic generation, or KIP-848 member epoch
	owned []int32
	// stable: the member holds its assignment and the coordinator has nothing new for it.
	stable     bool
	lastChange time.Time
	quietSent  time.Time // send time of the last answer that had nothing new for the member
	offset     int64
}

func newMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (m *member) op(name string) string { return m.g.prefix + name }

func (m *member) changed(owned []int32, stable bool) {
	m.mu.Lock()
	m.owned = owned
	m.stable = stable
	m.lastChange = time.Now()
	m.mu.Unlock()
}

func (m *member) quiet(sent time.Time) {
	m.mu.Lock()
	m.quietSent = sent
	m.mu.Unlock()
}

func (m *member) setStable(v bool) {
	m.mu.Lock()
	if m.stable != v {
		m.stable = v
		m.lastChange = time.Now()
	}
	m.mu.Unlock()
}

func (m *member) snapshot() (id string, gen int32, owned []int32, stable bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.id, m.gen, m.owned, m.stable
}

func (m *member) dial() bool {
	for attempt := 0; ; attempt++ {
		m.r.dialSem <- struct{}{}
		c, err := Dial(m.g.coord, "groupgate-loadgen", 10*time.Second)
		<-m.r.dialSem
		if err == nil {
			m.conn = c
			m.r.track(c)
			return true
		}
		m.r.rec.Count(m.op("connect"), time.Now(), "TRANSPORT")
		if !m.r.sleep(time.Duration(100*(attempt+1)) * time.Millisecond) {
			return false
		}
	}
}

// commitLoop commits the member's partitions on its timetable (a member that owns none commits
// partition idx mod P: the coordinators check membership and epoch, not ownership, and the offered
// commit rate then does not depend on the partition count).
func (m *member) commitLoop(version int16) {
	tt := timetable{offset: m.r.offset(m)}
	for {
		due, ok := tt.wait(m.r, func(s *Schedule) time.Duration { return s.commitInterval })
		if !ok {
			return
		}
		id, gen, owned, stable := m.snapshot()
		if !stable || m.conn == nil {
			m.r.rec.Count(m.op("commit"), due, "SKIPPED_NOT_STABLE")
			continue
		}
		if len(owned) == 0 {
			owned = []int32{int32(m.idx % m.r.cfg.partitions)}
		}
		m.offset++
		parts := make([]kmsg.OffsetCommitRequestTopicPartition, 0, len(owned))
		for _, p := range owned {
			pp := kmsg.NewOffsetCommitRequestTopicPartition()
			pp.Partition = p
			pp.Offset = m.offset
			pp.LeaderEpoch = -1
			parts = append(parts, pp)
		}
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version = version
		req.Group = m.g.name
		req.Generation = gen
		req.MemberID = id
		t := kmsg.NewOffsetCommitRequestTopic()
		t.Topic = m.r.cfg.topic
		t.Partitions = parts
		req.Topics = []kmsg.OffsetCommitRequestTopic{t}
		resp, err := m.conn.Do(req)
		lat := time.Since(due)
		if err != nil {
			m.r.rec.Record(m.op("commit"), due, lat, codeTransport)
			if !m.r.sleep(100 * time.Millisecond) {
				return
			}
			continue
		}
		code := int16(0)
		for _, rt := range resp.(*kmsg.OffsetCommitResponse).Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					code = rp.ErrorCode
				}
			}
		}
		m.r.rec.Record(m.op("commit"), due, lat, code)
	}
}

// ---- classic: JoinGroup (member id required), range assignment by the leader, SyncGroup, Heartbeat.

func retriable(code int16) bool { return code == 14 || code == 15 || code == 16 }

func (m *member) runClassic() {
	if !m.dial() {
		return
	}
	go m.commitLoop(9)
	tt := timetable{offset: m.r.offset(m)}
	for {
		if !m.joinClassic() {
			return
		}
		// Steady: heartbeats on the timetable until the coordinator says to rejoin.
		for {
			due, ok := tt.wait(m.r, func(s *Schedule) time.Duration { return s.hbInterval })
			if !ok {
				return
			}
			id, gen, _, _ := m.snapshot()
			req := kmsg.NewPtrHeartbeatRequest()
			req.Version = 4
			req.Group = m.g.name
			req.Generation = gen
			req.MemberID = id
			sent := time.Now()
			resp, err := m.conn.Do(req)
			if err != nil {
				m.r.rec.Record(m.op("heartbeat"), due, time.Since(due), codeTransport)
				return
			}
			code := resp.(*kmsg.HeartbeatResponse).ErrorCode
			m.r.rec.Record(m.op("heartbeat"), due, time.Since(due), code)
			if code == 0 {
				m.quiet(sent)
			}
			if code == 27 || code == 22 {
				break
			}
			if code == 25 {
				m.mu.Lock()
				m.id = ""
				m.mu.Unlock()
				break
			}
		}
		m.setStable(false)
	}
}

func (m *member) joinClassic() bool {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 0
	meta.Topics = []string{m.r.cfg.topic}
	metaBytes := meta.AppendTo(nil)
	for {
		select {
		case <-m.r.stop:
			return false
		default:
		}
		m.mu.Lock()
		id := m.id
		m.mu.Unlock()
		req := kmsg.NewPtrJoinGroupRequest()
		req.Version = 7
		req.Group = m.g.name
		req.SessionTimeoutMillis = int32(m.r.cfg.sessionTimeoutMs)
		req.RebalanceTimeoutMillis = int32(m.r.cfg.rebalanceTimeoutMs)
		req.MemberID = id
		req.ProtocolType = "consumer"
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name = "range"
		p.Metadata = metaBytes
		req.Protocols = []kmsg.JoinGroupRequestProtocol{p}
		t0 := time.Now()
		resp, err := m.conn.Do(req)
		if err != nil {
			m.r.rec.Record(m.op("join"), t0, time.Since(t0), codeTransport)
			return false
		}
		jr := resp.(*kmsg.JoinGroupResponse)
		m.r.rec.Record(m.op("join"), t0, time.Since(t0), jr.ErrorCode)
		switch {
		case jr.ErrorCode == 79: // MEMBER_ID_REQUIRED: join again with the id given
			m.mu.Lock()
			m.id = jr.MemberID
			m.mu.Unlock()
			continue
		case jr.ErrorCode == 25:
			m.mu.Lock()
			m.id = ""
			m.mu.Unlock()
			continue
		case jr.ErrorCode != 0:
			if !m.r.sleep(200 * time.Millisecond) {
				return false
			}
			continue
		}
		m.mu.Lock()
		m.id, m.gen = jr.MemberID, jr.Generation
		m.mu.Unlock()
		m.g.lastJoin.Store(time.Now().UnixNano())
		sreq := kmsg.NewPtrSyncGroupRequest()
		sreq.Version = 5
		sreq.Group = m.g.name
		sreq.Generation = jr.Generation
		sreq.MemberID = jr.MemberID
		sreq.ProtocolType = kmsg.StringPtr("consumer")
		sreq.Protocol = kmsg.StringPtr("range")
		if jr.LeaderID == jr.MemberID {
			ids := make([]string, 0, len(jr.Members))
			for _, mm := range jr.Members {
				ids = append(ids, mm.MemberID)
			}
			for mid, parts := range rangeAssign(ids, m.r.cfg.partitions) {
				a := kmsg.NewConsumerMemberAssignment()
				at := kmsg.NewConsumerMemberAssignmentTopic()
				at.Topic = m.r.cfg.topic
				at.Partitions = parts
				a.Topics = []kmsg.ConsumerMemberAssignmentTopic{at}
				ga := kmsg.NewSyncGroupRequestGroupAssignment()
				ga.MemberID = mid
				ga.MemberAssignment = a.AppendTo(nil)
				sreq.GroupAssignment = append(sreq.GroupAssignment, ga)
			}
		}
		t0 = time.Now()
		resp, err = m.conn.Do(sreq)
		if err != nil {
			m.r.rec.Record(m.op("sync"), t0, time.Since(t0), codeTransport)
			return false
		}
		sr := resp.(*kmsg.SyncGroupResponse)
		m.r.rec.Record(m.op("sync"), t0, time.Since(t0), sr.ErrorCode)
		if sr.ErrorCode == 25 {
			m.mu.Lock()
			m.id = ""
			m.mu.Unlock()
			continue
		}
		if sr.ErrorCode != 0 {
			continue // REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION: join again
		}
		var owned []int32
		if len(sr.MemberAssignment) > 0 {
			a := kmsg.NewConsumerMemberAssignment()
			if err := a.ReadFrom(sr.MemberAssignment); err == nil {
				for _, t := range a.Topics {
					owned = append(owned, t.Partitions...)
				}
			}
		}
		m.changed(owned, true)
		m.quiet(time.Now())
		return true
	}
}

func (m *member) leaveClassic() {
	id, _, _, _ := m.snapshot()
	if m.conn == nil || id == "" {
		return
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version = 4
	req.Group = m.g.name
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID = id
	req.Members = []kmsg.LeaveGroupRequestMember{lm}
	_, _ = m.conn.Do(req)
}

// ---- KIP-848: ConsumerGroupHeartbeat with reconciliation (the member acks an assignment by sending the
// partitions it owns on its next heartbeat, sent at once).

func (m *member) runConsumer() {
	if !m.dial() {
		return
	}
	m.mu.Lock()
	m.id = newMemberID()
	m.mu.Unlock()
	go m.commitLoop(9)
	tt := timetable{offset: m.r.offset(m)}
	ack := false // the next heartbeat acks a new assignment (sent at once, not on the timetable)
	joined := false
	// After an error answer the next heartbeat carries every field (rebalance timeout, subscription, the
	// partitions owned), as Kafka's clients send after an error: an answer lost that way may have held a
	// new assignment, and a coordinator sends the assignment again only on such a full request.
	full := false
	for {
		var due time.Time
		if !joined || ack {
			due = time.Now()
			select {
			case <-m.r.stop:
				return
			default:
			}
		} else {
			var ok bool
			if due, ok = tt.wait(m.r, func(s *Schedule) time.Duration { return s.hbInterval }); !ok {
				return
			}
		}
		id, epoch, owned, _ := m.snapshot()
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Version = 1
		req.Group = m.g.name
		req.MemberID = id
		req.RebalanceTimeoutMillis = -1
		opName := "heartbeat"
		if !joined {
			opName = "join"
			req.MemberEpoch = 0
			req.RebalanceTimeoutMillis = int32(m.r.cfg.rebalanceTimeoutMs)
			req.SubscribedTopicNames = []string{m.r.cfg.topic}
			req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		} else {
			req.MemberEpoch = epoch
			if full {
				req.RebalanceTimeoutMillis = int32(m.r.cfg.rebalanceTimeoutMs)
				req.SubscribedTopicNames = []string{m.r.cfg.topic}
			}
			if (ack || full) && len(owned) == 0 {
				req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			} else if ack || full {
				t := kmsg.NewConsumerGroupHeartbeatRequestTopic()
				t.TopicID = m.r.topicID
				t.Partitions = owned
				req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{t}
			}
		}
		sent := time.Now()
		resp, err := m.conn.Do(req)
		if err != nil {
			m.r.rec.Record(m.op(opName), due, time.Since(due), codeTransport)
			return
		}
		hr := resp.(*kmsg.ConsumerGroupHeartbeatResponse)
		m.r.rec.Record(m.op(opName), due, time.Since(due), hr.ErrorCode)
		switch hr.ErrorCode {
		case 0:
		case 110, 25: // FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID: rejoin with epoch 0
			joined, ack, full = false, false, false
			m.mu.Lock()
			m.gen = 0
			m.mu.Unlock()
			m.changed(nil, false)
			if !m.r.sleep(50 * time.Millisecond) {
				return
			}
			continue
		default:
			full = joined
			if !joined && !m.r.sleep(200*time.Millisecond) {
				return
			}
			continue
		}
		if !joined {
			m.g.lastJoin.Store(time.Now().UnixNano())
		}
		joined, ack, full = true, false, false
		m.mu.Lock()
		if hr.MemberID != nil && *hr.MemberID != "" {
			m.id = *hr.MemberID
		}
		m.gen = hr.MemberEpoch
		m.mu.Unlock()
		if hr.Assignment != nil {
			var got []int32
			for _, t := range hr.Assignment.Topics {
				if m.r.topicID == ([16]byte{}) {
					m.r.setTopicID(t.TopicID)
				}
				got = append(got, t.Partitions...)
			}
			if !sameSet(got, owned) || epoch == 0 {
				m.r.rec.Record(m.op("reconcile"), time.Now(), 0, 0) // an assignment to ack: counted
				m.changed(got, false)
				ack = true
				continue
			}
		}
		m.setStable(true)
		m.quiet(sent)
	}
}

func (m *member) leaveConsumer() {
	id, epoch, _, _ := m.snapshot()
	if m.conn == nil || epoch <= 0 {
		return
	}
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group = m.g.name
	req.MemberID = id
	req.MemberEpoch = -1
	req.RebalanceTimeoutMillis = -1
	_, _ = m.conn.Do(req)
}
