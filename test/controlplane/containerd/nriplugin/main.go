// tessera-test-nri-plugin: a minimal NRI plugin for the node harness's tests.
//
// It connects to a node's containerd through the NRI socket, and for every container being
// created it reads one annotation of the container's pod sandbox (default tessera.dev/assignment)
// and, when the pod has it, adds its value to the container's environment (default
// TESSERA_TEST_NRI_ASSIGNMENT). That is the path a node agent can use to deliver a pod's GPUs:
// containerd 2.x calls NRI plugins on CreateContainer with the pod sandbox, whose annotations
// are the pod's. When containerd restarts, the plugin connects again.
//
// It runs inside a test node's mount namespace (cluster.sh node-spawn), where the node's own
// folder is mounted over /var/run/nri, so the default -socket is right.
package main

import (
	"context"
	"flag"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type plugin struct {
	annotation string
	env        string
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	value, ok := pod.GetAnnotations()[p.annotation]
	log.Printf("CreateContainer %s/%s/%s: %s=%q (present: %v)", pod.GetNamespace(), pod.GetName(),
		ctr.GetName(), p.annotation, value, ok)
	if !ok {
		return nil, nil, nil
	}
	adjust := &api.ContainerAdjustment{}
	adjust.AddEnv(p.env, value)
	return adjust, nil, nil
}

func main() {
	socket := flag.String("socket", "/var/run/nri/nri.sock", "containerd's NRI socket")
	name := flag.String("name", "tessera-test", "plugin name")
	idx := flag.String("idx", "50", "plugin index (orders plugins; two digits)")
	annotation := flag.String("annotation", "tessera.dev/assignment", "pod annotation to read")
	env := flag.String("env", "TESSERA_TEST_NRI_ASSIGNMENT", "environment variable to set from it")
	flag.Parse()
	if flag.NArg() != 0 {
		log.Fatalf("unexpected arguments %v (see -help)", flag.Args())
	}
	p := &plugin{annotation: *annotation, env: *env}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	for ctx.Err() == nil {
		s, err := stub.New(p, stub.WithPluginName(*name), stub.WithPluginIdx(*idx),
			stub.WithSocketPath(*socket))
		if err != nil {
			log.Fatalf("NRI stub: %v", err)
		}
		log.Printf("connecting to %s", *socket)
		// Run returns when containerd closes the connection (a restart) or ctx ends.
		if err := s.Run(ctx); err != nil && ctx.Err() == nil {
			log.Printf("NRI connection: %v; connecting again in 1s", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	log.Printf("stopped")
}
