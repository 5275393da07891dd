package inferencepool_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	v1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	giefake "sigs.k8s.io/gateway-api-inference-extension/client-go/clientset/versioned/fake"

	"github.com/llmesh/llmesh/epp/inferencepool"
)

const ns = "llm"

func pool(sel map[string]string, ports ...int32) *v1.InferencePool {
	p := &v1.InferencePool{ObjectMeta: metav1.ObjectMeta{Name: "sims", Namespace: ns}}
	p.Spec.Selector.MatchLabels = map[v1.LabelKey]v1.LabelValue{}
	for k, v := range sel {
		p.Spec.Selector.MatchLabels[v1.LabelKey(k)] = v1.LabelValue(v)
	}
	for _, n := range ports {
		p.Spec.TargetPorts = append(p.Spec.TargetPorts, v1.Port{Number: v1.PortNumber(n)})
	}
	return p
}

func pod(name, ip string, lbl map[string]string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbl},
		Status: corev1.PodStatus{PodIP: ip, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: st}}},
	}
}

func TestEndpoints(t *testing.T) {
	app := map[string]string{"app": "sim"}
	deleting := pod("d", "10.0.0.9", app, true)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	other := pod("o", "10.0.0.8", app, true)
	other.Namespace = "elsewhere"
	pods := []*corev1.Pod{
		pod("a", "10.0.0.2", app, true),
		pod("b", "10.0.0.1", map[string]string{"app": "sim", "x": "y"}, true),
		pod("c", "10.0.0.3", app, false),
		pod("e", "", app, true),
		pod("f", "10.0.0.4", map[string]string{"app": "other"}, true),
		pod("v6", "fd00::1", app, true),
		deleting, other, nil,
	}
	for _, tc := range []struct {
		name string
		pool *v1.InferencePool
		want []string
	}{
		{"one port", pool(app, 8000), []string{"10.0.0.1:8000", "10.0.0.2:8000", "[fd00::1]:8000"}},
		{"two ports", pool(app, 8001, 8000), []string{"10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.2:8000", "10.0.0.2:8001", "[fd00::1]:8000", "[fd00::1]:8001"}},
		{"two labels", pool(map[string]string{"app": "sim", "x": "y"}, 8000), []string{"10.0.0.1:8000"}},
		{"empty selector", pool(nil, 8000), nil},
		{"no port", pool(app), nil},
		{"nil pool", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, inferencepool.Endpoints(tc.pool, pods)); diff != "" {
				t.Errorf("Endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

// cluster is a fake API server for one watcher: the clientsets, a record
// of what OnChange got, and a signal once both informers watch (events
// made before that would be lost by the fake's tracker).
type cluster struct {
	kube    *kubefake.Clientset
	pools   *giefake.Clientset
	mu      sync.Mutex
	got     [][]string
	changed chan struct{}
	watches sync.WaitGroup
}

func newCluster(t *testing.T, objs ...runtime.Object) *cluster {
	c := &cluster{changed: make(chan struct{}, 100)}
	var kubeObjs, poolObjs []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*v1.InferencePool); ok {
			poolObjs = append(poolObjs, o)
		} else {
			kubeObjs = append(kubeObjs, o)
		}
	}
	c.kube = kubefake.NewClientset(kubeObjs...)
	c.pools = giefake.NewSimpleClientset(poolObjs...)
	c.watches.Add(2)
	for _, f := range []interface {
		PrependWatchReactor(string, k8stesting.WatchReactionFunc)
	}{c.kube, c.pools} {
		var once sync.Once
		f.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
			once.Do(c.watches.Done)
			return false, nil, nil
		})
	}
	return c
}

