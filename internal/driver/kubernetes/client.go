package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kclient is the few calls the driver makes to the API server, on
// client-go's REST client with a scheme of only the types it uses: the
// generated clientset registers every API group when the program starts,
// which every airlock command would pay for (see docs/decisions.md).
type kclient struct {
	config *rest.Config
	core   *rest.RESTClient // /api/v1
	node   *rest.RESTClient // /apis/node.k8s.io/v1
	authz  *rest.RESTClient // /apis/authorization.k8s.io/v1
	params runtime.ParameterCodec
}

// loadConfig finds the cluster's address and credentials, and the
// namespace it names: opts.Config, else the kubeconfig file named, else
// $KUBECONFIG, else the in-cluster config (a Pod's service account), else
// ~/.kube/config. The namespace is the kubeconfig context's, or the
// service account's; "" when neither says.
func loadConfig(opts Options) (*rest.Config, string, error) {
	if opts.Config != nil {
		return rest.CopyConfig(opts.Config), "", nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if opts.Kubeconfig != "" {
		rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: opts.Kubeconfig}
	} else if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) != "" {
		// $KUBECONFIG names the cluster, in a Pod too.
	} else if c, err := rest.InClusterConfig(); err == nil {
		ns, _ := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
		return c, strings.TrimSpace(string(ns)), nil
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	c, err := cc.ClientConfig()
	if err != nil {
		if opts.Kubeconfig != "" {
			return nil, "", fmt.Errorf("read kubeconfig %s: %w", opts.Kubeconfig, err)
		}
		return nil, "", fmt.Errorf("no cluster configured (not in a Pod, no $KUBECONFIG, no ~/.kube/config): %w", err)
	}
	ns, explicit, err := cc.Namespace()
	if err != nil || !explicit {
		ns = ""
	}
	return c, ns, nil
}

func newKClient(cfg *rest.Config) (*kclient, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, nodev1.AddToScheme, authorizationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
	}
	codecs := serializer.NewCodecFactory(scheme)
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "airlock"
	}
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	mk := func(gv schema.GroupVersion, prefix string) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion = &gv
		c.APIPath = prefix
		c.ContentType = runtime.ContentTypeJSON
		c.NegotiatedSerializer = codecs.WithoutConversion()
		return rest.RESTClientForConfigAndClient(c, httpClient)
	}
	k := &kclient{config: cfg, params: runtime.NewParameterCodec(scheme)}
	if k.core, err = mk(corev1.SchemeGroupVersion, "/api"); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if k.node, err = mk(nodev1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if k.authz, err = mk(authorizationv1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return k, nil
}

func (k *kclient) createPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := k.core.Post().Namespace(pod.Namespace).Resource("pods").Body(pod).Do(ctx).Into(out)
	return out, err
}

func (k *kclient) getPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := k.core.Get().Namespace(ns).Resource("pods").Name(name).Do(ctx).Into(out)
	return out, err
}

func (k *kclient) listPods(ctx context.Context, ns, selector string) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := k.core.Get().Namespace(ns).Resource("pods").
		VersionedParams(&metav1.ListOptions{LabelSelector: selector}, k.params).Do(ctx).Into(out)
	return out, err
}

// watchPods watches the Pods that opts select from its resource version.
func (k *kclient) watchPods(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return k.core.Get().Namespace(ns).Resource("pods").VersionedParams(&opts, k.params).Watch(ctx)
}

// watchEvents watches the events about the object whose uid is uid.
func (k *kclient) watchEvents(ctx context.Context, ns string, uid types.UID) (watch.Interface, error) {
	opts := metav1.ListOptions{Watch: true, FieldSelector: "involvedObject.uid=" + string(uid)}
	return k.core.Get().Namespace(ns).Resource("events").VersionedParams(&opts, k.params).Watch(ctx)
}

// deletePod deletes a Pod with the grace period given; precondition, when
// set, is the uid the Pod must have.
func (k *kclient) deletePod(ctx context.Context, ns, name string, grace int64, uid types.UID) error {
	opts := &metav1.DeleteOptions{GracePeriodSeconds: &grace}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	return k.core.Delete().Namespace(ns).Resource("pods").Name(name).Body(opts).Do(ctx).Error()
}

// patchPod applies a JSON merge patch (or, with a resourceVersion in it, a
// compare-and-swap).
func (k *kclient) patchPod(ctx context.Context, ns, name string, patch []byte) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := k.core.Patch(types.MergePatchType).Namespace(ns).Resource("pods").Name(name).Body(patch).Do(ctx).Into(out)
	return out, err
}

// podLog returns the end of the Pod's container's log (what the agent
// wrote before anybody attached), at most limit bytes.
func (k *kclient) podLog(ctx context.Context, ns, name string, limit int64) (string, error) {
	b, err := k.core.Get().Namespace(ns).Resource("pods").Name(name).SubResource("log").
		VersionedParams(&corev1.PodLogOptions{Container: containerName, LimitBytes: &limit}, k.params).Do(ctx).Raw()
	return string(b), err
}

func (k *kclient) getRuntimeClass(ctx context.Context, name string) (*nodev1.RuntimeClass, error) {
	out := &nodev1.RuntimeClass{}
	err := k.node.Get().Resource("runtimeclasses").Name(name).Do(ctx).Into(out)
	return out, err
}

func (k *kclient) listRuntimeClasses(ctx context.Context) (*nodev1.RuntimeClassList, error) {
	out := &nodev1.RuntimeClassList{}
	err := k.node.Get().Resource("runtimeclasses").Do(ctx).Into(out)
	return out, err
}

// allowed asks the API server whether the caller may do verb on resource
// (with subresource) in namespace ns (SelfSubjectAccessReview).
func (k *kclient) allowed(ctx context.Context, ns, verb, resource, subresource string) (bool, string, error) {
	r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: resource, Subresource: subresource},
	}}
	out := &authorizationv1.SelfSubjectAccessReview{}
	if err := k.authz.Post().Resource("selfsubjectaccessreviews").Body(r).Do(ctx).Into(out); err != nil {
		return false, "", err
	}
	return out.Status.Allowed, out.Status.Reason, nil
}

// version asks the API server its version.
func (k *kclient) version(ctx context.Context) (string, error) {
	body, err := k.core.Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return "", err
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", fmt.Errorf("the API server's /version: %w", err)
	}
	return v.GitVersion, nil
}

// statusCode is the HTTP status of an API error, or 0.
func statusCode(err error) int {
	var se interface{ Status() metav1.Status }
	if errors.As(err, &se) {
		return int(se.Status().Code)
	}
	return 0
}

func isNotFound(err error) bool  { return statusCode(err) == http.StatusNotFound }
func isConflict(err error) bool  { return statusCode(err) == http.StatusConflict }
func isForbidden(err error) bool { return statusCode(err) == http.StatusForbidden }

// hostname is this machine's name, for Instance.
func hostnameOr(def string) string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return def
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
