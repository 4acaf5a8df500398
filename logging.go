package controllermanager

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// minLevel drops records below min.
type minLevel struct {
	min  slog.Level
	next slog.Handler
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.next.Enabled(ctx, l)
}
func (h minLevel) Handle(ctx context.Context, r slog.Record) error { return h.next.Handle(ctx, r) }
func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{h.min, h.next.WithAttrs(attrs)}
}
func (h minLevel) WithGroup(name string) slog.Handler { return minLevel{h.min, h.next.WithGroup(name)} }

// protoactorLogs demotes protoactor's Info records (system started, dead
// letters) to Debug: they are the runtime's business, not the host's.
type protoactorLogs struct{ next slog.Handler }

func (h protoactorLogs) level(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}
func (h protoactorLogs) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, h.level(l))
}
func (h protoactorLogs) Handle(ctx context.Context, r slog.Record) error {
	r.Level = h.level(r.Level)
	return h.next.Handle(ctx, r)
}
func (h protoactorLogs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return protoactorLogs{h.next.WithAttrs(attrs)}
}
func (h protoactorLogs) WithGroup(name string) slog.Handler {
	return protoactorLogs{h.next.WithGroup(name)}
}

// newActorSystem returns an actor system whose logs go to logger, with no
// metrics provider (protoactor's default one takes a global port).
func newActorSystem(logger *slog.Logger) *actor.ActorSystem {
	return actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(protoactorLogs{next: logger.Handler()}).With("lib", "protoactor")
		}),
		// Late replies to callers that gave up (a health answer after its
		// deadline) are expected; they are logged at Debug. protoactor starts
		// a goroutine per throttle interval after a dead letter: keep it
		// short-lived so that nothing of ours lingers after a shutdown.
		actor.WithDeadLetterRequestLogging(false),
		actor.WithDeadLetterThrottleInterval(50*time.Millisecond),
	)
}
