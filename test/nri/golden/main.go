// Prints NRI messages as containerd's own NRI module (github.com/containerd/nri) encodes them, so
// that the agent's hand-written protobuf code (src/agent/nri) is checked against the real
// encoder byte for byte. One "name hex" line per message; src/agent/nri/testdata/golden.txt is
// its output:
//
//	cd test/nri/golden && go run . > ../../../src/agent/nri/testdata/golden.txt
//
// Maps hold at most one entry (Go's map order is random).
package main

import (
	"encoding/hex"
	"fmt"
	"os"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/proto"
)

func emit(name string, m proto.Message) {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s %s\n", name, hex.EncodeToString(b))
}

func main() {
	emit("RegisterPluginRequest", &api.RegisterPluginRequest{PluginName: "tessera", PluginIdx: "50", NRIVersion: "v0.12.3"})
	emit("ConfigureRequest", &api.ConfigureRequest{Config: "", RuntimeName: "containerd", RuntimeVersion: "v2.4.2",
		RegistrationTimeout: 5000, RequestTimeout: 2000, NRIVersion: "v0.12.3"})
	events := api.EventMask(0)
	events.Set(api.Event_CREATE_CONTAINER, api.Event_REMOVE_POD_SANDBOX)
	emit("ConfigureResponse", &api.ConfigureResponse{Events: int32(events)})
	emit("SynchronizeResponse.more", &api.SynchronizeResponse{More: true})
	emit("SynchronizeResponse", &api.SynchronizeResponse{})
	pod := &api.PodSandbox{
		Id: "8f2a", Name: "share-0", Uid: "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a3d", Namespace: "team-a",
		Labels:      map[string]string{"app": "infer"},
		Annotations: map[string]string{"tessera.dev/assignment": `{"version":1,"node":"n1","gpus":[{"index":3,"uuid":"GPU-6f1c2a9e-0000-4000-8000-000000000003","memory_mib":4096,"compute_milli":0,"exclusive":false}]}`},
	}
	ctr := &api.Container{Id: "c0ffee", PodSandboxId: "8f2a", Name: "main", State: api.ContainerState_CONTAINER_CREATED,
		Env: []string{"PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all"}}
	emit("CreateContainerRequest", &api.CreateContainerRequest{Pod: pod, Container: ctr})
	emit("SynchronizeRequest", &api.SynchronizeRequest{Pods: []*api.PodSandbox{pod}, Containers: []*api.Container{ctr}, More: true})
	emit("RemovePodSandboxRequest", &api.RemovePodSandboxRequest{Pod: pod})
	emit("StateChangeEvent", &api.StateChangeEvent{Event: api.Event_REMOVE_POD_SANDBOX, Pod: pod})
	adjust := &api.ContainerAdjustment{}
	adjust.AddEnv("NVIDIA_VISIBLE_DEVICES", "GPU-6f1c2a9e-0000-4000-8000-000000000003")
	adjust.AddEnv("TESSERA_GPU_MEMORY_LIMIT_MIB", "4096")
	adjust.AddDevice(&api.LinuxDevice{Path: "/dev/nvidia3", Type: "c", Major: 195, Minor: 3, FileMode: api.FileMode(os.FileMode(0o666))})
	adjust.AddDevice(&api.LinuxDevice{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255, FileMode: api.FileMode(os.FileMode(0o666))})
	adjust.AddMount(&api.Mount{Destination: "/run/tessera/assignment.json", Type: "bind",
		Source: "/run/tessera/pods/0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a3d/assignment.json", Options: []string{"bind", "ro", "nosuid", "nodev"}})
	emit("ContainerAdjustment", adjust)
	emit("CreateContainerResponse", &api.CreateContainerResponse{Adjust: adjust})
	cdi := &api.ContainerAdjustment{}
	cdi.AddCDIDevice(&api.CDIDevice{Name: "nvidia.com/gpu=GPU-6f1c2a9e-0000-4000-8000-000000000003"})
	cdi.AddEnv("NVIDIA_VISIBLE_DEVICES", "GPU-6f1c2a9e-0000-4000-8000-000000000003")
	emit("ContainerAdjustment.cdi", cdi)
	emit("CreateContainerResponse.empty", &api.CreateContainerResponse{})
	emit("Empty", &api.Empty{})
	emit("ttrpc.Request", &ttrpc.Request{Service: "nri.pkg.api.v1alpha1.Plugin", Method: "CreateContainer",
		Payload: []byte{1, 2, 3}, TimeoutNano: 2000000000, Metadata: []*ttrpc.KeyValue{{Key: "k", Value: "v"}}})
}
