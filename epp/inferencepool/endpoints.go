package inferencepool

import (
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// Endpoints is the endpoint set of pool among pods: for every pod the
// pool's selector selects that is ready (the PodReady condition true, an
// IP, not being deleted), one ip:port per target port of the pool
// (spec.targetPorts of inference.networking.k8s.io/v1, the API version this
// package watches). The result is sorted and has no duplicates. A nil pool,
// an empty selector or no target port gives none: an empty selector would
// select every pod of the namespace, which the CRD forbids and which is
// never what a pool means.
func Endpoints(pool *v1.InferencePool, pods []*corev1.Pod) []string {
	if pool == nil || len(pool.Spec.Selector.MatchLabels) == 0 || len(pool.Spec.TargetPorts) == 0 {
		return nil
	}
	set := make(labels.Set, len(pool.Spec.Selector.MatchLabels))
	for k, v := range pool.Spec.Selector.MatchLabels {
		set[string(k)] = string(v)
	}
	sel := labels.SelectorFromSet(set)
	var out []string
	for _, p := range pods {
		if p == nil || p.Namespace != pool.Namespace || !sel.Matches(labels.Set(p.Labels)) || !Ready(p) {
			continue
		}
		for _, tp := range pool.Spec.TargetPorts {
			if tp.Number <= 0 {
				continue
			}
			out = append(out, net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(tp.Number))))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Ready reports whether a pod takes requests: it has an IP, it is not
// being deleted (a terminating pod may still report ready while it
// drains), and its PodReady condition is true.
func Ready(p *corev1.Pod) bool {
	if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
