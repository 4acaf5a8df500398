// Package journal is the record a replica program keeps of what it did, one JSON object
// per line, and what the end-to-end tests read back: when each controller became active
// and stopped, what the supervisor reported, which leader the replica observed, which
// admission requests reached its webhook, and how it exited.
//
// Times are wall-clock Unix nanoseconds, so that entries written by different processes
// on one machine compare directly.
package journal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Kind says what an Entry records.
type Kind string

// The kinds of entries, in the order a replica's life usually writes them.
const (
	// Begin: the program has parsed its flags; PID is set.
	Begin Kind = "begin"
	// WebhookServing: the TLS webhook server listens on Addr.
	WebhookServing Kind = "webhook-serving"
	// RunCalled: the manager called a controller's Run (Controller, Incarnation).
	RunCalled Kind = "run-called"
	// Running: a controller's Run is about to return nil: it is active from here.
	Running Kind = "running"
	// ShutdownCalled: the manager called a controller's Shutdown: it stops being active.
	ShutdownCalled Kind = "shutdown-called"
	// Stopped: a controller's Shutdown is about to return: its work has ended.
	Stopped Kind = "stopped"
	// Supervision: an event of the manager's supervision tree (Type, Child, ChildKind,
	// Phase, Restarts, Err); Time is the event's own time.
	Supervision Kind = "supervision"
	// Leader: the replica observed a new lease holder (Leader; empty after a release).
	Leader Kind = "leader"
	// ShardHolder: with sharding, the replica observed a new holder of Shard (Leader;
	// empty when none), Name the shard's Lease, Held whether it is this replica; the
	// first for each shard lists the shard's Children.
	ShardHolder Kind = "shard-holder"
	// WebhookStarted and WebhookStopped: the webhook's Start returned nil, its Shutdown
	// was called.
	WebhookStarted Kind = "webhook-started"
	WebhookStopped Kind = "webhook-stopped"
	// Admission: the webhook's Handle answered a request (Operation, Namespace, Name,
	// Allowed, Message); AdmissionPanic: Handle is about to panic on one.
	Admission      Kind = "admission"
	AdmissionPanic Kind = "admission-panic"
	// Write: the writer controller's write of its ConfigMap returned: Name is the
	// resourceVersion it committed, or Err why it failed (a refusal by the lease guard
	// included).
	Write Kind = "write"
	// StartReturned: the manager's Start returned (Err when it failed).
	StartReturned Kind = "start-returned"
	// ShutdownReturned: the manager's Serve returned (Err: what it returned), so
	// ShutdownAndWait has returned: every runnable has stopped and the lease, if held,
	// was released.
	ShutdownReturned Kind = "shutdown-returned"
	// Exit: the program is about to exit with Code (Err: why, when not 0).
	Exit Kind = "exit"
)

// The annotations the replica program's validating webhook acts on; the journal
// records what it did with them.
const (
	// DenyAnnotation: the webhook denies the object, with the annotation's value in
	// its message.
	DenyAnnotation = "e2e.actorkube.io/deny"
	// PanicAnnotation: the webhook's Handle panics, which fails the webhook at once,
	// so that its supervisor restarts it.
	PanicAnnotation = "e2e.actorkube.io/panic"
)

// Entry is one line of a journal. Fields that do not apply to its Kind are empty.
type Entry struct {
	Time    int64  `json:"t"`
	Kind    Kind   `json:"ev"`
	Replica string `json:"replica"`

	PID         int    `json:"pid,omitempty"`
	Controller  string `json:"controller,omitempty"`
	Incarnation int    `json:"n,omitempty"`

	Type      string `json:"type,omitempty"`
	Child     string `json:"child,omitempty"`
	ChildKind string `json:"childKind,omitempty"`
	Phase     string `json:"phase,omitempty"`
	Restarts  int    `json:"restarts,omitempty"`
	// Shard is the shard of a Supervision event about one (ShardAcquired, ShardReleased,
	// ShardLost) and of a ShardHolder entry; 0 when omitted.
	Shard    int      `json:"shard,omitempty"`
	Held     bool     `json:"held,omitempty"`
	Children []string `json:"children,omitempty"`

	Leader string `json:"leader,omitempty"`
	Addr   string `json:"addr,omitempty"`

	Operation string `json:"op,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Allowed   bool   `json:"allowed,omitempty"`
	Message   string `json:"message,omitempty"`

	Code int    `json:"code,omitempty"`
	Err  string `json:"err,omitempty"`
}

// At is the entry's time.
func (e Entry) At() time.Time { return time.Unix(0, e.Time) }

// Writer appends entries to a file, one write(2) per line, so that a reader never sees
// half a line that a later write completes, and that what was written survives a
// SIGKILL of the writer. It is safe for concurrent use.
type Writer struct {
	replica string

	mu  sync.Mutex
	out io.Writer
	err error // the first write error; later writes are dropped
}

// NewWriter returns a Writer that stamps every entry with replica and writes to out.
func NewWriter(out io.Writer, replica string) *Writer {
	return &Writer{out: out, replica: replica}
}

// Write stamps e with the replica and, when its Time is zero, the current time, then
// appends it.
func (w *Writer) Write(e Entry) {
	if e.Time == 0 {
		e.Time = time.Now().UnixNano()
	}
	e.Replica = w.replica
	line, err := json.Marshal(e)
	if err != nil { // cannot happen: every field marshals
		panic(err)
	}
	line = append(line, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		_, w.err = w.out.Write(line)
	}
}

// Err is the first error a write returned.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// ReadFile returns the entries of the journal at path, in the order they were written.
// A missing file is an empty journal (the program has not opened it yet); a last line
// without its newline is being written and is left out.
func ReadFile(path string) ([]Entry, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		data = nil
	}
	var entries []Entry
	scanner := bufio.NewScanner(bytes.NewReader(data))
	scanner.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; scanner.Scan(); line++ {
		var e Entry
		if err := json.Unmarshal(scanner.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		entries = append(entries, e)
	}
	return entries, scanner.Err()
}
