package controllermanager_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
)

// blockingName is a controller whose Name does not return until released.
type blockingName struct {
	*testchild.Controller
	release <-chan struct{}
}

func (b blockingName) Name() string { <-b.release; return "hung" }

// A Name that blocks used to be called on Start's goroutine, before Start
// looked at its context or its startTimeout: Start never returned, nor did
// Serve after its context ended (SIGTERM), while the same child given to
// AddChild was refused after HealthTimeout. It is named off the caller's
// goroutine now, bounded by HealthTimeout, as a controller named by
// GetHealth is (found by a review; 20 of 20 hung before).
func TestStartIsBoundedWhenANameBlocks(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	m := newManager(t, nil, &cm.SupervisionSpec{HealthTimeout: metav1.Duration{Duration: 100 * time.Millisecond}})
	m.Add(blockingName{testchild.NewController("x", testchild.Behavior{}), release})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx, 300*time.Millisecond) }()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "Name did not return within 100ms")
	case <-time.After(wait):
		t.Fatal("Start hung on a Name that blocks, past its context and its startTimeout")
	}
}

func TestServeReturnsWhenANameBlocks(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	m := newManager(t, nil, &cm.SupervisionSpec{HealthTimeout: metav1.Duration{Duration: 100 * time.Millisecond}})
	m.Add(blockingName{testchild.NewController("x", testchild.Behavior{}), release})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, time.Minute, time.Second) }()
	cancel() // SIGTERM
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("Serve did not return after its context ended: Start stuck in a Name")
	}
}
