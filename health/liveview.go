package health

import (
	"time"

	"github.com/actorkube/controllermanager/liveview"
)

// The live view of the supervision tree moved to package liveview, which
// names it without the Debug prefix. The names below are the second
// release's and stay, as aliases and thin wrappers with the same behaviour,
// so that code written against them compiles unchanged.

// DefaultDebugPrefix is where NewDebugHandler serves unless WithDebugPrefix
// says otherwise.
//
// Deprecated: use liveview.DefaultPrefix.
const DefaultDebugPrefix = liveview.DefaultPrefix

// DebugTokenHeader is the header of a control request.
//
// Deprecated: use liveview.TokenHeader.
const DebugTokenHeader = liveview.TokenHeader

// DebugSource is what the live view needs of a manager.
//
// Deprecated: use liveview.Source.
type DebugSource = liveview.Source

// DebugHandler serves a live view of a manager's supervision tree.
//
// Deprecated: use liveview.View.
type DebugHandler = liveview.View

// DebugOption configures NewDebugHandler.
//
// Deprecated: use liveview.Option.
type DebugOption = liveview.Option

// DebugStatus is the JSON of status.json and of the event stream's
// "status" events.
//
// Deprecated: use liveview.Status.
type DebugStatus = liveview.Status

// DebugLeadership is the leader election as the manager reports it.
//
// Deprecated: use liveview.Leadership.
type DebugLeadership = liveview.Leadership

// DebugChild is one child of the manager.
//
// Deprecated: use liveview.Child.
type DebugChild = liveview.Child

// DebugError is an error as text, and the stacks it carries.
//
// Deprecated: use liveview.Error.
type DebugError = liveview.Error

// DebugEvent is a supervisor.Event with its error as text.
//
// Deprecated: use liveview.Event.
type DebugEvent = liveview.Event

// DebugShard is one shard, with sharded leadership.
//
// Deprecated: use liveview.Shard.
type DebugShard = liveview.Shard

// DebugControls tells the page whether to show its buttons.
//
// Deprecated: use liveview.Controls.
type DebugControls = liveview.Controls

// NewDebugHandler returns the live view of src's supervision tree.
//
// Deprecated: use liveview.Handler.
func NewDebugHandler(src DebugSource, opts ...DebugOption) *DebugHandler {
	return liveview.Handler(src, opts...)
}

// WithDebugPrefix sets the path the handler serves under.
//
// Deprecated: use liveview.WithPrefix.
func WithDebugPrefix(prefix string) DebugOption { return liveview.WithPrefix(prefix) }

// WithDebugControls turns on the page's Restart, Stop and Start buttons.
//
// Deprecated: use liveview.WithControls.
func WithDebugControls(token string) DebugOption { return liveview.WithControls(token) }

// WithDebugAllowedHosts adds names the view is served under to its Host
// allowlist.
//
// Deprecated: use liveview.WithAllowedHosts.
func WithDebugAllowedHosts(hosts ...string) DebugOption {
	return liveview.WithAllowedHosts(hosts...)
}

// WithDebugMaxStreams bounds the event streams served at once.
//
// Deprecated: use liveview.WithMaxStreams.
func WithDebugMaxStreams(n int) DebugOption { return liveview.WithMaxStreams(n) }

// WithDebugTimeout bounds each Status call the handler makes.
//
// Deprecated: use liveview.WithTimeout.
func WithDebugTimeout(d time.Duration) DebugOption { return liveview.WithTimeout(d) }

// WithDebugRefresh sets how often the event stream pushes a fresh Status
// snapshot when nothing happens.
//
// Deprecated: use liveview.WithRefresh.
func WithDebugRefresh(d time.Duration) DebugOption { return liveview.WithRefresh(d) }

// WithDebugStreamBuffer sets how many events one event stream holds for a
// slow browser.
//
// Deprecated: use liveview.WithStreamBuffer.
func WithDebugStreamBuffer(n int) DebugOption { return liveview.WithStreamBuffer(n) }

// WithDebugWindow sets how far back the failure history of each child goes.
//
// Deprecated: use liveview.WithWindow.
func WithDebugWindow(d time.Duration) DebugOption { return liveview.WithWindow(d) }
