package supervisor

import "fmt"

// describe names a request to the root supervisor in words, for the errors
// that say which request failed: "start", `restart of child "jobs"`. A
// message it does not know is named by its type.
func describe(msg any) string {
	switch m := msg.(type) {
	case StartManager:
		return "start"
	case ShutdownManager:
		return "shutdown"
	case GetStatus:
		return "status request"
	case GatherHealth:
		return "health request"
	case RestartChild:
		return fmt.Sprintf("restart of child %q", m.Name)
	case StopChild:
		return fmt.Sprintf("stop of child %q", m.Name)
	case StartChild:
		return fmt.Sprintf("start of child %q", m.Name)
	case RemoveChild:
		return fmt.Sprintf("removal of child %q", m.Name)
	case AddChild:
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
	case RestartChild:
		return "restart"
	case StopChild:
		return "stop"
	case StartChild:
		return "start"
	case RemoveChild:
		return "removal"
	case AddChild:
		return "addition"
	default:
		return describe(msg)
	}
}
