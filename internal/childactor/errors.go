package childactor

import (
	"runtime/debug"

	"github.com/actorkube/controllermanager/actors"
)

// Call runs fn as the user call op of a child, turning a panic into a
// *PanicError and a returned error into a *CallError. It is how every user
// call in this package runs, and what the root package's free functions use.
func Call(kind actors.Kind, child, op string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &actors.PanicError{Child: child, Kind: kind, Op: op, Value: r, Stack: debug.Stack()}
		}
	}()
	if e := fn(); e != nil {
		return &actors.CallError{Child: child, Kind: kind, Op: op, Err: e}
	}
	return nil
}
