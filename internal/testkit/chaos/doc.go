// Package chaos drives a ControllerManager through random faults and
// lifecycle messages, and checks, while it runs and at the end, that the
// supervisor's books agree with the children's own: the reliability suite's
// chaos test and the soak program (cmd/soak) share it.
//
// A Harness builds a manager with controllers, stores and webhooks that
// record every call they receive and fail on demand: panics, errors,
// unhealthy and hung health answers, slow and hung Shutdown calls, failures
// reported from their background work, failing restarts, failing and slow
// admission calls. While faults are injected at a steady rate, lifecycle
// messages (RestartChild, StopChild, StartChild, AddChild, RemoveChild,
// GetStatus) are sent at random and real AdmissionReviews are posted to the
// webhooks through the manager's Handler over HTTP.
//
// Every event is checked as it arrives, so memory stays bounded however
// long the harness runs:
//
//   - a ChildFailed names a fault injected into that child (or an unhealthy
//     or silent health streak the child was made to have), of the
//     incarnation the event says, and no fault is counted twice;
//   - no incarnation fails twice;
//   - a failure reported by an incarnation that nothing else touched (no
//     lifecycle message in flight for its child) is counted, exactly once;
//   - the restart budget is replayed from the events: a failure past it is
//     followed by Escalated, and Escalated by nothing but a failure past it;
//   - the children's own records: a start call only once the previous
//     incarnation's Shutdown has returned, one Shutdown per start call.
//
// Settle and Verify then compare, child by child, the restarts and failures
// of the events, of Status, of the Prometheus metrics and of the children's
// own records, and the admission answers with the Handle calls.
package chaos
