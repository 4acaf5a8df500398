package election

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/supervise"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

func base(shards int) Config {
	return Config{Namespace: "ns", Name: "ctl", Identity: "a", Shards: shards,
		LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		ShardOf: func(string, int) int { return 1 }}
}

// TestConfigure checks what each kind of election sets in the supervisor's
// config: the single lease is shard 0 with no shard fields, through a
// clientset or a lock; shards fill them; before any acquisition every guard
// fails.
func TestConfigure(t *testing.T) {
	srv := leasetest.NewServer()
	lock, err := lease.NewLeaseLock(srv.Client("lock"), "ns", "ctl", "from-the-lock")
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		cfg      func() Config
		identity string
		shards   int
	}{
		{"single lease, clientset", func() Config { c := base(0); c.Client = srv.Client("a"); return c }, "a", 0},
		{"single lease, lock", func() Config { c := base(1); c.Lock = lock; return c }, "from-the-lock", 0},
		{"shards", func() Config { c := base(3); c.Client = srv.Client("a"); return c }, "a", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(tc.cfg())
			require.NoError(t, err)
			var cfg supervise.Config
			e.Configure(&cfg)
			assert.NotNil(t, cfg.Elector)
			assert.Equal(t, tc.identity, cfg.Identity)
			assert.Equal(t, tc.shards, cfg.Shards)
			assert.Equal(t, tc.shards > 1, e.Sharded())
			assert.Positive(t, cfg.FenceTimeout)
			require.NotNil(t, cfg.Guards)
			for _, kind := range []actors.Kind{actors.KindController, actors.KindStore} {
				assert.ErrorIs(t, cfg.Guards(childactor.Spec{Kind: kind})(), lease.ErrNotHeld, "%s: nothing is held yet", kind)
			}
			assert.ErrorIs(t, e.AnyShard(), lease.ErrNotHeld)
			if tc.shards > 1 {
				assert.Equal(t, "ctl-2", cfg.ShardLease(2))
				assert.Equal(t, 1, cfg.ShardOf("x"))
				assert.Len(t, cfg.ShardHolders(), 3)
			} else {
				assert.Nil(t, cfg.ShardLease)
			}
		})
	}
}

func TestNewNeedsAClientOrALock(t *testing.T) {
	_, err := New(base(1))
	require.Error(t, err)
	c := base(1)
	c.Client = leasetest.NewServer().Client("a")
	c.RetryPeriod = 0
	_, err = New(c)
	require.Error(t, err, "the elector's validation applies")
}
