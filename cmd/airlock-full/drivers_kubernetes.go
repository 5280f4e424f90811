//go:build !no_kubernetes

package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/driver/kubernetes"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The kubernetes driver's settings beyond the kubeconfig, for a daemon
// whose config file has no place for them (as DOCKER_HOST is the docker
// driver's).
const (
	envKubeNamespace  = "AIRLOCK_KUBE_NAMESPACE"   // the sandboxes' namespace
	envKubeAgentImage = "AIRLOCK_KUBE_AGENT_IMAGE" // the agent's image, as the nodes pull it
	envKubeRuntime    = "AIRLOCK_KUBE_RUNTIME_CLASS"
	// Secrets (comma-separated) every Pod gets as imagePullSecrets.
	envKubePullSecrets = "AIRLOCK_KUBE_PULL_SECRETS" //nolint:gosec // G101: the name of a variable, not a credential
	// "docker": credentials for a Pod's image from the Docker config
	// file, kept in a Secret that the Pod gets as its imagePullSecret.
	envKubePullCredentials = "AIRLOCK_KUBE_PULL_CREDENTIALS" //nolint:gosec // G101: the name of a variable, not a credential
)

// kubePullOptions are the pull settings the environment gives.
func kubePullOptions() (secrets []string, kc authn.Keychain, err error) {
	for _, s := range strings.Split(os.Getenv(envKubePullSecrets), ",") {
		if s = strings.TrimSpace(s); s != "" {
			secrets = append(secrets, s)
		}
	}
	switch v := os.Getenv(envKubePullCredentials); v {
	case "":
	case "docker":
		kc = authn.DefaultKeychain
	default:
		return nil, nil, fmt.Errorf("$%s=%q: the one value is \"docker\" (the Docker config file's credentials)", envKubePullCredentials, v)
	}
	return secrets, kc, nil
}

func init() {
	cli.RegisterDriver("kubernetes", func(o cli.DriverOptions) (sandbox.Driver, error) {
		secrets, kc, err := kubePullOptions()
		if err != nil {
			return nil, err
		}
		// A daemon's sandboxes outlive it; a one-shot run's die with it.
		d, err := kubernetes.New(kubernetes.Options{
			PullSecrets: secrets, PullCredentials: kc,
			Kubeconfig: o.Kubeconfig, Logger: o.Logger, Egress: o.Egress,
			Instance: o.Instance, Persistent: o.Instance != "",
			Namespace:    os.Getenv(envKubeNamespace),
			AgentImage:   os.Getenv(envKubeAgentImage),
			RuntimeClass: os.Getenv(envKubeRuntime),
		})
		if err != nil {
			return nil, err // not a typed nil in an interface
		}
		return d, nil
	})
	cli.RegisterCommand(newKubernetesCmd)
}

func newKubernetesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kubernetes",
		Short: "Prepare what the kubernetes driver needs on a cluster",
	}
	var out string
	image := &cobra.Command{
		Use:   "agent-image [-o FILE]",
		Short: "Write the agent's image (one file) as a root file system tarball, and print its name",
		Long: `Write the file system of the image that brings airlock's agent into every
sandbox Pod (an image volume): one directory, agent/, with the static agent
binary of this airlock. Make it an image under the name this prints, where
the nodes can pull it, for example:

  airlock kubernetes agent-image -o agent.tar
  docker import agent.tar REGISTRY/airlock-agent:VERSION && docker push REGISTRY/airlock-agent:VERSION

and give that name to the daemon ($` + envKubeAgentImage + `). The name printed is
the default (airlock.invalid/airlock-agent:<agent checksum>), for nodes that
import the image themselves.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := agentbin.Path()
			if err != nil {
				return err
			}
			sum, err := agentbin.Sum()
			if err != nil {
				return err
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			layer, err := kubernetes.AgentImageLayer(f, fi.Size())
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if out != "" && out != "-" {
				if err := os.WriteFile(out, layer, 0o644); err != nil {
					return err
				}
			} else if _, err := w.Write(layer); err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), kubernetes.AgentImageRef(sum))
			return nil
		},
	}
	image.Flags().StringVarP(&out, "output", "o", "", "write the tarball to FILE (default: standard output)")
	cmd.AddCommand(image)
	return cmd
}
