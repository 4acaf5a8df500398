// Command fleet runs a multicluster-runtime style reconciler (reconciler.go)
// on every member cluster of a controllermanager fleet: each member gets a
// controller-runtime cluster.Cluster, warm before its reconciler starts, and
// an outage of one member stops that member's informers and reconciler only.
//
//	go run ./examples/fleet -namespace default east=east.kubeconfig west=west.kubeconfig
//
// Each argument is name=kubeconfig-file. The manager runs with election
// off until SIGINT or SIGTERM; every 5 s it prints each member's state.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime/fleet"
)

func main() {
	namespace := flag.String("namespace", "default", "the namespace whose ConfigMaps are stamped")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *namespace, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, namespace string, args []string) error {
	if len(args) == 0 {
		return errors.New("no member cluster: give name=kubeconfig arguments")
	}
	members := map[string]*rest.Config{}
	for _, a := range args {
		name, path, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%q is not name=kubeconfig", a)
		}
		config, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return fmt.Errorf("member %s: %w", name, err)
		}
		members[name] = config
	}
	return serve(ctx, namespace, members, os.Stderr)
}

// serve runs the fleet of members until ctx ends.
func serve(ctx context.Context, namespace string, members map[string]*rest.Config, logTo io.Writer) error {
	mgr := fleet.NewManager(fleet.Options{})
	if err := (&StampReconciler{Manager: mgr, Namespace: namespace}).SetupWithManager(mgr); err != nil {
		return err
	}
	f := cm.NewFleet("members", cm.StaticClusters(members), mgr.Build, cm.FleetSpec{})
	cmgr, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "",
		cm.WithLogger(slog.New(slog.NewTextHandler(logTo, nil))))
	if err != nil {
		return err
	}
	cmgr.Add(f)
	if err := cmgr.Start(ctx, 0); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmgr.ShutdownAndWait(sctx)
	}()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			for _, st := range f.Clusters() {
				fmt.Printf("%s\t%v\t%v\n", st.Name, st.State, st.Err)
			}
		}
	}
}
