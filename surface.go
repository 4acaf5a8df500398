package controllermanager

// The methods of *BaseManager are declared again on the two managers users
// hold, in surface_gen.go, so that `go doc ControllerManager.Done` and the
// type's method list in the godoc show them: a method promoted from an
// embedded field is not listed under the outer type. Each is one call;
// BaseManager's doc is the full contract. surface_gen.go is generated from
// BaseManager's method set by internal/surfacegen; run go generate after
// adding, removing or changing a method of BaseManager (the generator's
// test fails until then).

//go:generate go run ./internal/surfacegen
