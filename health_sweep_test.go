package controllermanager_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
)

// Two controllers whose GetHealth hangs, at the head of each half of the
// sweep (where its workers start), hold up no other answer: every other
// controller is answered healthy within HealthTimeout, sweep after sweep,
// and the hung ones are reported silent, each with one GetHealth in flight.
// There are enough controllers for the queries to be sent by more than one
// goroutine.
func TestGetHealthAnswersEveryOtherControllerWhileTwoHang(t *testing.T) {
	const n = 1100
	const timeout = 500 * time.Millisecond
	hang := make(chan struct{})
	defer close(hang)
	m := newManager(t, nil, &cm.SupervisionSpec{HealthTimeout: metav1.Duration{Duration: timeout}})
	hung := map[int]*testchild.Controller{}
	for i := range n {
		c := testchild.NewController(fmt.Sprintf("c%04d", i), testchild.Behavior{})
		if i == 0 || i == n/2 {
			c.Set(testchild.Behavior{Health: func() (bool, string) { <-hang; return true, "" }})
			hung[i] = c
		}
		m.Add(c)
	}
	require.NoError(t, m.Start(context.Background(), 0))

	for range 3 {
		health := m.GetHealth()
		require.Len(t, health, n)
		for i, h := range health {
			name := fmt.Sprintf("c%04d", i)
			if hung[i] != nil {
				assert.Equal(t, cm.HealthStatus{Name: name, Message: fmt.Sprintf("no health answer within %s", timeout)}, h)
				continue
			}
			assert.Equal(t, cm.HealthStatus{Name: name, Healthy: true}, h, "answered although two GetHealth hang")
		}
	}
	for _, c := range hung {
		_, _, calls := c.Counts()
		assert.Equal(t, 1, calls, "a hung GetHealth is not called again while it runs")
	}
}
