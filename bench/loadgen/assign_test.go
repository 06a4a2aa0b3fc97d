package main

import "testing"

func TestRangeAssignSplitsContiguously(t *testing.T) {
	got := rangeAssign([]string{"c", "a", "b"}, 7)
	want := map[string][]int32{"a": {0, 1, 2}, "b": {3, 4}, "c": {5, 6}}
	for id, ps := range want {
		if !sameSet(got[id], ps) {
			t.Fatalf("%s: got %v, want %v", id, got[id], ps)
		}
	}
	all := [][]int32{got["a"], got["b"], got["c"]}
	if !covers(all, 7) {
		t.Fatal("assignment does not cover the topic")
	}
}

func TestRangeAssignMoreMembersThanPartitions(t *testing.T) {
	got := rangeAssign([]string{"m1", "m2", "m3", "m4"}, 2)
	n := 0
	for _, ps := range got {
		n += len(ps)
		if len(ps) > 1 {
			t.Fatalf("a member got %v", ps)
		}
	}
	if n != 2 || len(got) != 4 {
		t.Fatalf("got %v", got)
	}
}

func TestCoversRejectsDoubleOwnership(t *testing.T) {
	if covers([][]int32{{0, 1}, {1}}, 2) {
		t.Fatal("partition 1 owned twice")
	}
	if covers([][]int32{{0}}, 2) {
		t.Fatal("partition 1 unowned")
	}
}

func TestCheckLoopback(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:9092", "localhost:1"} {
		if checkLoopback(ok) != nil {
			t.Fatalf("%s refused", ok)
		}
	}
	for _, bad := range []string{"10.0.0.1:9092", "example.com:9092", "127.0.0.2:9092", "[::1]:9092", "nohost"} {
		if checkLoopback(bad) == nil {
			t.Fatalf("%s accepted", bad)
		}
	}
}
