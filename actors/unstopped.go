package actors

import (
	"fmt"
	"time"
)

// Unstopped is a child whose Shutdown had not returned when its waiter gave
// up: who it is, how long its Shutdown had run, and where it is stuck.
type Unstopped struct {
	Name string
	Kind Kind
	// Call is the user call it is stuck in: "Shutdown", or, for a child
	// stopped while starting, the start call ("Run", "Recover", "Start")
	// that its Shutdown waits for; empty for a child that had not been
	// stopped yet (its Stop not yet taken when the waiter gave up).
	Call string
	// For is how long ago it was stopped; 0 when it had not been yet.
	For time.Duration
	// Goroutine is the id of the goroutine running Call (0 if it was not
	// found: the call had not begun yet).
	Goroutine int64
	// Stack is that goroutine's stack as runtime.Stack prints it, its
	// "goroutine N [state]:" line first; empty when it could not be found.
	Stack string
}

// String is one line: the child, its call and how long it has run.
func (u Unstopped) String() string {
	if u.Call == "" {
		return fmt.Sprintf("%s %q (not stopped yet: its Shutdown had not been called)", u.Kind, u.Name)
	}
	if u.Call != "Shutdown" {
		return fmt.Sprintf("%s %q (stopped %s ago, its %s has not returned: Shutdown waits for it)", u.Kind, u.Name, u.For.Round(time.Millisecond), u.Call)
	}
	return fmt.Sprintf("%s %q (Shutdown running for %s)", u.Kind, u.Name, u.For.Round(time.Millisecond))
}
