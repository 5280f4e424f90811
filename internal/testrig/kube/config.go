package kube

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig for a client certificate.
func writeKubeconfig(path, server, caFile, certFile, keyFile string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["airlock"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts["airlock"] = &clientcmdapi.Context{Cluster: "airlock", AuthInfo: "user"}
	cfg.CurrentContext = "airlock"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// writeJSON writes v as indented JSON (which YAML readers also take).
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// kubeletConfig is the kubelet's KubeletConfiguration.
type kubeletConfig struct {
	port, healthzPort                 int
	caFile, tlsCertFile, tlsKeyFile   string
	runtimeSocket, podLogs, pluginDir string
}

func (k kubeletConfig) object() map[string]any {
	endpoint := "unix://" + k.runtimeSocket
	return map[string]any{
		"apiVersion":         "kubelet.config.k8s.io/v1beta1",
		"kind":               "KubeletConfiguration",
		"address":            nodeIP,
		"port":               k.port,
		"readOnlyPort":       0,
		"healthzBindAddress": "127.0.0.1",
		"healthzPort":        k.healthzPort,
		"tlsCertFile":        k.tlsCertFile,
		"tlsPrivateKeyFile":  k.tlsKeyFile,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": k.caFile},
		},
		"authorization": map[string]any{"mode": "Webhook"},
		// No systemd here; the rig's cgroup keeps the Pods apart from the
		// host's.
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               "/" + cgroupName,
		"cgroupsPerQOS":            true,
		"failCgroupV1":             false, // Kubernetes ≥ 1.35 refuses cgroup v1 hosts by default
		"failSwapOn":               false,
		"memorySwap":               map[string]any{"swapBehavior": "NoSwap"},
		"containerRuntimeEndpoint": endpoint,
		"imageServiceEndpoint":     endpoint,
		// The kubelet leaves the host's iptables alone.
		"makeIPTablesUtilChains": false,
		"podLogsDir":             k.podLogs,
		"volumePluginDir":        k.pluginDir,
		"resolvConf":             "/etc/resolv.conf",
		// The machine is shared and its disk may be nearly full: evict
		// only below what the tests' Pods need (a few MB of logs and
		// files each; the image is imported before they start), in
		// absolute terms: a percentage grows with the disk (1% of this
		// machine's 252 GB is 2.5 GB, a default 10% is 25 GB), so that a
		// nearly full large disk evicted Pods the tests were waiting on.
		// Never collect the rig's images.
		"evictionHard":                evictionHard,
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"protectKernelDefaults":       false,
		"registerNode":                true,
		"shutdownGracePeriod":         "0s",
		"containerLogMaxSize":         "1Mi",
		"containerLogMaxFiles":        2,
	}
}

// cniConfig is the Pods' network: a bridge with no gateway and no
// masquerading, so Pods reach each other and nothing else.
func cniConfig(ipamDir string) map[string]any {
	return map[string]any{
		"cniVersion": "1.0.0",
		"name":       podLink,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      podLink,
				"isGateway":   false,
				"ipMasq":      false,
				"hairpinMode": false,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  []any{[]any{map[string]any{"subnet": podSubnet}}},
					"dataDir": ipamDir,
				},
			},
		},
	}
}

// containerdConfig is containerd's configuration.
type containerdConfig struct {
	root, state, socket, shimSocketDir, optDir string
	shimRunc, runc, runcRoot                   string
	shimRunsc, runscConfig                     string
	cniBin, cniConf                            string
	pauseImage                                 string
	restrictOOMScoreAdj                        bool
}

// toml renders it in containerd's configuration format, version 4 (what
// containerd 2.4 writes). Every
// path is the rig's own, and every plugin that would touch a host path it
// does not need (NRI, the opt directory, imports from /etc) is off.
func (c containerdConfig) toml() string {
	q := strconv.Quote
	var b strings.Builder
	fmt.Fprintf(&b, `version = 4
root = %s
state = %s
imports = []
disabled_plugins = ["io.containerd.nri.v1.nri"]

[plugins."io.containerd.server.v1.grpc"]
  address = %s

[plugins."io.containerd.server.v1.ttrpc"]
  address = %s

[plugins."io.containerd.server.v1.debug"]
  address = ""

[plugins."io.containerd.server.v1.metrics"]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %s

[plugins."io.containerd.shim.v1.manager"]
  socket_dir = %s

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %s

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  restrict_oom_score_adj = %t

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  runtime_path = %s

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = %s
  Root = %s
  SystemdCgroup = false

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%s]
  runtime_type = "io.containerd.runsc.v1"
  runtime_path = %s

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%s.options]
  TypeUrl = "io.containerd.runsc.v1.options"
  ConfigPath = %s

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = [%s]
  conf_dir = %s
  max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`,
		q(c.root), q(c.state), q(c.socket), q(c.socket+".ttrpc"), q(c.optDir), q(c.shimSocketDir),
		q(c.pauseImage), c.restrictOOMScoreAdj,
		q(c.shimRunc), q(c.runc), q(c.runcRoot),
		RuntimeHandlerRunsc, q(c.shimRunsc), RuntimeHandlerRunsc, q(c.runscConfig),
		q(c.cniBin), q(c.cniConf))
	return b.String()
}

// runscConfig is the gVisor shim's configuration (ConfigPath above):
// with gVisor's own cgroup v2 file system inside each sandbox
// (in-sandbox-cgroup), where airlock's agent gives every command a group
// of its own, as the gVisor and Docker drivers have it.
type runscConfig struct {
	runsc, root, logDir, platform string
}

func (r runscConfig) toml() string {
	q := strconv.Quote
	return fmt.Sprintf(`binary_name = %s
root = %s
log_path = %s
log_level = "info"

[runsc_config]
  platform = %s
  in-sandbox-cgroup = "v2"
  debug-log = %s
`, q(r.runsc), q(r.root), q(r.logDir+"/shim-%ID%.log"), q(r.platform), q(r.logDir+"/runsc-%ID%-%COMMAND%.log"))
}

// evictionHard are the kubelet's eviction thresholds.
var evictionHard = map[string]string{
	"memory.available":   "100Mi",
	"nodefs.available":   "100Mi",
	"nodefs.inodesFree":  "1000",
	"imagefs.available":  "100Mi",
	"imagefs.inodesFree": "1000",
}
