package journal

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWriteThenReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w := NewWriter(f, "replica-a")
	at := time.Unix(0, 1_700_000_000_123_456_789)
	w.Write(Entry{Time: at.UnixNano(), Kind: Running, Controller: "c", Incarnation: 2})
	w.Write(Entry{Kind: Exit, Code: 1, Err: "boom"})
	require.NoError(t, w.Err())

	have, err := ReadFile(path)
	require.NoError(t, err)
	require.Len(t, have, 2)
	require.Equal(t, Entry{Time: at.UnixNano(), Kind: Running, Replica: "replica-a", Controller: "c", Incarnation: 2}, have[0])
	require.True(t, have[0].At().Equal(at))
	require.Equal(t, Exit, have[1].Kind)
	require.NotZero(t, have[1].Time, "a zero time is stamped with the current one")
	require.Equal(t, "replica-a", have[1].Replica)
}

func TestReadFile(t *testing.T) {
	tests := []struct {
		name    string
		content string // "-" for no file
		want    int
		wantErr string
	}{
		{name: "missing file is empty", content: "-", want: 0},
		{name: "empty", content: "", want: 0},
		{name: "a half-written last line is left out", content: `{"t":1,"ev":"begin"}` + "\n" + `{"t":2,"ev":"ru`, want: 1},
		{name: "only a half-written line", content: `{"t":1,"ev`, want: 0},
		{name: "a garbled complete line is an error", content: "{\n", wantErr: "j.jsonl:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "j.jsonl")
			if tt.content != "-" {
				require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o600))
			}
			have, err := ReadFile(path)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Len(t, have, tt.want)
		})
	}
}

// failingWriter fails every write after the first.
type failingWriter struct{ bytes.Buffer }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.Len() > 0 {
		return 0, os.ErrClosed
	}
	return f.Buffer.Write(p)
}

func TestWriterKeepsTheFirstError(t *testing.T) {
	out := &failingWriter{}
	w := NewWriter(out, "r")
	w.Write(Entry{Kind: Begin})
	require.NoError(t, w.Err())
	w.Write(Entry{Kind: Exit})
	w.Write(Entry{Kind: Exit})
	require.ErrorIs(t, w.Err(), os.ErrClosed)
	require.Equal(t, 1, bytes.Count(out.Bytes(), []byte("\n")))
}

// A shard's index survives the round trip, shard 0 included, which omitempty leaves
// out of the line.
func TestShardEntriesRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w := NewWriter(f, "replica-a")
	want := []Entry{
		{Time: 1, Kind: Supervision, Type: "ShardAcquired", Shard: 0},
		{Time: 2, Kind: Supervision, Type: "ShardLost", Shard: 11},
		{Time: 3, Kind: ShardHolder, Shard: 3, Leader: "replica-b", Name: "controllers-3", Children: []string{"ticker-3", "informer-3"}},
		{Time: 4, Kind: ShardHolder, Shard: 3, Leader: "replica-a", Held: true},
	}
	for _, e := range want {
		w.Write(e)
	}
	require.NoError(t, w.Err())
	have, err := ReadFile(path)
	require.NoError(t, err)
	for i := range want {
		want[i].Replica = "replica-a"
	}
	require.Equal(t, want, have)
}
