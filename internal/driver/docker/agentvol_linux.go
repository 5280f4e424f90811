package docker

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
)

// The agent's binary reaches containers in a named volume per agent
// version, "airlock-agent-<sha256 prefix>", mounted read-only in every
// sandbox. The driver fills it through the engine's API (an archive copied
// into a container that mounts it and never starts), so it works for an
// engine on another host, and no image is changed. An empty second volume,
// "…-ready", is made once the copy is whole: a fill cut short is done
// again by the next airlock.

// labelFill marks the short-lived container that fills the agent's volume.
const labelFill = "airlock.agent-fill"

// agentVolume returns the volume that holds this airlock's agent, filling
// it first when the engine does not have it yet. image is any image the
// engine has (the filling container never runs).
func (d *Driver) agentVolume(ctx context.Context, image string) (string, error) {
	d.mu.Lock()
	v := d.agentVol
	d.mu.Unlock()
	if v != "" {
		return v, nil
	}
	path, sum, err := agentSum()
	if err != nil {
		return "", err
	}
	cli, err := d.client()
	if err != nil {
		return "", err
	}
	name := agentVolumeName(sum)
	ready := name + "-ready"
	_, err = cli.VolumeInspect(ctx, ready, client.VolumeInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(err):
		if err := d.fillAgentVolume(ctx, cli, image, name, path, sum); err != nil {
			return "", err
		}
		if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: ready, Labels: map[string]string{LabelAgent: sum}}); err != nil {
			return "", fmt.Errorf("mark the agent's volume filled: %w", err)
		}
	case err != nil:
		return "", fmt.Errorf("look for the agent's volume: %w", err)
	}
	d.mu.Lock()
	d.agentVol = name
	d.mu.Unlock()
	return name, nil
}

// fillAgentVolume copies the agent at path into the volume name.
func (d *Driver) fillAgentVolume(ctx context.Context, cli *client.Client, image, name, path, sum string) (err error) {
	d.rc.Logger.Info("filling the agent's volume", "volume", name)
	if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Labels: map[string]string{LabelAgent: sum}}); err != nil {
		return fmt.Errorf("make the agent's volume: %w", err)
	}
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image: image, Entrypoint: []string{contained.AgentName}, Cmd: []string{},
			Labels: map[string]string{labelFill: sum, LabelDaemon: d.opts.Instance},
		},
		HostConfig: &container.HostConfig{
			NetworkMode: "none",
			Mounts:      []mount.Mount{{Type: mount.TypeVolume, Source: name, Target: contained.AgentDir, VolumeOptions: &mount.VolumeOptions{NoCopy: true}}},
		},
	})
	if err != nil {
		return fmt.Errorf("make the container that fills the agent's volume: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, rerr := cli.ContainerRemove(rctx, c.ID, client.ContainerRemoveOptions{Force: true}); rerr != nil && !cerrdefs.IsNotFound(rerr) {
			d.rc.Logger.Warn("remove the container that filled the agent's volume", "container", c.ID, "err", rerr)
		}
	}()
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read the agent: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("read the agent: %w", err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeAgentTar(pw, f, fi.Size())) }()
	_, err = cli.CopyToContainer(ctx, c.ID, client.CopyToContainerOptions{DestinationPath: contained.AgentDir, Content: pr})
	pr.Close()
	if err != nil {
		return fmt.Errorf("copy the agent into its volume: %w", err)
	}
	return nil
}

// writeAgentTar writes the archive of the agent's volume: a directory only
// root may enter, and the binary in it.
func writeAgentTar(w io.Writer, bin io.Reader, size int64) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	dir := agentTarEntry[:len(agentTarEntry)-len(contained.AgentName)]
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o700, ModTime: now}); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: agentTarEntry, Mode: 0o500, Size: size, ModTime: now}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, bin, size); err != nil {
		return err
	}
	return tw.Close()
}
