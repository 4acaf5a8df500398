package supervise

import (
	"fmt"
	"slices"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/supervisor"
)

// registry is the index of the tree's records: every hosted child in the
// order it was added (depth first), every record, a group's too, by its path
// (an address for lifecycle messages and reports: the tree itself is the
// levels'), and the incarnation numbers given to hosted children. It is the
// root's, read and written by Receive only.
type registry struct {
	children []*childRecord
	byName   map[string]*childRecord
	gen      uint64 // the last incarnation number given
	// changed is set when a record is added or removed, until the root
	// publishes the tree's names again (publishNames).
	changed bool
}

// grow makes room for n more records.
func (r *registry) grow(n int) {
	r.children = slices.Grow(r.children, n)
	if len(r.byName) == 0 {
		r.byName = make(map[string]*childRecord, n)
	}
}

// add indexes rec, a hosted child: by its path, and last of the hosted
// children.
func (r *registry) add(rec *childRecord) {
	r.addGroup(rec)
	r.children = append(r.children, rec)
}

// addGroup indexes rec, a group, by its path.
func (r *registry) addGroup(rec *childRecord) {
	r.changed = true
	if r.byName == nil {
		r.byName = map[string]*childRecord{}
	}
	r.byName[rec.spec.Name] = rec
}

// remove forgets rec's path: it is removed from the tree (a hosted child
// leaves the hosted children as it is dropped: dropHosted).
func (r *registry) remove(rec *childRecord) {
	r.changed = true
	delete(r.byName, rec.spec.Name)
}

// dropHosted takes rec, a hosted child being removed, out of the hosted
// children.
func (r *registry) dropHosted(rec *childRecord) {
	r.changed = true
	r.children = deleteRecord(r.children, rec)
}

// taken reports whether a record is at path name.
func (r *registry) taken(name string) bool {
	_, ok := r.byName[name]
	return ok
}

// known reports whether rec is still the manager's (not removed).
func (r *registry) known(rec *childRecord) bool { return r.byName[rec.spec.Name] == rec }

// groups is how many groups the tree holds.
func (r *registry) groups() int { return len(r.byName) - len(r.children) }

// lookup finds a child by name (its path) for a lifecycle message: a
// hosted child or a group.
func (r *registry) lookup(name string) (*childRecord, error) {
	rec, ok := r.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", supervisor.ErrUnknownChild, name)
	}
	return rec, nil
}

// current finds the hosted child that reported, in incarnation gen.
func (r *registry) current(name string, gen uint64) *childRecord {
	rec, ok := r.byName[name]
	if !ok || rec.gen != gen {
		return nil
	}
	return rec
}

// groupNamed is the level of the group at path name, nil if there is none
// (at the root, name is "").
func (r *registry) groupNamed(name string) *level {
	if rec := r.byName[name]; rec != nil {
		return rec.sub
	}
	return nil
}

// nextGen numbers a hosted child's next incarnation.
func (r *registry) nextGen() uint64 {
	r.gen++
	return r.gen
}

// seen notes incarnation gen, numbered by a child restarting itself.
func (r *registry) seen(gen uint64) { r.gen = max(r.gen, gen) }

// scope returns the hosted children touches selects, in the order they
// were added.
func (r *registry) scope(touches func(*childRecord) bool) []*childRecord {
	var recs []*childRecord
	for _, rec := range r.children {
		if touches(rec) {
			recs = append(recs, rec)
		}
	}
	return recs
}

// ofKind returns the hosted children of kind, in the order they were added.
func (r *registry) ofKind(kind actors.Kind) []*childRecord {
	n := 0
	for _, rec := range r.children {
		if rec.spec.Kind == kind {
			n++
		}
	}
	recs := make([]*childRecord, 0, n)
	for _, rec := range r.children {
		if rec.spec.Kind == kind {
			recs = append(recs, rec)
		}
	}
	return recs
}

// deepestStore is the depth of the deepest level that holds a store (0
// with none in a group): the last a start round recovers (storesAt).
func (r *registry) deepestStore() int {
	d := 0
	for _, rec := range r.children {
		if rec.spec.Kind == actors.KindStore {
			d = max(d, rec.lvl.depth)
		}
	}
	return d
}
