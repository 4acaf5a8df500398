// Command bench compares controllermanager with the ways Go programs already run
// many long-lived children: the seed's errgroup and WaitGroup (no supervision, the floor),
// controller-runtime's manager, suture v4 and plain protoactor-go.
//
// Every system hosts the same N trivial children (see child) and goes through the same
// cycle, timed by the harness: start until every child runs, a health sweep of every
// child, restarts after a failure (where the system supervises), shutdown. The harness
// also reads heap bytes and goroutines per idle child. Systems are interleaved and each
// measurement repeated, so that noise from a shared machine hits them all alike; the
// median is reported (restart latencies: median and p99 of all samples).
//
// The output is one Markdown table: a row per (workload, N), a column per system and,
// when ours is among the systems run, ours as a ratio to each peer. Lower is better
// everywhere.
//
// Run it from the repository root with
//
//	go -C bench run . [-n 100,1000,10000] [-reps 5] [-large] [-quick] [-json FILE]
//	    [-tree 100x100,10x10x100] [-systems suture,suture-100x100,ours,ours-100x100]
//
// -tree adds, per shape, suture's nested supervisors and ours' groups
// (controllermanager.NewGroup) of that shape, run at the N it holds beside the flat
// systems, with ratio columns to flat ours and to suture's tree of the same shape.
//
// or make bench. This directory is its own module so that the peers never reach the
// library's go.mod; that is also why "go run ./bench" cannot work from the root (see
// README.md).
package main
