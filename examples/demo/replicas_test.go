package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReplicasDemoMovesOnlyTheKilledReplicasShards(t *testing.T) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, runReplicas(ctx, replicasConfig{replicas: 3, shards: 6, killAfter: 500 * time.Millisecond}, &out))
	text := out.String()
	require.Contains(t, text, "killing replica-0", text)
	require.Contains(t, text, "run on the other replicas", text)
	// The last table: replica-1 and replica-2, three shards each.
	tables := strings.Split(text, "holders:\n")
	last, _, _ := strings.Cut(tables[len(tables)-1], "replica-0's shards")
	assert.Contains(t, last, "replica-1   3 shards")
	assert.Contains(t, last, "replica-2   3 shards")
	assert.NotContains(t, last, "replica-0")
	assert.Error(t, runReplicas(ctx, replicasConfig{replicas: 0, shards: 6}, &out))
}
