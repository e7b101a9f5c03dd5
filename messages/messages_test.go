package messages

import (
	"errors"
	"testing"
)

func TestBatchRepliesJoinTheFailuresOnly(t *testing.T) {
	e1, e2 := errors.New("first"), errors.New("second")
	up := UpsertBatchReply{Results: []UpsertReply{{ID: 1}, {Err: e1}, {ID: 2}, {Err: e2}}}
	del := DeleteBatchReply{Results: []DeleteReply{{ID: 1}, {Err: e1}, {ID: 2}, {Err: e2}}}
	for name, err := range map[string]error{"upsert": up.Error(), "delete": del.Error()} {
		if !errors.Is(err, e1) || !errors.Is(err, e2) {
			t.Errorf("%s batch: Error() = %v, want both failures", name, err)
		}
		if got, want := err.Error(), "first\nsecond"; got != want {
			t.Errorf("%s batch: Error() reads %q, want %q", name, got, want)
		}
	}
	if err := (UpsertBatchReply{Results: make([]UpsertReply, 3)}).Error(); err != nil {
		t.Errorf("upsert batch without failures: Error() = %v, want nil", err)
	}
	if err := (DeleteBatchReply{Results: make([]DeleteReply, 3)}).Error(); err != nil {
		t.Errorf("delete batch without failures: Error() = %v, want nil", err)
	}
}

func TestBatchRepliesWithoutFailuresAllocateNothing(t *testing.T) {
	up := UpsertBatchReply{Results: make([]UpsertReply, 100)}
	del := DeleteBatchReply{Results: make([]DeleteReply, 100)}
	if n := testing.AllocsPerRun(100, func() { _ = up.Error() }); n != 0 {
		t.Errorf("UpsertBatchReply.Error of 100 results without failures: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = del.Error() }); n != 0 {
		t.Errorf("DeleteBatchReply.Error of 100 results without failures: %v allocations, want 0", n)
	}
}
