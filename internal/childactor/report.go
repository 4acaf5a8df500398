package childactor

import (
	"fmt"

	"github.com/actorkube/controllermanager/actors"
)

func reportedError(kind actors.Kind, child string, err error) error {
	return fmt.Errorf("%s %q: failure reported by its background work: %w", kind, child, err)
}
