package childactor

import (
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/actorkube/controllermanager/actors"
)

// ResolveName finds the name of v in a goroutine of its own, so that a name
// method that hangs or panics cannot hang or crash the caller: Name() when v
// has one (Stores, Webhooks, Controllers implementing Namer), else
// GetHealth().Name for a Controller, else "" (a plain Runnable has no name).
// It gives up after timeout.
func ResolveName(v any, timeout time.Duration) (string, error) {
	names, errs := ResolveNames([]any{v}, timeout)
	return names[0], errs[0]
}

// ResolveNames is ResolveName for many values at once, with one deadline
// for all of them: each name method still runs in a goroutine of its own,
// under its own recover, but the wait is one timer, not one per value.
// names[i] and errs[i] answer vals[i].
func ResolveNames(vals []any, timeout time.Duration) (names []string, errs []error) {
	n := len(vals)
	names, errs = make([]string, n), make([]error, n)
	if n == 0 {
		return names, errs
	}
	var mu sync.Mutex
	answered := make([]bool, n)
	left := n
	done := make(chan struct{})
	for i, v := range vals {
		go func() {
			name, err := resolveNameNow(v)
			mu.Lock()
			defer mu.Unlock()
			if left < 0 { // the deadline passed: the caller has moved on
				return
			}
			names[i], errs[i], answered[i] = name, err, true
			if left--; left == 0 {
				close(done)
			}
		}()
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
	mu.Lock()
	defer mu.Unlock()
	if left > 0 {
		for i, ok := range answered {
			if !ok {
				errs[i] = fmt.Errorf("cannot name %T: %s did not return within %s", vals[i], nameOp(vals[i]), timeout)
			}
		}
	}
	left = -1
	return names, errs
}

// resolveNameNow runs v's name method here, turning a panic into an error.
func resolveNameNow(v any) (name string, err error) {
	op := nameOp(v)
	switch x := v.(type) {
	case actors.Namer:
		name, err = NameOf(v)
	case actors.Controller:
		err = callNamed(v, op, func() { name = x.GetHealth().Name })
	}
	if err != nil {
		return "", fmt.Errorf("cannot name %T: %w", v, err)
	}
	return name, nil
}

// NameOf calls v's Name method here, when it has one, turning a panic into
// a *PanicError. A value without one has no name.
func NameOf(v any) (name string, err error) {
	n, ok := v.(actors.Namer)
	if !ok {
		return "", nil
	}
	err = callNamed(v, "Name", func() { name = n.Name() })
	return name, err
}

// NamesOf names vals, each of which has a Name method, off the caller's
// goroutine and within timeout, so that a Name that blocks cannot hang the
// caller (a Start, which has not looked at its context yet). Name is a
// getter: the calls run one after another in one goroutine, where a
// goroutine each would cost a Start of many children a fifth more. When
// the deadline passes, the call in progress is reported as not returned
// and the values after it are named as ResolveNames names, each in a
// goroutine of its own, within timeout again. names[i] and errs[i] answer
// vals[i].
func NamesOf(vals []any, timeout time.Duration) (names []string, errs []error) {
	n := len(vals)
	names, errs = make([]string, n), make([]error, n)
	if n == 0 {
		return names, errs
	}
	var mu sync.Mutex
	next, abandoned := 0, false // next: the index being named
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, v := range vals {
			name, err := NameOf(v)
			if err != nil {
				err = fmt.Errorf("cannot name %T: %w", v, err)
			}
			mu.Lock()
			if abandoned {
				mu.Unlock()
				return
			}
			names[i], errs[i], next = name, err, i+1
			mu.Unlock()
		}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
		return names, errs
	case <-timer.C:
	}
	mu.Lock()
	abandoned = true
	stuck := next
	mu.Unlock()
	if stuck == n {
		return names, errs // the last returned as the deadline passed
	}
	errs[stuck] = fmt.Errorf("cannot name %T: Name did not return within %s", vals[stuck], timeout)
	restNames, restErrs := ResolveNames(vals[stuck+1:], timeout)
	copy(names[stuck+1:], restNames)
	copy(errs[stuck+1:], restErrs)
	return names, errs
}

// callNamed runs fn under recover, formatting the child's type only when
// it panicked.
func callNamed(v any, op string, fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &actors.PanicError{Child: fmt.Sprintf("%T", v), Kind: "child", Op: op, Value: r, Stack: debug.Stack()}
		}
	}()
	fn()
	return nil
}

func nameOp(v any) string {
	if _, ok := v.(actors.Namer); ok {
		return "Name"
	}
	return "GetHealth"
}
