package liveview

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/actorkube/controllermanager/supervisor"

	"github.com/actorkube/controllermanager/internal/respond"
)

// The names of the event stream's events.
const (
	sseStatus      = "status"      // data: a Status
	sseEvent       = "event"       // data: a Event
	sseDropped     = "dropped"     // data: {"dropped": n}: this stream fell behind; a status follows
	sseUnavailable = "unavailable" // data: {"error": "..."}: the manager did not answer a Status
	sseEnd         = "end"         // data: {}: the manager has stopped; the stream ends after it
)

// streamRetryAfter is the Retry-After, in seconds, of a stream refused
// for WithMaxStreams: as long as the stream's own reconnection delay.
const streamRetryAfter = "2"

// streamDropped is the data of a "dropped" event.
type streamDropped struct {
	Dropped int64 `json:"dropped"`
}

// eventStream is one browser's stream: a bounded buffer between the
// subscriber, which never blocks, and the request's goroutine, which writes.
type eventStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	events  chan supervisor.Event
	dropped atomic.Int64
}

// offer is the stream's subscriber: it queues e, or counts it as dropped
// when the buffer is full. It never blocks, so a browser that reads slowly
// (or not at all) costs the supervisor nothing.
func (s *eventStream) offer(e supervisor.Event) {
	select {
	case s.events <- e:
	default:
		s.dropped.Add(1)
	}
}

// write sends one event to the browser within streamWriteTimeout.
func (s *eventStream) write(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// Not every ResponseWriter has deadlines (an httptest recorder has
	// none); where there are none, the server's own timeouts apply.
	if err := s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, data); err != nil {
		return err
	}
	return s.rc.Flush()
}

// serveEvents streams the manager's events until the browser goes or the
// manager stops: a "status" snapshot first, then each event as it comes, a
// fresh snapshot within statusDebounce of each burst of events and every
// refresh interval, and "end" once the manager has stopped.
func (h *View) serveEvents(w http.ResponseWriter, r *http.Request) {
	if !allowGet(w, r) {
		return
	}
	select {
	case h.streams <- struct{}{}:
		defer func() { <-h.streams }()
	default:
		w.Header().Set("Retry-After", streamRetryAfter)
		respond.Text(w, http.StatusServiceUnavailable, fmt.Sprintf("too many event streams at once (%d, liveview.WithMaxStreams): close a tab or retry later\n", cap(h.streams)))
		return
	}
	s := &eventStream{w: w, rc: http.NewResponseController(w), events: make(chan supervisor.Event, h.cfg.streamBuffer)}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Accel-Buffering", "no") // nginx: do not hold events back
	w.WriteHeader(http.StatusOK)
	if _, err := io.WriteString(w, "retry: 2000\n\n"); err != nil {
		return
	}
	if err := s.rc.Flush(); err != nil {
		return // this ResponseWriter cannot stream
	}
	if r.Method == http.MethodHead {
		return
	}
	// A stream reads nothing more from its client, and lasts longer than a
	// server's ReadTimeout, which would end it (net/http cancels a request
	// whose connection's read deadline passes): lift the read deadline. Each
	// write keeps its own deadline, so a client that stops reading still goes.
	if err := s.rc.SetReadDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return
	}

	// Subscribe before the first snapshot, so that nothing between the two
	// is missed (an event both in the snapshot and streamed after it is
	// applied twice; the next snapshot, due within statusDebounce, has the
	// last word).
	cancel := h.src.Subscribe(s.offer)
	defer cancel()

	var done <-chan struct{}
	if st, ok := h.src.(stopper); ok {
		done = st.Done()
	}
	if h.writeStatus(s, r) != nil {
		return
	}
	refresh := time.NewTicker(h.cfg.refresh)
	defer refresh.Stop()
	snapshot := time.NewTimer(statusDebounce)
	snapshot.Stop()
	defer snapshot.Stop()
	armed := false
	arm := func() {
		if !armed {
			snapshot.Reset(statusDebounce)
			armed = true
		}
	}
	for {
		var err error
		select {
		case <-r.Context().Done():
			return
		case <-done:
			// What is queued, then the final Status (GetStatus answers it
			// after the stop), then the end.
			for len(s.events) > 0 && err == nil {
				err = s.write(sseEvent, newEvent(<-s.events))
			}
			if err == nil {
				err = h.writeStatus(s, r)
			}
			if err == nil {
				_ = s.write(sseEnd, struct{}{})
			}
			return
		case e := <-s.events:
			err = s.write(sseEvent, newEvent(e))
			if n := s.dropped.Swap(0); n > 0 && err == nil {
				err = s.write(sseDropped, streamDropped{Dropped: n})
			}
			arm()
		case <-snapshot.C:
			armed = false
			err = h.writeStatus(s, r)
		case <-refresh.C:
			err = h.writeStatus(s, r)
		}
		if err != nil {
			return // the browser has gone, or stopped reading
		}
	}
}

// writeStatus sends a snapshot, or "unavailable" when the manager does not
// answer.
func (h *View) writeStatus(s *eventStream, r *http.Request) error {
	st, err := h.status(r)
	if err != nil {
		if r.Context().Err() != nil {
			return r.Context().Err()
		}
		return s.write(sseUnavailable, map[string]string{"error": err.Error()})
	}
	return s.write(sseStatus, st)
}
