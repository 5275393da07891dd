package inferencepool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"sigs.k8s.io/gateway-api-inference-extension/client-go/clientset/versioned"
	gieinformers "sigs.k8s.io/gateway-api-inference-extension/client-go/informers/externalversions"
)

// Error classes of Check and Run; each wraps the API server's error.
var (
	// ErrNotFound: the InferencePool does not exist (or its CRD is not
	// installed).
	ErrNotFound = errors.New("InferencePool not found")
	// ErrForbidden: the picker's service account may not read the pool or
	// the pods (RBAC).
	ErrForbidden = errors.New("forbidden by RBAC")
	// ErrNotSynced: the informers did not fill their caches in time
	// (typically: list allowed, watch not).
	ErrNotSynced = errors.New("informers did not sync")
)

// DefaultSyncTimeout bounds how long Run waits for the informers' first
// lists.
const DefaultSyncTimeout = 30 * time.Second

// Options configure a Watcher.
type Options struct {
	// Namespace and Name name the InferencePool. Required.
	Namespace, Name string
	// Kube reads the pods; Pools the InferencePool. Required.
	Kube  kubernetes.Interface
	Pools versioned.Interface
	// OnChange gets the pool's endpoint set (Endpoints) once the
	// informers have synced, then each time it changes. It runs on Run's
	// goroutine, one call at a time; Run waits for it. Required.
	OnChange func(endpoints []string)
	// Resync is the informers' resync period; 0 means none.
	Resync time.Duration
	// SyncTimeout bounds the wait for the first lists; 0 means
	// DefaultSyncTimeout.
	SyncTimeout time.Duration
	// Logger logs the pool appearing and disappearing; nil means slog's
	// default.
	Logger *slog.Logger
}

// Watcher follows one InferencePool and the pods it selects with
// client-go informers and reports its ready endpoints.
type Watcher struct {
	o Options
}

// New checks o and returns a Watcher. Errors name the field.
func New(o Options) (*Watcher, error) {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("inferencepool: Namespace: required"))
	}
	if o.Name == "" {
		errs = append(errs, errors.New("inferencepool: Name: required"))
	}
	if o.Kube == nil {
		errs = append(errs, errors.New("inferencepool: Kube: required"))
	}
	if o.Pools == nil {
		errs = append(errs, errors.New("inferencepool: Pools: required"))
	}
	if o.OnChange == nil {
		errs = append(errs, errors.New("inferencepool: OnChange: required"))
	}
	if o.Resync < 0 || o.SyncTimeout < 0 {
		errs = append(errs, errors.New("inferencepool: Resync, SyncTimeout: must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if o.SyncTimeout == 0 {
		o.SyncTimeout = DefaultSyncTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Watcher{o: o}, nil
}

// Check asks the API server once for the pool and for the pods of its
// namespace, so that a missing pool or a missing permission is an error at
// start (ErrNotFound, ErrForbidden) rather than an informer retrying in
// the background.
func (w *Watcher) Check(ctx context.Context) error {
	ref := w.o.Namespace + "/" + w.o.Name
	if _, err := w.o.Pools.InferenceV1().InferencePools(w.o.Namespace).Get(ctx, w.o.Name, metav1.GetOptions{}); err != nil {
		return classify(err, "get inferencepools.inference.networking.k8s.io "+ref)
	}
	if _, err := w.o.Pools.InferenceV1().InferencePools(w.o.Namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return classify(err, "list inferencepools.inference.networking.k8s.io in namespace "+w.o.Namespace)
	}
	if _, err := w.o.Kube.CoreV1().Pods(w.o.Namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return classify(err, "list pods in namespace "+w.o.Namespace)
	}
	return nil
}

func classify(err error, what string) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %s (is the InferencePool CRD installed, the name and namespace right?): %w", ErrNotFound, what, err)
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w: %s: %w", ErrForbidden, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Run starts the informers, waits for their caches (ErrNotSynced after
// SyncTimeout), reports the endpoint set to OnChange, and then reports
// every change until ctx ends; it returns nil then. The informers'
// handlers only mark the set dirty; Run recomputes it from the caches, so
// a burst of pod events is one OnChange.
func (w *Watcher) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dirty := make(chan struct{}, 1)
	mark := func() {
		select {
		case dirty <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { mark() },
		UpdateFunc: func(any, any) { mark() },
		DeleteFunc: func(any) { mark() },
	}
	kf := informers.NewSharedInformerFactoryWithOptions(w.o.Kube, w.o.Resync, informers.WithNamespace(w.o.Namespace))
	pf := gieinformers.NewSharedInformerFactoryWithOptions(w.o.Pools, w.o.Resync, gieinformers.WithNamespace(w.o.Namespace))
	podInf := kf.Core().V1().Pods()
	poolInf := pf.Inference().V1().InferencePools()
	// Every pod of the namespace is cached and the selector applied here,
	// so a changed selector needs no new watch.
	if _, err := podInf.Informer().AddEventHandler(handler); err != nil {
		return err
	}
	if _, err := poolInf.Informer().AddEventHandler(handler); err != nil {
		return err
	}
	kf.Start(ctx.Done())
	pf.Start(ctx.Done())
	defer func() {
		cancel()
		kf.Shutdown()
		pf.Shutdown()
	}()
	sctx, scancel := context.WithTimeout(ctx, w.o.SyncTimeout)
	synced := cache.WaitForCacheSync(sctx.Done(), podInf.Informer().HasSynced, poolInf.Informer().HasSynced)
	scancel()
	if !synced {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("%w within %v: watch pods and inferencepools in namespace %s (RBAC allows get, list and watch on both?)",
			ErrNotSynced, w.o.SyncTimeout, w.o.Namespace)
	}
	podLister, poolLister := podInf.Lister(), poolInf.Lister()
	var last []string
	first, present := true, true
	for {
		pool, err := poolLister.InferencePools(w.o.Namespace).Get(w.o.Name)
		if err != nil {
			pool = nil
		}
		if (pool != nil) != present {
			present = pool != nil
			if present {
				w.o.Logger.Info("inferencepool: pool is back", "pool", w.o.Namespace+"/"+w.o.Name)
			} else {
				w.o.Logger.Warn("inferencepool: pool is gone; no endpoints until it is back", "pool", w.o.Namespace+"/"+w.o.Name)
			}
		}
		var eps []string
		if pool != nil {
			pods, _ := podLister.Pods(w.o.Namespace).List(labels.Everything()) // a cache read; no error
			eps = Endpoints(pool, pods)
		}
		if first || !slices.Equal(eps, last) {
			first = false
			last = eps
			w.o.OnChange(slices.Clone(eps))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-dirty:
		}
	}
}