func (c *cluster) run(t *testing.T) (stop func()) {
	t.Helper()
	w, err := inferencepool.New(inferencepool.Options{Namespace: ns, Name: "sims", Kube: c.kube, Pools: c.pools,
		SyncTimeout: 10 * time.Second,
		OnChange: func(eps []string) {
			c.mu.Lock()
			c.got = append(c.got, eps)
			c.mu.Unlock()
			c.changed <- struct{}{}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	c.watches.Wait()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// wait waits for OnChange to report want.
func (c *cluster) wait(t *testing.T, want []string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		var last []string
		n := len(c.got)
		if n > 0 {
			last = c.got[n-1]
		}
		c.mu.Unlock()
		if n > 0 && cmp.Equal(want, last) {
			return
		}
		select {
		case <-c.changed:
		case <-deadline:
			t.Fatalf("endpoints: want %q, last reported %q (%d reports)", want, last, n)
		}
	}
}

func TestWatcherFollowsPods(t *testing.T) {
	ctx := context.Background()
	app := map[string]string{"app": "sim"}
	c := newCluster(t, pool(app, 8000), pod("a", "10.0.0.1", app, true))
	stop := c.run(t)
	defer stop()
	c.wait(t, []string{"10.0.0.1:8000"})
	pods := c.kube.CoreV1().Pods(ns)

	// A pod comes, not ready yet: nothing changes; then it is ready.
	b := pod("b", "10.0.0.2", app, false)
	if _, err := pods.Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b = pod("b", "10.0.0.2", app, true)
	if _, err := pods.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.wait(t, []string{"10.0.0.1:8000", "10.0.0.2:8000"})

	// Unready, then deleted.
	if _, err := pods.Update(ctx, pod("a", "10.0.0.1", app, false), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.wait(t, []string{"10.0.0.2:8000"})
	if err := pods.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.wait(t, nil)

	// The selector changes to pods already there; then a second port.
	if _, err := pods.Create(ctx, pod("g", "10.0.0.7", map[string]string{"app": "gpu"}, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pp := c.pools.InferenceV1().InferencePools(ns)
	if _, err := pp.Update(ctx, pool(map[string]string{"app": "gpu"}, 8000), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.wait(t, []string{"10.0.0.7:8000"})
	if _, err := pp.Update(ctx, pool(map[string]string{"app": "gpu"}, 8000, 8001), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.wait(t, []string{"10.0.0.7:8000", "10.0.0.7:8001"})

	// The pool goes: no endpoints; it comes back.
	if err := pp.Delete(ctx, "sims", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.wait(t, nil)
	if _, err := pp.Create(ctx, pool(map[string]string{"app": "gpu"}, 9000), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.wait(t, []string{"10.0.0.7:9000"})

	// Reports are changes only: no two in a row are equal.
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 1; i < len(c.got); i++ {
		if cmp.Equal(c.got[i-1], c.got[i]) {
			t.Errorf("report %d repeats %q", i, c.got[i])
		}
	}
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	app := map[string]string{"app": "sim"}
	mk := func(c *cluster) *inferencepool.Watcher {
		w, err := inferencepool.New(inferencepool.Options{Namespace: ns, Name: "sims", Kube: c.kube, Pools: c.pools, OnChange: func([]string) {}})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	if err := mk(newCluster(t, pool(app, 8000))).Check(ctx); err != nil {
		t.Errorf("Check with the pool: %v", err)
	}
	if err := mk(newCluster(t)).Check(ctx); !errors.Is(err, inferencepool.ErrNotFound) {
		t.Errorf("Check without the pool: %v, want ErrNotFound", err)
	}
	c := newCluster(t, pool(app, 8000))
	c.kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no RBAC"))
	})
	err := mk(c).Check(ctx)
	if !errors.Is(err, inferencepool.ErrForbidden) {
		t.Errorf("Check without pods permission: %v, want ErrForbidden", err)
	} else {
		t.Logf("%v", err)
	}
}

func TestRunNotSynced(t *testing.T) {
	c := newCluster(t, pool(map[string]string{"app": "sim"}, 8000))
	c.kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no RBAC"))
	})
	w, err := inferencepool.New(inferencepool.Options{Namespace: ns, Name: "sims", Kube: c.kube, Pools: c.pools,
		SyncTimeout: 300 * time.Millisecond, OnChange: func([]string) { t.Error("OnChange before sync") }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); !errors.Is(err, inferencepool.ErrNotSynced) {
		t.Errorf("Run: %v, want ErrNotSynced", err)
	}
}

func TestNewErrors(t *testing.T) {
	_, err := inferencepool.New(inferencepool.Options{})
	for _, f := range []string{"Namespace", "Name", "Kube", "Pools", "OnChange"} {
		if err == nil || !contains(err.Error(), f+": required") {
			t.Errorf("New({}): %v, want %s: required", err, f)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
