package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// LabelPullSecret marks the Secrets the driver makes from
// Options.PullCredentials.
const LabelPullSecret = "airlock.pull-secret"

// gatePullSecret is the scheduling gate that holds a Pod back until the
// Secret of its credentials names it as an owner.
const gatePullSecret = "airlock.sandbox/pull-secret"

// pullSecrets are the imagePullSecrets of a Pod of image: the Secrets
// Options.PullSecrets names, and, when Options.PullCredentials finds
// credentials for the image's registry, a Secret of the namespace that
// holds them (named by their hash, so that the same credentials are one
// Secret and changed ones another). That Secret is returned too, not yet
// made: makePod makes it, owned by the Pods that use it.
func (d *Driver) pullSecrets(image string) ([]corev1.LocalObjectReference, *corev1.Secret, error) {
	var out []corev1.LocalObjectReference
	for _, s := range d.opts.PullSecrets {
		out = append(out, corev1.LocalObjectReference{Name: s})
	}
	if d.opts.PullCredentials == nil || image == "" {
		return out, nil, nil
	}
	secret, err := dockerConfigSecret(d.opts.PullCredentials, image)
	if err != nil || secret == nil {
		return out, nil, err
	}
	secret.Namespace = d.opts.Namespace
	return append(out, corev1.LocalObjectReference{Name: secret.Name}), secret, nil
}

// makePod creates pod. When it pulls with secret (pullSecrets), the Pod
// is created held back from scheduling (a scheduling gate), the Secret
// is made or found and given the Pod as one more owner, and only then is
// the gate lifted: the node never pulls before the Secret is there, and
// Kubernetes' garbage collector deletes the Secret once the last Pod
// that owns it is gone (sandboxes of other daemons with the same
// credentials own it too). A Pod made but not released is deleted again.
func (d *Driver) makePod(ctx context.Context, k *kclient, pod *corev1.Pod, secret *corev1.Secret) (*corev1.Pod, error) {
	if secret == nil {
		return k.createPod(ctx, pod)
	}
	pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: gatePullSecret})
	got, err := k.createPod(ctx, pod)
	if err != nil {
		return got, err
	}
	err = d.ownSecret(ctx, k, secret, got)
	if err == nil {
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"schedulingGates": nil}})
		var released *corev1.Pod
		if released, err = k.patchPod(ctx, d.opts.Namespace, got.Name, patch); err == nil {
			return released, nil
		}
		err = fmt.Errorf("let Pod %s be scheduled: %w", got.Name, err)
	}
	if derr := d.deletePod(ctx, got.Name, got.UID); derr != nil {
		d.rc.Logger.Warn("delete a Pod whose pull Secret could not be made", "pod", got.Name, "err", derr)
	}
	return nil, err
}

// ownSecret makes secret, or finds it made, with pod among its owners.
func (d *Driver) ownSecret(ctx context.Context, k *kclient, secret *corev1.Secret, pod *corev1.Pod) error {
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}
	// A strategic merge patch adds to ownerReferences (merged by uid).
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{owner}}})
	var err error
	for range 3 {
		err = k.core.Patch(types.StrategicMergePatchType).Namespace(d.opts.Namespace).Resource("secrets").Name(secret.Name).Body(patch).Do(ctx).Error()
		if !isNotFound(err) {
			break
		}
		// Not there (never made, or its last owner went): make it.
		s := secret.DeepCopy()
		s.OwnerReferences = []metav1.OwnerReference{owner}
		err = k.core.Post().Namespace(d.opts.Namespace).Resource("secrets").Body(s).Do(ctx).Error()
		if !apierrors.IsAlreadyExists(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("keep the credentials for %s's registry in Secret %s (the Pod's imagePullSecret, owned by its Pods): %w", pod.Spec.Containers[0].Image, secret.Name, err)
	}
	return nil
}

// dockerConfigSecret is a Secret of type kubernetes.io/dockerconfigjson
// with the credentials kc finds for image's registry, or nil when it
// finds none (anonymous).
func dockerConfigSecret(kc authn.Keychain, image string) (*corev1.Secret, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", image, err)
	}
	reg := ref.Context().Registry
	a, err := authn.Resolve(context.Background(), kc, reg)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", reg.RegistryStr(), err)
	}
	if a == authn.Anonymous {
		return nil, nil
	}
	c, err := a.Authorization()
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", reg.RegistryStr(), err)
	}
	if *c == (authn.AuthConfig{}) {
		return nil, nil
	}
	entry := map[string]string{}
	if c.Username != "" {
		entry["username"], entry["password"] = c.Username, c.Password
		entry["auth"] = base64.StdEncoding.EncodeToString([]byte(c.Username + ":" + c.Password))
	} else if c.Auth != "" {
		entry["auth"] = c.Auth
	}
	if c.IdentityToken != "" {
		entry["identitytoken"] = c.IdentityToken
	}
	if c.RegistryToken != "" {
		entry["registrytoken"] = c.RegistryToken
	}
	key := reg.RegistryStr()
	if key == name.DefaultRegistry {
		key = "https://index.docker.io/v1/" // as `docker login` writes Docker Hub's
	}
	data, err := json.Marshal(map[string]any{"auths": map[string]any{key: entry}})
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "airlock-pull-" + hex.EncodeToString(sum[:])[:16],
			Labels: map[string]string{LabelPullSecret: "true"},
		},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: data},
	}, nil
}
