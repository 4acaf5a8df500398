package webhook

import "errors"

// ErrDuplicatePath is wrapped by the error of a manager's Start, or of its
// AddChild, that finds two webhooks with one Path(): the error names both
// and the path. A path is served by one webhook only, so a second is a
// configuration error, not something to serve on a first-come basis.
var ErrDuplicatePath = errors.New("webhook: two webhooks have one path")
