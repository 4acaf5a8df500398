package supervisor

// Strategy says which children restart when one fails.
type Strategy string

// The restart strategies.
const (
	// OneForOne restarts only the child that failed (the default).
	OneForOne Strategy = "OneForOne"
	// AllForOne restarts every controller and webhook when one fails.
	AllForOne Strategy = "AllForOne"
	// RestForOne restarts the child that failed and the controllers and
	// webhooks added after it, in the order they were added.
	RestForOne Strategy = "RestForOne"
)
