package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Process is a child OS process started by this package: etcd, kube-apiserver or a helper
// program. Its stdout and stderr go to a log file. It runs in its own process group, so
// that a Ctrl-C aimed at go test reaches the harness (which stops it in order) rather
// than the child, and it receives SIGKILL if the test binary dies.
type Process struct {
	name    string
	logPath string
	cmd     *exec.Cmd

	done    chan struct{} // closed once the process has exited and been reaped
	waitErr error         // what Wait returned; read only after done is closed

	stopOnce sync.Once
	stopErr  error
}

// startProcess starts path with args, appending env to the test binary's environment and
// writing both output streams to logPath.
//
// The parent-death signal is delivered when the thread that forked the child exits, not
// when the process does, and the Go runtime may end a thread when a goroutine locked to
// it returns. So the child is forked from a goroutine that locks its thread for as long
// as the child runs: the thread then outlives the child unless the whole binary dies,
// which is exactly when the signal should fire.
func startProcess(name, path string, args, env []string, logPath string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("failed to open the log of %s: %w", name, err)
	}
	p := &Process{
		name:    name,
		logPath: logPath,
		done:    make(chan struct{}),
	}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(p.done)
		// Writing to an *os.File directly means exec starts no copying goroutines.
		defer logFile.Close()

		cmd := exec.Command(path, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout = logFile
		cmd.Stderr = logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			p.waitErr = err
			started <- fmt.Errorf("failed to start %s: %w", name, err)
			return
		}
		p.cmd = cmd
		started <- nil
		p.waitErr = cmd.Wait()
	}()
	if err := <-started; err != nil {
		<-p.done
		return nil, err
	}
	return p, nil
}

// Name is the name the process was started under, as used in errors.
func (p *Process) Name() string { return p.name }

// Pid is the process id, which is also its process group id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath is the file holding the process's stdout and stderr.
func (p *Process) LogPath() string { return p.logPath }

// Done is closed once the process has exited, for whatever reason.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitErr is the process's exit status as exec.Cmd.Wait reports it (nil for exit code 0);
// it is valid only once Done is closed.
func (p *Process) ExitErr() error {
	select {
	case <-p.done:
		return p.waitErr
	default:
		return errors.New(p.name + " is still running")
	}
}

// Signal sends sig to the process's group.
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := syscall.Kill(-p.Pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("failed to signal %s: %w", p.name, err)
	}
	return nil
}

// Stop asks the process to exit with SIGTERM and waits for it; after timeout it sends
// SIGKILL and waits again. It returns nil when the process exited by itself with code
// 0 or by the SIGTERM, and an error when it had to be killed, exited with another
// status, or had already exited before Stop was called (a crash the test should see).
// Calls after the first return the first one's result.
func (p *Process) Stop(timeout time.Duration) error {
	p.stopOnce.Do(func() { p.stopErr = p.stop(timeout) })
	return p.stopErr
}

// Kill sends SIGKILL to the process group and waits for the exit, as a crash would end
// it; a later Stop returns nil.
func (p *Process) Kill() error {
	var err error
	p.stopOnce.Do(func() {
		err = p.Signal(syscall.SIGKILL)
		<-p.done
	})
	return err
}

func (p *Process) stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited before it was stopped: %v%s", p.name, p.waitErr, p.logTail())
	default:
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		killErr := p.Signal(syscall.SIGKILL)
		<-p.done
		return errors.Join(fmt.Errorf("%s did not stop within %s of SIGTERM and was killed", p.name, timeout), killErr)
	}
	if exitedBy(p.waitErr, syscall.SIGTERM) {
		return nil
	}
	return p.waitErr
}

// exitedBy reports whether err is a clean exit or a death by sig.
func exitedBy(err error, sig syscall.Signal) bool {
	if err == nil {
		return true
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return false
	}
	status, ok := exitErr.Sys().(syscall.WaitStatus)
	return ok && status.Signaled() && status.Signal() == sig
}

// logTailLines is how much of a process's log an error or a failed test shows.
const logTailLines = 40

// logTail returns the last lines of the process's log, prefixed for an error message.
func (p *Process) logTail() string {
	tail := lastLines(p.logPath, logTailLines)
	if tail == "" {
		return ""
	}
	return fmt.Sprintf("\n--- last lines of %s ---\n%s", p.logPath, tail)
}

func lastLines(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	data = bytes.TrimRight(data, "\n")
	for i, seen := len(data)-1, 0; i >= 0; i-- {
		if data[i] == '\n' {
			if seen++; seen == n {
				return string(data[i+1:])
			}
		}
	}
	return string(data)
}
