// tessera-test-device-plugin: a small Kubernetes device plugin for the node harness's tests.
//
// It advertises a fixed list of devices under one extended resource name through the real
// kubelet device-plugin API (v1beta1): it serves the DevicePlugin gRPC service on a socket in
// the kubelet's device-plugin directory and registers it on the kubelet's kubelet.sock. A
// container that is allocated devices gets their ids in an environment variable, and, with
// -cdi-kind, one CDI device per id. When the kubelet restarts it wipes the directory; the
// plugin notices its socket is gone and registers again, as real plugins do.
//
// It runs inside a test node's mount namespace (cluster.sh node-spawn), where the node's own
// directory is mounted over /var/lib/kubelet, so the default -plugin-dir is right.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	ids     []string
	env     string
	cdiKind string
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list once and keeps the stream open until the kubelet closes it.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	devices := make([]*pluginapi.Device, 0, len(p.ids))
	for _, id := range p.ids {
		devices = append(devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		cr := &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{p.env: strings.Join(c.DevicesIds, ",")},
		}
		if p.cdiKind != "" {
			for _, id := range c.DevicesIds {
				cr.CdiDevices = append(cr.CdiDevices, &pluginapi.CDIDevice{Name: p.cdiKind + "=" + id})
			}
		}
		log.Printf("Allocate %v -> %v %v", c.DevicesIds, cr.Envs, cr.CdiDevices)
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serveAndRegister serves the plugin on socket and registers it with the kubelet. It returns
// when ctx ends or the socket file disappears (the kubelet restarted and wiped its directory).
func serveAndRegister(ctx context.Context, p *plugin, dir, socket, resource string) error {
	_ = os.Remove(socket)
	lis, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	go func() { _ = server.Serve(lis) }()
	defer server.Stop()

	kubelet := filepath.Join(dir, "kubelet.sock")
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", kubelet, err)
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(socket),
		ResourceName: resource,
	})
	if err != nil {
		return fmt.Errorf("register %s on %s: %w", resource, kubelet, err)
	}
	log.Printf("registered %s (%d devices) on %s", resource, len(p.ids), kubelet)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
		if _, err := os.Stat(socket); err != nil {
			log.Printf("%s is gone (kubelet restarted?); registering again", socket)
			return nil
		}
	}
}

func main() {
	resource := flag.String("resource", "example.tessera.dev/thing", "extended resource name to advertise")
	ids := flag.String("devices", "thing-0,thing-1", "comma-separated device ids")
	dir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory (holds kubelet.sock)")
	env := flag.String("env", "TESSERA_TEST_THING_IDS", "environment variable that receives the allocated ids")
	cdiKind := flag.String("cdi-kind", "", "if set (vendor/class), also return the CDI device <kind>=<id> for each id")
	flag.Parse()
	if flag.NArg() != 0 {
		log.Fatalf("unexpected arguments %v (see -help)", flag.Args())
	}
	p := &plugin{ids: strings.Split(*ids, ","), env: *env, cdiKind: *cdiKind}
	socket := filepath.Join(*dir, "tessera-test-"+strings.NewReplacer("/", "-", ".", "-").Replace(*resource)+".sock")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	for ctx.Err() == nil {
		if err := serveAndRegister(ctx, p, *dir, socket, *resource); err != nil {
			log.Printf("%v; retrying in 1s", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	_ = os.Remove(socket)
	log.Printf("stopped")
}
