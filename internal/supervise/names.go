package supervise

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/supervisor"
)

// Facade plumbing: CheckName is the one rule for a name, wherever a child
// or a group is named (Add and AddStore through Start, AddChild, NewGroup,
// AddSharded): a name is one segment of a path, neither empty nor blank,
// without "/" and without a control character, at the root as in a group,
// whether or not groups exist. A child's path is its groups' names and its
// own joined by "/", so a "/" in a name would file it inside a group it
// does not belong to ("g/evil" at the root inside group g) and a blank one
// would make a path end in "/"; a control character (a newline) would
// forge lines of the one-line-per-check /healthz listing. It returns nil for a good name, else an error wrapping
// supervisor.ErrInvalidName that quotes the name, its kind and where it
// was given: parent is the path of the group it is in, "" for the root.
func CheckName(name string, kind actors.Kind, parent string) error {
	var why string
	switch {
	case name == "":
		why = "an empty name"
	case strings.TrimSpace(name) == "":
		why = "a blank name"
	case strings.Contains(name, "/"):
		why = `"/" is not allowed in a name (a child's path joins its groups' names and its own with "/")`
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		why = "a control character (a newline, a tab, ...) is not allowed in a name (the /healthz listing is one line per check)"
	default:
		return nil
	}
	where := "at the root"
	if parent != "" {
		where = fmt.Sprintf("in group %q", parent)
	}
	if kind == "" {
		kind = "child"
	}
	return fmt.Errorf("%w: %s %q %s: %s", supervisor.ErrInvalidName, kind, name, where, why)
}
