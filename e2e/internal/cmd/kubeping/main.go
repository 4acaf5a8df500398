// Command kubeping is the e2e suite's smallest helper program: it proves that a separate
// OS process reaches the test's kube-apiserver with the kubeconfig the harness wrote.
//
// It asks the server for its version and prints "server <version>" on stdout, then exits
// 0, or with --hold waits for SIGTERM or SIGINT first and then exits 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "path of the kubeconfig file; default $KUBECONFIG")
	hold := flag.Bool("hold", false, "after printing, wait for SIGTERM or SIGINT, then exit 0")
	flag.Parse()
	if err := run(*kubeconfig, *hold); err != nil {
		fmt.Fprintln(os.Stderr, "kubeping:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, hold bool) error {
	// Registered before the request so that a stop sent as soon as the line is printed
	// is not lost.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("failed to load kubeconfig %q: %w", kubeconfig, err)
	}
	config.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	version, err := client.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("failed to get the server version: %w", err)
	}
	fmt.Printf("server %s\n", version.GitVersion)
	if hold {
		<-ctx.Done()
	}
	return nil
}
