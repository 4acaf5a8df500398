package shard

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/lease/leasetest"
)

// BenchmarkHandover measures, on the real clock, the time from the moment a
// holder is asked to leave (its Run context ends) to the moment the other
// replica has acquired the shard: the release travels by the watch, not by
// a retry period (500ms here).
func BenchmarkHandover(b *testing.B) {
	var total time.Duration
	for range b.N {
		b.StopTimer()
		server := leasetest.NewServer()
		acquired := map[string]chan int{"a": make(chan int, 4), "b": make(chan int, 4)}
		run := func(id string) (*Elector, context.CancelFunc, chan struct{}) {
			e, err := New(Config{Client: server.Client(id), Namespace: testNamespace, Name: testGroup, Identity: id, Shards: 1,
				LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
				Callbacks: Callbacks{Acquired: func(i int) { acquired[id] <- i }}})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); e.Run(ctx) }()
			return e, cancel, done
		}
		_, stopA, doneA := run("a")
		<-acquired["a"]
		eb, stopB, doneB := run("b")
		// Once b's watch shows a holding the shard, b waits for it.
		for eb.Status()[0].Holder != "a" {
			runtime.Gosched()
		}
		b.StartTimer()
		start := time.Now()
		stopA()
		<-acquired["b"]
		total += time.Since(start)
		b.StopTimer()
		<-doneA
		stopB()
		<-doneB
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "handover-ms")
}
