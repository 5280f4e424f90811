//go:build !no_kubernetes

package cli

// What the table says of the kubernetes driver, in every build that can
// run it (the front hands it off: drivers_kubernetes.go makes it).
func init() {
	aboutDriver(driverAbout{name: "kubernetes", help: "a Pod of a cluster: --kubeconfig, $KUBECONFIG or the in-cluster config",
		flags: map[string]string{
			"image":      "one the nodes can pull",
			"runtime":    `the Pod's RuntimeClass, "gvisor" (default) or "runc" for the node's default runtime`,
			"kubeconfig": "default $KUBECONFIG, else the in-cluster config, else ~/.kube/config",
		}})
}
