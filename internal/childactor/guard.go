package childactor

// Guards gives the children that run under a lease (controllers and stores)
// the check their lease guard delegates to: called once per incarnation, as
// it starts, with the child's spec, so that each child can be given the
// lease it runs under (today the one lease; with shards, its shard's). A nil
// Guards (election off) gives a guard that passes until the incarnation's
// Shutdown has returned.
type Guards func(spec Spec) (check func() error)
