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
)

// LabelPullSecret marks the Secrets the driver makes from
// Options.PullCredentials.
const LabelPullSecret = "airlock.pull-secret"

// pullSecrets are the imagePullSecrets of a Pod of image: the Secrets
// Options.PullSecrets names, and, when Options.PullCredentials finds
// credentials for the image's registry, a Secret of the namespace that
// holds them (made once; named by their hash, so that the same
// credentials are one Secret and changed ones another).
func (d *Driver) pullSecrets(ctx context.Context, k *kclient, image string) ([]corev1.LocalObjectReference, error) {
	var out []corev1.LocalObjectReference
	for _, s := range d.opts.PullSecrets {
		out = append(out, corev1.LocalObjectReference{Name: s})
	}
	if d.opts.PullCredentials == nil || image == "" {
		return out, nil
	}
	secret, err := dockerConfigSecret(d.opts.PullCredentials, image)
	if err != nil || secret == nil {
		return out, err
	}
	out = append(out, corev1.LocalObjectReference{Name: secret.Name})
	d.mu.Lock()
	made := d.madeSecrets[secret.Name]
	d.mu.Unlock()
	if made {
		return out, nil
	}
	secret.Namespace = d.opts.Namespace
	err = k.core.Post().Namespace(d.opts.Namespace).Resource("secrets").Body(secret).Do(ctx).Error()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("keep the credentials for %s's registry in Secret %s (the Pods' imagePullSecret): %w", image, secret.Name, err)
	}
	d.mu.Lock()
	if d.madeSecrets == nil {
		d.madeSecrets = map[string]bool{}
	}
	d.madeSecrets[secret.Name] = true
	d.mu.Unlock()
	return out, nil
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
