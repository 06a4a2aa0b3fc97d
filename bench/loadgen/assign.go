package main

import "sort"

// rangeAssign is the classic range assignor for one topic: members sorted by id, each gets a contiguous
// run of partitions, the first (partitions mod members) one more than the others.
func rangeAssign(memberIDs []string, partitions int) map[string][]int32 {
	ids := append([]string(nil), memberIDs...)
	sort.Strings(ids)
	out := make(map[string][]int32, len(ids))
	if len(ids) == 0 {
		return out
	}
	per, extra := partitions/len(ids), partitions%len(ids)
	next := 0
	for i, id := range ids {
		n := per
		if i < extra {
			n++
		}
		ps := make([]int32, 0, n)
		for j := 0; j < n; j++ {
			ps = append(ps, int32(next+j))
		}
		next += n
		out[id] = ps
	}
	return out
}

// covers says whether the members' partitions are exactly 0..partitions-1, each owned once.
func covers(owned [][]int32, partitions int) bool {
	seen := make([]bool, partitions)
	n := 0
	for _, ps := range owned {
		for _, p := range ps {
			if p < 0 || int(p) >= partitions || seen[p] {
				return false
			}
			seen[p] = true
			n++
		}
	}
	return n == partitions
}

func sameSet(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	m := make(map[int32]struct{}, len(a))
	for _, p := range a {
		m[p] = struct{}{}
	}
	for _, p := range b {
		if _, ok := m[p]; !ok {
			return false
		}
	}
	return true
}
