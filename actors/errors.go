package actors

import (
	"errors"
	"fmt"
)

// PanicError is a panic in a user call, recovered by the child actor that
// hosted the call. It names the child and the call, and carries the stack of
// the goroutine that panicked.
type PanicError struct {
	Child string // the child's name
	Kind  Kind   // what the child hosts
	Op    string // the user call: "Run", "Recover", "Start", "Shutdown", "GetHealth", "Ready", "Handle"
	Value any    // what was passed to panic
	Stack []byte // the stack of the panicking goroutine, as runtime/debug.Stack prints it
}

// Error names the child, the call and the panic value; the stack is in Stack.
func (e *PanicError) Error() string {
	return fmt.Sprintf("%s %q: panic in %s: %v", e.Kind, e.Child, e.Op, e.Value)
}

// Unwrap returns the panic value when it is an error, so that
// errors.Is(err, target) sees through panic(target).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// CallError is an error returned by a user call, wrapped with the child's
// name and the call. errors.Is and errors.As see the returned error.
type CallError struct {
	Child string
	Kind  Kind
	Op    string
	Err   error
}

// Error names the child and the call, then the error the call returned.
func (e *CallError) Error() string {
	return fmt.Sprintf("%s %q: %s: %v", e.Kind, e.Child, e.Op, e.Err)
}

// Unwrap returns the error the user call returned.
func (e *CallError) Unwrap() error { return e.Err }

// ErrReported is wrapped by the failure a child reports through the function
// of ReportFailure when it is called with a nil error.
var ErrReported = errors.New("actors: failure reported by the child's background work")
