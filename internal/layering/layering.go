// Package layering holds the module's import layers, drawn in
// docs/architecture.md ("## Layers") and checked by this package's test:
// every package imports only packages of the layers below its own, and
// every package of the module is in exactly one layer. The drawing in the
// doc is rendered from Layers, so the two cannot disagree.
package layering

import (
	"fmt"
	"strings"
)

// A Layer is a set of packages that import only from the layers below it,
// never from each other or from above.
type Layer struct {
	// Role says what the layer's packages are for, in a few words.
	Role string
	// Packages are import paths relative to the module's root; "." is
	// the root facade.
	Packages []string
}

// Layers are the module's packages from the top (what nothing imports)
// down to the leaves. Packages under internal/ sit just below their
// users. Only non-test files count: a package's tests may import a test
// kit from above it (supervisor's tests import testkit/testchild). The
// modules bench, ctrlruntime and e2e have go.mods of their own and sit
// above the root facade; they are not checked here.
var Layers = []Layer{
	{"programs, examples and the doc generators", []string{"cmd/soak", "examples/demo", "examples/fleet", "examples/hostloop", "examples/tenants", "hack/handlers", "internal/layering", "internal/surfacegen"}},
	{"test kits: children, the chaos and state-space harnesses", []string{"internal/testkit/chaos", "internal/testkit/docsection", "internal/testkit/statespace", "internal/testkit/testchild"}},
	{"the root facade: managers, options, errors", []string{"."}},
	{"probes, metrics, Kubernetes Events and the election wiring", []string{"health", "internal/election", "internal/kubeevents", "internal/metrics"}},
	{"the live view and the admission handler", []string{"internal/admission", "liveview"}},
	{"the admission server and its config", []string{"webhook"}},
	{"the root supervisor actor", []string{"internal/supervise"}},
	{"the child actor and the elector actor", []string{"internal/childactor", "internal/elector"}},
	{"the shard elector", []string{"lease/shard"}},
	{"the vocabulary of supervision: lifecycle messages, Status, Event, Phase, errors", []string{"supervisor"}},
	{"what a hosted component implements and calls", []string{"actors"}},
	{"leases: errors, the terms the guards read, the watchdog, the locks", []string{"lease"}},
	{"leaves: defaults, plain-text and JSON answers, the start context, a fake Lease API", []string{"internal/defaults", "internal/respond", "internal/startctx", "internal/testkit/pausewatch", "lease/leasetest"}},
}

// Diagram is the ASCII drawing of layers, top first, for the doc.
func Diagram(layers []Layer) string {
	var b strings.Builder
	b.WriteString("```\n")
	for i, l := range layers {
		if i > 0 {
			b.WriteString("   │\n   ▼\n")
		}
		fmt.Fprintf(&b, " %d. %s\n", i+1, l.Role)
		names := make([]string, len(l.Packages))
		for j, p := range l.Packages {
			names[j] = p
			if p == "." {
				names[j] = "controllermanager (the module's root)"
			}
		}
		fmt.Fprintf(&b, "    %s\n", strings.Join(names, "   "))
	}
	b.WriteString("```\n")
	return b.String()
}
