package supervise

import (
	"fmt"
	"time"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
)

// Facade plumbing: Specs classifies and names what was added to a manager
// in mode, in order, and validates the result, reporting every problem at
// once (StartManager's Children and Err). A controller without a Name
// method is named by GetHealth().Name, each call bounded by nameTimeout
// (the manager's HealthTimeout).
//
// An actors.Spec among added is taken as given (a controller the facade
// named and pinned itself); an Invalid is reported as that child's problem.
func Specs(mode Mode, added []any, nameTimeout time.Duration) ([]childactor.Spec, error) {
	specs := make([]childactor.Spec, len(added))
	errs := make([]error, len(added))
	var byHealth []int // controllers named by GetHealth().Name
	for i, v := range added {
		switch given := v.(type) {
		case childactor.Spec: // named and classified by the facade already
			specs[i] = given
			continue
		case Invalid:
			errs[i] = given.Err
			continue
		}
		spec, err := classify(mode, v)
		if err != nil {
			errs[i] = err
			continue
		}
		specs[i] = spec
		if _, hasName := v.(actors.Namer); hasName || spec.Kind != actors.KindController {
			// Name() is a getter: call it here, panics recovered.
			specs[i].Name, errs[i] = childactor.NameOf(v)
			if errs[i] == nil && specs[i].Name == "" && spec.Kind == actors.KindRunnable {
				specs[i].Name = fmt.Sprintf("runnable-%d", i)
			}
			continue
		}
		// A controller's name is GetHealth().Name: user code that may hang.
		byHealth = append(byHealth, i)
	}
	if len(byHealth) > 0 {
		vals := make([]any, len(byHealth))
		for j, i := range byHealth {
			vals[j] = added[i]
		}
		names, nerrs := childactor.ResolveNames(vals, nameTimeout)
		for j, i := range byHealth {
			specs[i].Name, errs[i] = names[j], nerrs[j]
		}
	}
	if err := validateSpecs(specs, errs); err != nil {
		return nil, err
	}
	return specs, nil
}

// Facade plumbing: Invalid, among the values given to Specs, is a child the
// facade could not even build; Err says why, and Specs reports it by the
// child's position.
type Invalid struct{ Err error }
