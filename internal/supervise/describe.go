package supervise

import (
	"fmt"

	"github.com/actorkube/controllermanager/supervisor"
)

// Facade plumbing: Describe names a request to the root supervisor in
// words, as the errors of Ask do (describe).
func Describe(msg any) string { return describe(msg) }

// describe names a request to the root supervisor in words, for the errors
// that say which request failed: "start", `restart of child "jobs"`. A
// message it does not know is named by its type.
func describe(msg any) string {
	switch m := msg.(type) {
	case StartManager:
		return "start"
	case supervisor.ShutdownManager:
		return "shutdown"
	case supervisor.GetStatus:
		return "status request"
	case GatherHealth:
		return "health request"
	case supervisor.RestartChild:
		return fmt.Sprintf("restart of child %q", m.Name)
	case supervisor.StopChild:
		return fmt.Sprintf("stop of child %q", m.Name)
	case supervisor.StartChild:
		return fmt.Sprintf("start of child %q", m.Name)
	case supervisor.RemoveChild:
		return fmt.Sprintf("removal of child %q", m.Name)
	case supervisor.AddChild:
		if m.Name != "" {
			return fmt.Sprintf("addition of child %q", m.Name)
		}
		return "addition of a child"
	default:
		return fmt.Sprintf("request %T", msg)
	}
}

// action names what a lifecycle message does, without the child's name, for
// errors whose cause names the child already: `restart: supervisor: unknown
// child "jobs"`.
func action(msg any) string {
	switch msg.(type) {
	case supervisor.RestartChild:
		return "restart"
	case supervisor.StopChild:
		return "stop"
	case supervisor.StartChild:
		return "start"
	case supervisor.RemoveChild:
		return "removal"
	case supervisor.AddChild:
		return "addition"
	default:
		return describe(msg)
	}
}
