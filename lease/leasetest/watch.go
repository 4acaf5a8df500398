package leasetest

import (
	"fmt"
	"sort"
	"strconv"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
)

// Watches and lists follow the API server's semantics closely enough for an
// informer or a list-then-watch loop:
//
//   - list returns the matching Leases of a namespace (all namespaces for
//     ""), with the server's current resourceVersion in the list's metadata;
//   - watch with resourceVersion "" or "0" first sends an Added event for
//     every matching Lease, then every later change; with a resourceVersion
//     from a list or an event, it sends every change after that version
//     (none is lost between a list and the watch that follows it), or fails
//     with 410 Gone when the version is newer than the server's;
//   - label selectors and the field selectors metadata.name and
//     metadata.namespace filter both;
//   - every create and update is a Modified event (Added for a create), a
//     delete a Deleted event carrying the last version;
//   - a partitioned Client's open watches stop (the result channel is
//     closed, as when a connection drops), and its new ones fail.
//
// Events are queued without bound per watch, so a slow reader never blocks
// a writer; stop a watch (Stop) to let its goroutine end.

// logged is one stored version of a Lease.
type logged struct {
	version int64
	created bool
	deleted bool
	lease   *coordinationv1.Lease
}

// leaseWatch is one open watch.
type leaseWatch struct {
	namespace string
	labels    labels.Selector
	fields    fields.Selector
	client    *Client
	result    chan watch.Event

	mu      sync.Mutex
	queue   []watch.Event
	wake    chan struct{} // 1-buffered: the queue has grown or the watch stopped
	stopped bool
	done    chan struct{} // closed by Stop
	once    sync.Once
}

// matches reports whether l is one of w's Leases.
func (w *leaseWatch) matches(l *coordinationv1.Lease) bool {
	return matches(w.namespace, w.labels, w.fields, l)
}

func matches(namespace string, ls labels.Selector, fs fields.Selector, l *coordinationv1.Lease) bool {
	if namespace != "" && l.Namespace != namespace {
		return false
	}
	if ls != nil && !ls.Matches(labels.Set(l.Labels)) {
		return false
	}
	return fs == nil || fs.Matches(fields.Set{"metadata.name": l.Name, "metadata.namespace": l.Namespace})
}

// ResultChan implements watch.Interface.
func (w *leaseWatch) ResultChan() <-chan watch.Event { return w.result }

// Stop implements watch.Interface: the result channel is closed soon after.
func (w *leaseWatch) Stop() {
	w.once.Do(func() {
		w.mu.Lock()
		w.stopped = true
		w.mu.Unlock()
		close(w.done)
	})
}

// push queues ev for the reader; it never blocks.
func (w *leaseWatch) push(ev watch.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.queue = append(w.queue, ev)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// pump delivers the queue in order until Stop, then closes the result
// channel and forgets the watch.
func (w *leaseWatch) pump(s *Server) {
	defer func() {
		s.mu.Lock()
		delete(s.watches, w)
		s.mu.Unlock()
		w.client.mu.Lock()
		delete(w.client.watches, w)
		w.client.mu.Unlock()
		close(w.result)
	}()
	for {
		w.mu.Lock()
		batch := w.queue
		w.queue = nil
		w.mu.Unlock()
		for _, ev := range batch {
			select {
			case w.result <- ev:
			case <-w.done:
				return
			}
		}
		select {
		case <-w.wake:
		case <-w.done:
			return
		}
	}
}

// watchFor opens a watch for c.
func (s *Server) watchFor(c *Client, action k8stesting.Action) (bool, watch.Interface, error) {
	if c.cut.Load() {
		return true, nil, fmt.Errorf("%w (%s watch)", ErrPartitioned, c.name)
	}
	r := action.(k8stesting.WatchAction).GetWatchRestrictions()
	w := &leaseWatch{namespace: action.GetNamespace(), labels: r.Labels, fields: r.Fields, client: c,
		result: make(chan watch.Event), wake: make(chan struct{}, 1), done: make(chan struct{})}

	s.mu.Lock()
	switch r.ResourceVersion {
	case "", "0":
		for _, l := range s.objects {
			if w.matches(l) {
				w.queue = append(w.queue, watch.Event{Type: watch.Added, Object: l.DeepCopy()})
			}
		}
	default:
		from, err := strconv.ParseInt(r.ResourceVersion, 10, 64)
		if err != nil {
			s.mu.Unlock()
			return true, nil, apierrors.NewBadRequest(fmt.Sprintf("leasetest: resourceVersion %q is not a number", r.ResourceVersion))
		}
		if from > s.version {
			s.mu.Unlock()
			return true, nil, apierrors.NewResourceExpired(fmt.Sprintf("leasetest: resourceVersion %d is newer than the server's %d", from, s.version))
		}
		for _, e := range s.log {
			if e.version > from && w.matches(e.lease) {
				w.queue = append(w.queue, event(e))
			}
		}
	}
	if len(w.queue) > 0 {
		w.wake <- struct{}{}
	}
	s.watches[w] = true
	s.mu.Unlock()

	c.mu.Lock()
	if c.watches == nil {
		c.watches = map[*leaseWatch]bool{}
	}
	c.watches[w] = true
	c.mu.Unlock()
	if c.cut.Load() { // partitioned meanwhile: Partition may have missed it
		w.Stop()
	}
	go w.pump(s)
	return true, w, nil
}

func event(e logged) watch.Event {
	t := watch.Modified
	switch {
	case e.created:
		t = watch.Added
	case e.deleted:
		t = watch.Deleted
	}
	return watch.Event{Type: t, Object: e.lease.DeepCopy()}
}

// notify logs a stored version and sends it to the watches it matches.
// s.mu is held.
func (s *Server) notify(obj *coordinationv1.Lease, created bool) {
	e := logged{version: s.version, created: created, lease: obj.DeepCopy()}
	s.log = append(s.log, e)
	for w := range s.watches {
		if w.matches(obj) {
			w.push(event(e))
		}
	}
}

// notifyDeleted logs the deletion of gone (its last version, with the
// deletion's resourceVersion) and sends it to the watches it matches.
// s.mu is held.
func (s *Server) notifyDeleted(gone *coordinationv1.Lease) {
	e := logged{version: s.version, deleted: true, lease: gone}
	s.log = append(s.log, e)
	for w := range s.watches {
		if w.matches(gone) {
			w.push(event(e))
		}
	}
}

// list returns the Leases of namespace (all for "") that r selects. s.mu is
// held.
func (s *Server) list(namespace string, r k8stesting.ListRestrictions) runtime.Object {
	out := &coordinationv1.LeaseList{}
	out.ResourceVersion = strconv.FormatInt(s.version, 10)
	for _, l := range s.objects {
		if matches(namespace, r.Labels, r.Fields, l) {
			out.Items = append(out.Items, *l.DeepCopy())
		}
	}
	sort.Slice(out.Items, func(i, j int) bool {
		a, b := out.Items[i], out.Items[j]
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	return out
}

// stopWatches stops every open watch of c.
func (c *Client) stopWatches() {
	c.mu.Lock()
	open := make([]*leaseWatch, 0, len(c.watches))
	for w := range c.watches {
		open = append(open, w)
	}
	c.mu.Unlock()
	for _, w := range open {
		w.Stop()
	}
}
