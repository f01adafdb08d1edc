// The runtime side of NRI, from containerd's own NRI module (pkg/adaptation, what containerd and
// CRI-O embed), for the agent's interop test: it listens on an NRI socket, waits for one plugin
// to connect, register and synchronize, then relays CreateContainer and RemovePodSandbox calls
// and prints what came back, one JSON object per line.
//
//	nri-runtime CASES.json
//
// CASES.json: {"socket": PATH, "existing": [POD...], "cases": [{"name", "pod": POD, "container":
// {"id", "name", "env": [...]}}], "remove": [POD...]}, POD = {"id", "name", "uid", "namespace",
// "annotations": {...}}. Output lines: {"case", "error", "env", "devices", "mounts", "cdi"}, then
// {"removed": N}.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

type podJSON struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	UID         string            `json:"uid"`
	Namespace   string            `json:"namespace"`
	Annotations map[string]string `json:"annotations"`
}

type caseJSON struct {
	Name      string  `json:"name"`
	Pod       podJSON `json:"pod"`
	Container struct {
		ID   string   `json:"id"`
		Name string   `json:"name"`
		Env  []string `json:"env"`
	} `json:"container"`
}

type input struct {
	Socket   string     `json:"socket"`
	Existing []podJSON  `json:"existing"`
	Cases    []caseJSON `json:"cases"`
	Remove   []podJSON  `json:"remove"`
}

func (p podJSON) api() *api.PodSandbox {
	return &api.PodSandbox{Id: p.ID, Name: p.Name, Uid: p.UID, Namespace: p.Namespace,
		Annotations: p.Annotations}
}

// Metrics tells when a plugin is in (connected, registered, configured and synchronized).
type metrics struct{ plugins chan int }

func (m *metrics) RecordPluginInvocation(string, string, error)                               {}
func (m *metrics) RecordPluginLatency(string, string, time.Duration)                          {}
func (m *metrics) RecordPluginAdjustments(string, string, *nri.ContainerAdjustment, int, int) {}
func (m *metrics) UpdatePluginCount(count int)                                                { m.plugins <- count }

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "nri-runtime: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: nri-runtime CASES.json")
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		fail("%s: %v", os.Args[1], err)
	}
	empty, err := os.MkdirTemp("", "nri-runtime")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(empty)

	existing := []*api.PodSandbox{}
	for _, p := range in.Existing {
		existing = append(existing, p.api())
	}
	m := &metrics{plugins: make(chan int, 16)}
	removed := 0
	r, err := nri.New("containerd", "v2.4.2",
		func(ctx context.Context, cb nri.SyncCB) error {
			_, err := cb(ctx, existing, nil)
			return err
		},
		func(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) { return nil, nil },
		nri.WithSocketPath(in.Socket),
		nri.WithPluginPath(filepath.Join(empty, "plugins")),
		nri.WithPluginConfigPath(filepath.Join(empty, "conf.d")),
		nri.WithMetrics(m))
	if err != nil {
		fail("%v", err)
	}
	if err := r.Start(); err != nil {
		fail("start: %v", err)
	}
	defer r.Stop()

	deadline := time.After(60 * time.Second)
	for connected := false; !connected; {
		select {
		case n := <-m.plugins:
			connected = n > 0
		case <-deadline:
			fail("no plugin connected to %s within 60 s", in.Socket)
		}
	}

	out := json.NewEncoder(os.Stdout)
	for _, c := range in.Cases {
		rpl, err := r.CreateContainer(context.Background(), &api.CreateContainerRequest{
			Pod: c.Pod.api(),
			Container: &api.Container{Id: c.Container.ID, PodSandboxId: c.Pod.ID, Name: c.Container.Name,
				State: api.ContainerState_CONTAINER_CREATED, Env: c.Container.Env},
		})
		line := map[string]interface{}{"case": c.Name}
		if err != nil {
			line["error"] = err.Error()
		} else if a := rpl.GetAdjust(); a != nil {
			env := [][]string{}
			for _, kv := range a.Env {
				env = append(env, []string{kv.Key, kv.Value})
			}
			devices := []map[string]interface{}{}
			for _, d := range a.GetLinux().GetDevices() {
				dev := map[string]interface{}{"path": d.Path, "type": d.Type, "major": d.Major, "minor": d.Minor}
				if d.FileMode != nil {
					dev["file_mode"] = d.FileMode.Value
				}
				devices = append(devices, dev)
			}
			mounts := []map[string]interface{}{}
			for _, mt := range a.Mounts {
				mounts = append(mounts, map[string]interface{}{"destination": mt.Destination,
					"source": mt.Source, "type": mt.Type, "options": mt.Options})
			}
			cdi := []string{}
			for _, d := range a.CDIDevices {
				cdi = append(cdi, d.Name)
			}
			sort.Slice(env, func(i, j int) bool { return env[i][0] < env[j][0] })
			line["env"], line["devices"], line["mounts"], line["cdi"] = env, devices, mounts, cdi
		}
		if err := out.Encode(line); err != nil {
			fail("%v", err)
		}
	}
	for _, p := range in.Remove {
		if err := r.RemovePodSandbox(context.Background(), &api.RemovePodSandboxRequest{Pod: p.api()}); err != nil {
			fail("RemovePodSandbox: %v", err)
		}
		removed++
	}
	if err := out.Encode(map[string]int{"removed": removed}); err != nil {
		fail("%v", err)
	}
}
