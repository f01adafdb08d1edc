// tessera-test-dra-plugin: a minimal DRA kubelet plugin for the node harness's tests.
//
// It publishes one ResourceSlice for its node with -devices devices (dev-0, dev-1, ...),
// registers with the kubelet through the plugin registry (k8s.io/dynamic-resource-allocation's
// kubeletplugin helper), and writes a CDI spec that gives each device one environment variable,
// TESSERA_TEST_DRA_DEV_<i>=dev-<i>. NodePrepareResources answers with the CDI ids of the devices
// the scheduler allocated to a claim, so a container that uses the claim gets those variables:
// that proves the path from a ResourceClaim through the kubelet and containerd's CDI support
// into the container. On SIGTERM it removes its CDI spec and stops.
//
// It runs inside a test node's mount namespace (cluster.sh node-spawn), where the node's own
// directories are mounted over /var/lib/kubelet and /var/run/cdi, so the defaults are right.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

type driver struct {
	name    string
	cdiKind string // vendor/class of the CDI devices
}

func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	result := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		var prepared kubeletplugin.PrepareResult
		if claim.Status.Allocation != nil {
			for _, r := range claim.Status.Allocation.Devices.Results {
				if r.Driver != d.name {
					continue
				}
				prepared.Devices = append(prepared.Devices, kubeletplugin.Device{
					Requests:     []string{r.Request},
					PoolName:     r.Pool,
					DeviceName:   r.Device,
					CDIDeviceIDs: []string{d.cdiKind + "=" + r.Device},
				})
			}
		}
		log.Printf("prepare claim %s/%s: %d devices", claim.Namespace, claim.Name, len(prepared.Devices))
		result[claim.UID] = prepared
	}
	return result, nil
}

func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	result := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		log.Printf("unprepare claim %s", c.String())
		result[c.UID] = nil
	}
	return result, nil
}

func (d *driver) HandleError(_ context.Context, err error, msg string) {
	log.Printf("%s: %v", msg, err)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		os.Exit(1)
	}
}

func (d *driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// writeCDISpec writes one CDI spec with a device per name; each sets its own variable.
func writeCDISpec(dir, kind string, names []string) (string, error) {
	type edits struct {
		Env []string `json:"env"`
	}
	type device struct {
		Name           string `json:"name"`
		ContainerEdits edits  `json:"containerEdits"`
	}
	spec := struct {
		CDIVersion string   `json:"cdiVersion"`
		Kind       string   `json:"kind"`
		Devices    []device `json:"devices"`
	}{CDIVersion: "0.6.0", Kind: kind}
	for i, n := range names {
		spec.Devices = append(spec.Devices, device{Name: n, ContainerEdits: edits{
			Env: []string{fmt.Sprintf("TESSERA_TEST_DRA_DEV_%d=%s", i, n)},
		}})
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, strings.ReplaceAll(kind, "/", "_")+".json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

func main() {
	name := flag.String("driver", "dra.example.tessera.dev", "DRA driver name")
	nodeName := flag.String("node-name", os.Getenv("NODE_NAME"), "the node this plugin runs on (default $NODE_NAME)")
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig for publishing ResourceSlices (default $KUBECONFIG)")
	count := flag.Int("devices", 2, "number of devices to publish")
	kubeletDir := flag.String("kubelet-dir", "/var/lib/kubelet", "the kubelet's root directory")
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "directory for the CDI spec (one of containerd's cdi_spec_dirs)")
	cdiKind := flag.String("cdi-kind", "dra.example.tessera.dev/thing", "vendor/class of the CDI devices")
	flag.Parse()
	if flag.NArg() != 0 || *nodeName == "" || *kubeconfig == "" || *count < 1 {
		log.Fatalf("need -node-name (or NODE_NAME), -kubeconfig (or KUBECONFIG), -devices >= 1, no arguments")
	}

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("kubeconfig %s: %v", *kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		log.Fatalf("client: %v", err)
	}
	var names []string
	var devices []resourceapi.Device
	for i := 0; i < *count; i++ {
		n := fmt.Sprintf("dev-%d", i)
		names = append(names, n)
		devices = append(devices, resourceapi.Device{
			Name: n,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index": {IntValue: ptr.To(int64(i))},
			},
		})
	}
	spec, err := writeCDISpec(*cdiDir, *cdiKind, names)
	if err != nil {
		log.Fatalf("CDI spec: %v", err)
	}
	defer os.Remove(spec)

	dataDir := filepath.Join(*kubeletDir, "plugins", *name)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		log.Fatalf("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	d := &driver{name: *name, cdiKind: *cdiKind}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.KubeClient(client),
		kubeletplugin.DriverName(*name),
		kubeletplugin.NodeName(*nodeName),
		kubeletplugin.RegistrarDirectoryPath(filepath.Join(*kubeletDir, "plugins_registry")),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		log.Fatalf("start the kubelet plugin: %v", err)
	}
	defer helper.Stop()
	err = helper.PublishResources(ctx, resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{
			*nodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
		},
	})
	if err != nil {
		log.Fatalf("publish: %v", err)
	}
	log.Printf("driver %s on node %s: %d devices published, CDI spec %s", *name, *nodeName, *count, spec)
	<-ctx.Done()
	log.Printf("stopped")
}
