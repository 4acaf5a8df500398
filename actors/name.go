package actors

import (
	"fmt"
	"time"
)

// ResolveName finds the name of v in a goroutine of its own, so that a name
// method that hangs or panics cannot hang or crash the caller: Name() when v
// has one (Stores, Webhooks, Controllers implementing Namer), else
// GetHealth().Name for a Controller, else "" (a plain Runnable has no name).
// It gives up after timeout.
func ResolveName(v any, timeout time.Duration) (string, error) {
	var op string
	var fn func() string
	switch x := v.(type) {
	case Namer:
		op, fn = "Name", x.Name
	case Controller:
		op, fn = "GetHealth", func() string { return x.GetHealth().Name }
	default:
		return "", nil
	}
	type result struct {
		name string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var name string
		err := Call("child", fmt.Sprintf("%T", v), op, func() error { name = fn(); return nil })
		done <- result{name, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		if r.err != nil {
			return "", fmt.Errorf("cannot name %T: %w", v, r.err)
		}
		return r.name, nil
	case <-timer.C:
		return "", fmt.Errorf("cannot name %T: %s did not return within %s", v, op, timeout)
	}
}
