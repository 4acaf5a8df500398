package supervise

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// recordingOwner waits on one barrier at a time and records what it is told.
type recordingOwner struct {
	wait *barrier
	told []error
}

func (o *recordingOwner) current(b *barrier) bool { return o.wait == b }
func (o *recordingOwner) settled(b *barrier, err error) {
	o.wait = nil
	o.told = append(o.told, err)
}

func TestABarrierTellsItsOwnerOnce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failFast bool
		reports  []error
		want     []error
	}{
		{"all report", false, []error{nil, nil}, []error{nil}},
		{"the first error is kept", false, []error{errBoom, nil}, []error{errBoom}},
		{"fail fast settles at the first error", true, []error{errBoom}, []error{errBoom}},
		{"later reports are dropped", true, []error{errBoom, nil}, []error{errBoom}},
		{"one report is not all", false, []error{nil}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &recordingOwner{}
			a, b := &childRecord{}, &childRecord{}
			bar := &barrier{owner: o, failFast: tc.failFast}
			bar.add(a)
			bar.add(b)
			o.wait = bar.pending()
			for i, err := range tc.reports {
				settleChild([]*childRecord{a, b}[i], err, false)
			}
			assert.Equal(t, tc.want, o.told)
		})
	}
}

func TestABarrierDropsReportsItsOwnerNoLongerWaitsFor(t *testing.T) {
	o := &recordingOwner{}
	rec := &childRecord{}
	old := &barrier{owner: o}
	old.add(rec)
	o.wait = &barrier{owner: o} // moved on to another stage
	settleChild(rec, nil, false)
	assert.Empty(t, o.told, "a stale report is dropped")
	assert.True(t, old.done)
	assert.Nil(t, rec.wait)
}

func TestEveryBarrierWaitingOnAChildIsSettledByItsReport(t *testing.T) {
	rec := &childRecord{}
	var owners []*recordingOwner
	for range 3 { // the first in the record, the others in its history
		o := &recordingOwner{}
		o.wait = &barrier{owner: o}
		o.wait.add(rec)
		owners = append(owners, o)
	}
	settleChild(rec, errBoom, false)
	for i, o := range owners {
		assert.Equal(t, []error{errBoom}, o.told, "owner %d", i)
	}
	assert.Nil(t, rec.wait)
	assert.Empty(t, rec.x.waits)

	// Waited on again, by one owner: no history is needed for it.
	again := &childRecord{}
	o := &recordingOwner{}
	o.wait = &barrier{owner: o}
	o.wait.add(again)
	settleChild(again, nil, false)
	assert.Equal(t, []error{nil}, o.told)
	assert.Nil(t, again.x)
}

func TestAnEmptyBarrierIsNotPending(t *testing.T) {
	assert.Nil(t, (&barrier{owner: &recordingOwner{}}).pending())
}

// A barrier that drops a child (taken out of its owner) counts it as
// reported, without an error, and no longer waits for it; the other
// barriers waiting for the child still do, and its report settles them
// alone.
func TestADroppedChildIsNoLongerWaitedFor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first bool // the dropping barrier waited first (the record's own), else second (in its history)
	}{{"the record's barrier", true}, {"a barrier in its history", false}} {
		t.Run(tc.name, func(t *testing.T) {
			rec, other := &childRecord{}, &childRecord{}
			plan, removal := &recordingOwner{}, &recordingOwner{}
			plan.wait, removal.wait = &barrier{owner: plan}, &barrier{owner: removal}
			if tc.first {
				plan.wait.add(rec)
				removal.wait.add(rec)
			} else {
				removal.wait.add(rec)
				plan.wait.add(rec)
			}
			plan.wait.add(other)
			bar := plan.wait

			assert.True(t, bar.drop(rec))
			assert.Empty(t, plan.told, "the other child is still waited for")
			assert.False(t, bar.drop(rec), "dropped once")
			settleChild(other, nil, false)
			assert.Equal(t, []error{nil}, plan.told, "settled by the child it still waited for")

			settleChild(rec, errBoom, false)
			assert.Equal(t, []error{nil}, plan.told, "the dropped child's report does not reach it")
			assert.Equal(t, []error{errBoom}, removal.told, "the other barrier still gets it")
			assert.Nil(t, rec.wait)
		})
	}
	assert.False(t, (&barrier{owner: &recordingOwner{}}).drop(&childRecord{}), "a child it never waited for")
}
