// Package kubelet plays the kubelet (and the Deployment and EndpointSlice controllers) for
// policy-server Deployments on a cluster that has no nodes: for each Deployment it runs the
// policy server as a local process per replica, with the Deployment's arguments and environment,
// its ConfigMap and Secret volumes written to files as kubelet's AtomicWriter writes them (and
// rewritten when the objects change), its ports replaced by free loopback ports, and one
// EndpointSlice per ready replica so that kube-apiserver (started with
// --enable-aggregator-routing=true) calls it through the Deployment's Service.
//
// A change of the pod template replaces the replicas (new process first, old one stopped once the
// new is ready), as a rolling update would; a change of a ConfigMap or Secret only rewrites the
// files, as kubelet does. Starts and PIDs let a test tell a hot reload from a restart.
package kubelet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// DefaultSelector selects the Deployments the emulator runs.
const DefaultSelector = "app.kubernetes.io/component=policy-server"

// EndpointSliceManager is the endpointslice.kubernetes.io/managed-by value of the slices the
// emulator writes.
const EndpointSliceManager = "kubelet-emulator.e2e.tollgate.dev"

// Options configure [Start].
type Options struct {
	// Client reaches the apiserver.
	Client kubernetes.Interface
	// Namespace holds the Deployments (and their ConfigMaps, Secrets and Services).
	Namespace string
	// Binary is the policy server executable: it replaces the container's image and command[0].
	Binary string
	// Dir holds one directory per pod (volumes, log files).
	Dir string
	// Selector is the Deployments' label selector (default DefaultSelector).
	Selector string
	// VolumeUpdateDelay is how long after a ConfigMap or Secret changes its files are rewritten
	// (kubelet takes up to its sync period plus the cache TTL: about a minute). Default 0.
	VolumeUpdateDelay time.Duration
	// ConfigMapUpdateDelay, when non-zero, replaces VolumeUpdateDelay for ConfigMap volumes only
	// (Secret volumes, the certificates, keep VolumeUpdateDelay).
	ConfigMapUpdateDelay time.Duration
	// API, when set, gives every replica API access as a pod has it: a token of the pod's
	// ServiceAccount (TokenRequest API, one hour) in a kubeconfig in the pod directory, named by
	// KUBECONFIG in the process's environment. The token is the ServiceAccount's, so RBAC
	// applies as in a cluster. Nil: no API access.
	API *APIAccess
	// ReadyTimeout bounds the wait for a new replica's /readiness (default 2 minutes): past it,
	// the rollout waits as a real one would, and the old replicas keep serving.
	ReadyTimeout time.Duration
	// EndpointDrain is how long a replica keeps running after its EndpointSlice is deleted,
	// before SIGTERM (default 1 s): kube-apiserver needs that to see the slice gone.
	EndpointDrain time.Duration
	// StopGrace is the wait between SIGTERM and SIGKILL (default 20 s).
	StopGrace time.Duration
	// ExtraArgs are added to every replica's arguments (e.g. --log-level=debug).
	ExtraArgs []string
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// APIAccess is how a replica reaches the apiserver.
type APIAccess struct {
	// Server is the apiserver's URL; CAData the PEM CA bundle its certificate chains to.
	Server string
	CAData []byte
}

// Kubelet runs the selected Deployments' replicas. Stop it with Stop.
type Kubelet struct {
	opts       Options
	ctx        context.Context
	cancel     context.CancelFunc
	factory    informers.SharedInformerFactory
	depFactory informers.SharedInformerFactory
	deps       appslisters.DeploymentLister
	cms        corelisters.ConfigMapLister
	secrets    corelisters.SecretLister
	svcs       corelisters.ServiceLister

	mu      sync.Mutex
	runners map[string]*runner
	starts  map[string]int
	events  []string
	wg      sync.WaitGroup
}

// Replica describes one running replica (one pod) of a Deployment.
type Replica struct {
	Deployment string
	Pod        string
	PID        int
	// Port and ReadinessPort are the real loopback ports of the webhook and of the probes.
	Port, ReadinessPort int32
	// Ports are the real ports by container port name.
	Ports        map[string]int32
	Dir, LogPath string
	Started      time.Time
	Ready        bool
	// Published is true once the replica's EndpointSlice exists.
	Published    bool
	TemplateHash string
	// Restarts counts the container's restarts after a crash (the pod stays).
	Restarts int
}

// Start begins watching Deployments in opts.Namespace. It returns once the informers synced.
func Start(ctx context.Context, opts Options) (*Kubelet, error) {
	if opts.Client == nil || opts.Namespace == "" || opts.Binary == "" || opts.Dir == "" {
		return nil, errors.New("kubelet: Client, Namespace, Binary and Dir are required")
	}
	if opts.Selector == "" {
		opts.Selector = DefaultSelector
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	if opts.EndpointDrain == 0 {
		opts.EndpointDrain = time.Second
	}
	if opts.StopGrace == 0 {
		opts.StopGrace = 20 * time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("kubelet: %w", err)
	}
	k := &Kubelet{opts: opts, runners: map[string]*runner{}, starts: map[string]int{}}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.factory = informers.NewSharedInformerFactoryWithOptions(opts.Client, 0, informers.WithNamespace(opts.Namespace))
	k.depFactory = informers.NewSharedInformerFactoryWithOptions(opts.Client, 0, informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = opts.Selector }))
	depInf := k.depFactory.Apps().V1().Deployments()
	cmInf := k.factory.Core().V1().ConfigMaps()
	secInf := k.factory.Core().V1().Secrets()
	svcInf := k.factory.Core().V1().Services()
	k.deps, k.cms, k.secrets, k.svcs = depInf.Lister(), cmInf.Lister(), secInf.Lister(), svcInf.Lister()

	onDep := func(obj any) {
		if d, ok := obj.(*appsv1.Deployment); ok {
			k.kick(d.Name, true)
		} else if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			if d, ok := t.Obj.(*appsv1.Deployment); ok {
				k.kick(d.Name, true)
			}
		}
	}
	kickAll := func(any) { k.kickAll() }
	onSvc := func(obj any) {
		if s, ok := obj.(*corev1.Service); ok {
			k.kick(s.Name, false)
		}
	}
	for _, reg := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandlerFuncs
	}{
		{depInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: onDep, UpdateFunc: func(_, n any) { onDep(n) }, DeleteFunc: onDep}},
		{cmInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: kickAll, UpdateFunc: func(_, n any) { kickAll(n) }, DeleteFunc: kickAll}},
		{secInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: kickAll, UpdateFunc: func(_, n any) { kickAll(n) }, DeleteFunc: kickAll}},
		{svcInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: onSvc, UpdateFunc: func(_, n any) { onSvc(n) }, DeleteFunc: onSvc}},
	} {
		if _, err := reg.inf.AddEventHandler(reg.h); err != nil {
			k.cancel()
			return nil, fmt.Errorf("kubelet: %w", err)
		}
	}
	k.factory.Start(k.ctx.Done())
	k.depFactory.Start(k.ctx.Done())
	for typ, ok := range k.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			k.cancel()
			return nil, fmt.Errorf("kubelet: %v informer did not sync", typ)
		}
	}
	for typ, ok := range k.depFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			k.cancel()
			return nil, fmt.Errorf("kubelet: %v informer did not sync", typ)
		}
	}
	return k, nil
}

// Stop stops every replica (deleting their slices) and the watches.
func (k *Kubelet) Stop() {
	k.cancel()
	k.wg.Wait()
	k.factory.Shutdown()
	k.depFactory.Shutdown()
}

// Starts returns how many times a process was started for the Deployment: one per new replica
// plus one per restart after a crash. A hot reload leaves it unchanged.
func (k *Kubelet) Starts(deployment string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.starts[deployment]
}

// Events returns what the emulator did (starts, stops, volume updates, crashes), oldest first.
func (k *Kubelet) Events() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.events...)
}

// Replicas returns the Deployment's replicas, by pod name.
func (k *Kubelet) Replicas(deployment string) []Replica {
	k.mu.Lock()
	r := k.runners[deployment]
	k.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.snapshot()
}

// PIDs returns the process ids of the Deployment's replicas, sorted.
func (k *Kubelet) PIDs(deployment string) []int {
	var pids []int
	for _, rep := range k.Replicas(deployment) {
		pids = append(pids, rep.PID)
	}
	sort.Ints(pids)
	return pids
}

// WaitReady waits until the Deployment has exactly n replicas, all running the current pod
// template, ready and published.
func (k *Kubelet) WaitReady(ctx context.Context, deployment string, n int) ([]Replica, error) {
	var last []Replica
	for {
		last = k.Replicas(deployment)
		ok := len(last) == n
		for _, rep := range last {
			ok = ok && rep.Ready && rep.Published && rep.TemplateHash == k.currentHash(deployment)
		}
		if ok {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("kubelet: %s: %d ready replicas wanted, have %+v: %w", deployment, n, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitGone waits until no process of the Deployment runs and its runner has finished.
func (k *Kubelet) WaitGone(ctx context.Context, deployment string) error {
	for {
		k.mu.Lock()
		r := k.runners[deployment]
		k.mu.Unlock()
		if r == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubelet: %s still has replicas %+v: %w", deployment, r.snapshot(), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (k *Kubelet) currentHash(deployment string) string {
	d, err := k.deps.Deployments(k.opts.Namespace).Get(deployment)
	if err != nil {
		return ""
	}
	return templateHash(&d.Spec.Template)
}

func (k *Kubelet) event(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	k.mu.Lock()
	k.events = append(k.events, time.Now().UTC().Format("15:04:05.000")+" "+line)
	k.mu.Unlock()
	k.opts.Logf("kubelet: %s", line)
}

// kick wakes the Deployment's runner; create starts one if there is none.
func (k *Kubelet) kick(name string, create bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ctx.Err() != nil {
		return
	}
	r := k.runners[name]
	if r == nil {
		if !create {
			return
		}
		r = &runner{k: k, name: name, kickc: make(chan struct{}, 1)}
		k.runners[name] = r
		k.wg.Add(1)
		go r.run()
	}
	r.wake()
}

func (k *Kubelet) kickAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.runners {
		r.wake()
	}
}

// runner owns one Deployment's pods; only its goroutine changes them (mu guards snapshots).
type runner struct {
	k     *Kubelet
	name  string
	kickc chan struct{}

	mu   sync.Mutex
	pods []*pod
	seq  int
	// terminating pods are stopping in the background.
	terminating sync.WaitGroup
}

func (r *runner) wake() {
	select {
	case r.kickc <- struct{}{}:
	default:
	}
}

func (r *runner) run() {
	defer r.k.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-r.k.ctx.Done():
			r.stopAll("kubelet stopping")
			r.terminating.Wait()
			return
		case <-r.kickc:
		case <-timer.C:
		}
		next, gone := r.sync()
		if gone {
			r.terminating.Wait()
			r.k.mu.Lock()
			// A Deployment recreated meanwhile kicks a new runner after this one is removed.
			delete(r.k.runners, r.name)
			recreated := false
			if _, err := r.k.deps.Deployments(r.k.opts.Namespace).Get(r.name); err == nil {
				recreated = true
			}
			r.k.mu.Unlock()
			if recreated {
				r.k.kick(r.name, true)
			}
			return
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if next <= 0 {
			next = time.Hour
		}
		timer.Reset(next)
	}
}

// sync drives the Deployment's pods toward its spec once. It returns when it wants to run again
// (0: only on events) and whether the Deployment is gone (the runner then ends).
func (r *runner) sync() (time.Duration, bool) {
	k := r.k
	d, err := k.deps.Deployments(k.opts.Namespace).Get(r.name)
	if apierrors.IsNotFound(err) {
		r.stopAll("deployment deleted")
		return 0, true
	}
	if err != nil {
		return time.Second, false
	}
	var next time.Duration
	later := func(d time.Duration) {
		if d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	hash := templateHash(&d.Spec.Template)
	desired := int(ptr.Deref(d.Spec.Replicas, 1))
	now := time.Now()

	r.mu.Lock()
	pods := append([]*pod(nil), r.pods...)
	r.mu.Unlock()

	svc, _ := k.svcs.Services(k.opts.Namespace).Get(r.name)
	for _, p := range pods {
		// Crashes: the container restarts in the same pod, with back-off.
		if p.exited() {
			r.unpublish(p)
			if now.Before(p.nextStart) {
				later(p.nextStart.Sub(now))
				continue
			}
			if err := r.startProcess(p); err != nil {
				k.event("%s: restart failed: %v", p.name, err)
				p.nextStart = now.Add(p.backoff())
				later(p.backoff())
				continue
			}
		}
		// Volumes: rewritten like kubelet's AtomicWriter, after VolumeUpdateDelay.
		later(r.syncVolumes(p, now))
		// Endpoints: a ready replica is published, an unready one is not.
		ready, published := p.isReady(), p.isPublished()
		switch {
		case ready && !published && svc != nil:
			if err := r.publish(p, svc); err != nil {
				k.event("%s: publishing endpoints: %v", p.name, err)
				later(time.Second)
			}
		case ready && published && svc != nil && p.publishedFor != svc.ResourceVersion:
			_ = r.publish(p, svc) // the Service's ports changed
		case !ready && published:
			r.unpublish(p)
		}
		if !ready && !p.exited() {
			later(time.Second) // the probe goroutine kicks on readiness; this is a safety net
		}
	}

	// Rollout: start replicas of the current template up to desired; remove old ones once enough
	// current ones are ready (maxSurge 100%, maxUnavailable 0, as safe as a rollout can be).
	var current, old []*pod
	for _, p := range pods {
		if p.hash == hash {
			current = append(current, p)
		} else {
			old = append(old, p)
		}
	}
	for len(current) < desired {
		p, err := r.newPod(d, hash)
		if err != nil {
			k.event("%s: cannot create a replica: %v", r.name, err)
			later(time.Second)
			break
		}
		current = append(current, p)
	}
	readyCurrent := 0
	for _, p := range current {
		if p.isReady() && p.isPublished() {
			readyCurrent++
		}
	}
	if readyCurrent >= desired || desired == 0 {
		for _, p := range old {
			r.stopPod(p, "pod template changed")
		}
		old = nil
	}
	// Scale down: the newest surplus replicas go first.
	if len(current) > desired {
		sort.Slice(current, func(i, j int) bool { return current[i].seq < current[j].seq })
		for _, p := range current[desired:] {
			r.stopPod(p, "scaled down")
		}
		current = current[:desired]
	}

	// Status, as the Deployment controller would write it from the pods' readiness.
	ready := 0
	for _, p := range append(append([]*pod(nil), current...), old...) {
		if p.isReady() {
			ready++
		}
	}
	r.writeStatus(d, len(current)+len(old), len(current), ready, readyCurrent, desired)
	return next, false
}

// pod is one replica: a pod directory and the process of its one container.
type pod struct {
	name     string
	seq      int
	hash     string
	dir      string
	template corev1.PodTemplateSpec
	// ports maps container port numbers to real ports; portNames container port names to them.
	ports     map[int32]int32
	portNames map[string]int32
	webhook   int32
	probe     int32
	// volumes: written payload digest, and since when a different one is pending.
	volDigest  map[string]string
	volPending map[string]time.Time

	published    bool
	publishedFor string // the Service resourceVersion the slice was made from

	mu        sync.Mutex
	cmd       *exec.Cmd
	done      chan struct{}
	ready     bool
	started   time.Time
	restarts  int
	stopping  bool
	nextStart time.Time
	logPath   string
}

func (p *pod) isReady() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready
}

func (p *pod) isPublished() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published
}

func (p *pod) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return true
	}
	select {
	case <-p.done:
		return !p.stopping
	default:
		return false
	}
}

func (p *pod) backoff() time.Duration {
	b := time.Second << min(p.restarts, 4)
	return min(b, 10*time.Second)
}

func (r *runner) snapshot() []Replica {
	r.mu.Lock()
	pods := append([]*pod(nil), r.pods...)
	r.mu.Unlock()
	var out []Replica
	for _, p := range pods {
		p.mu.Lock()
		rep := Replica{
			Deployment: r.name, Pod: p.name, Port: p.webhook, ReadinessPort: p.probe,
			Ports: map[string]int32{}, Dir: p.dir, LogPath: p.logPath, Started: p.started,
			Ready: p.ready, Published: p.published, TemplateHash: p.hash, Restarts: p.restarts,
		}
		if p.cmd != nil && p.cmd.Process != nil {
			rep.PID = p.cmd.Process.Pid
		}
		p.mu.Unlock()
		for n, v := range p.portNames {
			rep.Ports[n] = v
		}
		out = append(out, rep)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out
}

// newPod makes a pod directory with its volumes, allocates ports and starts the process.
func (r *runner) newPod(d *appsv1.Deployment, hash string) (*pod, error) {
	r.seq++
	p := &pod{
		name:       fmt.Sprintf("%s-%s-%d", r.name, hash[:8], r.seq),
		seq:        r.seq,
		hash:       hash,
		template:   *d.Spec.Template.DeepCopy(),
		ports:      map[int32]int32{},
		portNames:  map[string]int32{},
		volDigest:  map[string]string{},
		volPending: map[string]time.Time{},
	}
	p.dir = filepath.Join(r.k.opts.Dir, p.name)
	if err := os.MkdirAll(filepath.Join(p.dir, "volumes"), 0o755); err != nil {
		return nil, err
	}
	// Volumes must exist before the container starts (kubelet waits in ContainerCreating).
	for _, v := range p.template.Spec.Volumes {
		payload, ok, err := r.volumePayload(v)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(p.dir, "volumes", v.Name)
		switch {
		case ok:
			if _, err := writeAtomic(dir, payload, 0o644); err != nil {
				return nil, err
			}
			p.volDigest[v.Name] = payloadDigest(payload)
		default:
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
		}
	}
	c := mainContainer(&p.template.Spec)
	if c == nil {
		return nil, errors.New("no container")
	}
	for _, cp := range c.Ports {
		real, err := freePort()
		if err != nil {
			return nil, err
		}
		p.ports[cp.ContainerPort] = real
		if cp.Name != "" {
			p.portNames[cp.Name] = real
		}
	}
	r.mu.Lock()
	r.pods = append(r.pods, p)
	r.mu.Unlock()
	if err := r.startProcess(p); err != nil {
		r.k.event("%s: start failed: %v", p.name, err)
		p.nextStart = time.Now().Add(p.backoff())
	}
	return p, nil
}

// volumePayload returns the files of a ConfigMap or Secret volume; ok is false for other kinds
// (emptyDir: an empty directory) and for a missing optional source.
func (r *runner) volumePayload(v corev1.Volume) (map[string][]byte, bool, error) {
	ns := r.k.opts.Namespace
	var data map[string][]byte
	var items []corev1.KeyToPath
	var optional bool
	switch {
	case v.ConfigMap != nil:
		cm, err := r.k.cms.ConfigMaps(ns).Get(v.ConfigMap.Name)
		optional = ptr.Deref(v.ConfigMap.Optional, false)
		if err != nil {
			if optional && apierrors.IsNotFound(err) {
				return map[string][]byte{}, true, nil
			}
			return nil, false, fmt.Errorf("volume %s: configmap %s: %w", v.Name, v.ConfigMap.Name, err)
		}
		data = map[string][]byte{}
		for key, val := range cm.Data {
			data[key] = []byte(val)
		}
		for key, val := range cm.BinaryData {
			data[key] = val
		}
		items = v.ConfigMap.Items
	case v.Secret != nil:
		s, err := r.k.secrets.Secrets(ns).Get(v.Secret.SecretName)
		optional = ptr.Deref(v.Secret.Optional, false)
		if err != nil {
			if optional && apierrors.IsNotFound(err) {
				return map[string][]byte{}, true, nil
			}
			return nil, false, fmt.Errorf("volume %s: secret %s: %w", v.Name, v.Secret.SecretName, err)
		}
		data = map[string][]byte{}
		for key, val := range s.Data {
			data[key] = val
		}
		for key, val := range s.StringData {
			data[key] = []byte(val)
		}
		items = v.Secret.Items
	default:
		return nil, false, nil
	}
	if len(items) == 0 {
		return data, true, nil
	}
	out := map[string][]byte{}
	for _, it := range items {
		val, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, false, fmt.Errorf("volume %s: key %q missing", v.Name, it.Key)
		}
		out[it.Path] = val
	}
	return out, true, nil
}

// syncVolumes rewrites the pod's changed ConfigMap and Secret volumes; it returns when to look
// again for an update still waiting for VolumeUpdateDelay.
func (r *runner) syncVolumes(p *pod, now time.Time) time.Duration {
	var next time.Duration
	for _, v := range p.template.Spec.Volumes {
		if v.ConfigMap == nil && v.Secret == nil {
			continue
		}
		payload, ok, err := r.volumePayload(v)
		if err != nil || !ok {
			continue // kubelet keeps the last files when the source disappears
		}
		dg := payloadDigest(payload)
		if dg == p.volDigest[v.Name] {
			delete(p.volPending, v.Name)
			continue
		}
		since, pending := p.volPending[v.Name]
		if !pending {
			since = now
			p.volPending[v.Name] = now
		}
		delay := r.k.opts.VolumeUpdateDelay
		if v.ConfigMap != nil && r.k.opts.ConfigMapUpdateDelay > 0 {
			delay = r.k.opts.ConfigMapUpdateDelay
		}
		if wait := delay - now.Sub(since); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		changed, err := writeAtomic(filepath.Join(p.dir, "volumes", v.Name), payload, 0o644)
		if err != nil {
			r.k.event("%s: volume %s: %v", p.name, v.Name, err)
			next = time.Second
			continue
		}
		p.volDigest[v.Name] = dg
		delete(p.volPending, v.Name)
		if changed {
			r.k.event("%s: volume %s updated", p.name, v.Name)
		}
	}
	return next
}

func mainContainer(spec *corev1.PodSpec) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == "policy-server" {
			return &spec.Containers[i]
		}
	}
	if len(spec.Containers) > 0 {
		return &spec.Containers[0]
	}
	return nil
}

// startProcess runs the container's process for p (a new pod, or a restart after a crash).
func (r *runner) startProcess(p *pod) error {
	c := mainContainer(&p.template.Spec)
	env, envMap := r.containerEnv(p, c)
	if r.k.opts.API != nil {
		kc, err := r.writeKubeconfig(p)
		if err != nil {
			return err
		}
		env = append(env, "KUBECONFIG="+kc)
	}
	argv := append([]string(nil), c.Command...)
	if len(argv) > 0 {
		argv = argv[1:] // command[0] is the image's binary: Options.Binary replaces it
	}
	argv = append(argv, c.Args...)
	for i, a := range argv {
		argv[i] = expandVars(a, envMap)
	}
	mounts := r.mountMap(p, c)
	for i, a := range argv {
		argv[i] = rewriteArg(a, mounts)
	}
	// Ports: the server listens on loopback on the real ports that stand for the declared ones.
	webhookDecl := firstNonEmpty(flagValue(argv, "port"), envMap["TOLLGATE_PORT"], "3000")
	probeDecl := firstNonEmpty(flagValue(argv, "readiness-probe-port"), envMap["TOLLGATE_READINESS_PROBE_PORT"], "8081")
	webhook, err := p.realPort(webhookDecl)
	if err != nil {
		return err
	}
	probe, err := p.realPort(probeDecl)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.webhook, p.probe = webhook, probe
	p.mu.Unlock()
	argv = dropFlags(argv, "addr", "port", "readiness-probe-port")
	argv = append(argv, "--addr=127.0.0.1", fmt.Sprintf("--port=%d", p.webhook), fmt.Sprintf("--readiness-probe-port=%d", p.probe))
	argv = append(argv, r.k.opts.ExtraArgs...)

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		p.restarts++
	}
	p.logPath = filepath.Join(p.dir, fmt.Sprintf("policy-server.%d.log", p.restarts))
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "+ %s %s\n", r.k.opts.Binary, strings.Join(argv, " "))
	cmd := exec.Command(r.k.opts.Binary, argv...)
	cmd.Env = env
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	p.cmd, p.done, p.ready, p.started, p.stopping = cmd, done, false, time.Now(), false
	r.k.mu.Lock()
	r.k.starts[r.name]++
	r.k.mu.Unlock()
	r.k.event("%s: started pid %d (webhook %d, probes %d, restarts %d)", p.name, cmd.Process.Pid, p.webhook, p.probe, p.restarts)
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		stopping := p.stopping
		p.ready = false
		if !stopping {
			p.nextStart = time.Now().Add(p.backoff())
		}
		p.mu.Unlock()
		close(done)
		if !stopping {
			r.k.event("%s: pid %d exited: %v (log %s)", p.name, cmd.Process.Pid, err, p.logPath)
		}
		r.wake()
	}()
	go r.probe(p, done)
	return nil
}

// probe polls the replica's /readiness (every 100 ms until first ready, then every second) and
// wakes the runner on every change.
func (r *runner) probe(p *pod, done chan struct{}) {
	hc := &http.Client{Timeout: time.Second}
	url := fmt.Sprintf("http://127.0.0.1:%d/readiness", p.probe)
	start := time.Now()
	warned := false
	for {
		resp, err := hc.Get(url)
		ok := err == nil && resp.StatusCode == http.StatusOK
		if resp != nil {
			resp.Body.Close()
		}
		p.mu.Lock()
		changed := p.ready != ok && !p.stopping && p.done == done
		if changed {
			p.ready = ok
		}
		interval := time.Second
		if !p.ready {
			interval = 100 * time.Millisecond
		}
		p.mu.Unlock()
		if changed {
			r.k.event("%s: ready=%v after %v", p.name, ok, time.Since(start).Round(time.Millisecond))
			r.wake()
		}
		if !ok && !warned && time.Since(start) > r.k.opts.ReadyTimeout {
			warned = true
			r.k.event("%s: not ready after %v (log %s)", p.name, r.k.opts.ReadyTimeout, p.logPath)
		}
		select {
		case <-done:
			return
		case <-time.After(interval):
		}
	}
}

func (p *pod) realPort(decl string) (int32, error) {
	n, err := strconv.Atoi(decl)
	if err != nil {
		return 0, fmt.Errorf("port %q: %w", decl, err)
	}
	if real, ok := p.ports[int32(n)]; ok {
		return real, nil
	}
	real, err := freePort()
	if err != nil {
		return 0, err
	}
	p.ports[int32(n)] = real
	return real, nil
}

// ReadOnlyRoot is what HOME and TMPDIR are set to for a container with readOnlyRootFilesystem: a
// path under a file, so that any write outside the volumes fails (ENOTDIR, even for root), as it
// would in the cluster.
const ReadOnlyRoot = "/dev/null/read-only-root-filesystem"

// containerEnv is the process environment, as a container's: PATH, HOSTNAME (the pod's name),
// HOME (ReadOnlyRoot with readOnlyRootFilesystem, else a directory in the pod), TMPDIR likewise,
// then the container's env with paths under mounts rewritten and $(VAR) references expanded.
// Nothing else of the test's environment leaks in (XDG_*, TOLLGATE_*...).
func (r *runner) containerEnv(p *pod, c *corev1.Container) ([]string, map[string]string) {
	home, tmp := filepath.Join(p.dir, "rootfs", "home"), filepath.Join(p.dir, "rootfs", "tmp")
	if sc := c.SecurityContext; sc != nil && ptr.Deref(sc.ReadOnlyRootFilesystem, false) {
		home, tmp = ReadOnlyRoot+"/home", ReadOnlyRoot+"/tmp"
	} else {
		_ = os.MkdirAll(home, 0o755)
		_ = os.MkdirAll(tmp, 0o755)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOSTNAME=" + p.name, "HOME=" + home, "TMPDIR=" + tmp}
	mounts := r.mountMap(p, c)
	m := map[string]string{}
	for _, e := range c.Env {
		val := e.Value
		if e.ValueFrom != nil {
			switch {
			case e.ValueFrom.FieldRef != nil:
				switch e.ValueFrom.FieldRef.FieldPath {
				case "metadata.namespace":
					val = r.k.opts.Namespace
				case "metadata.name":
					val = p.name
				case "status.podIP", "status.hostIP":
					val = "127.0.0.1"
				case "spec.nodeName":
					val = "e2e-node"
				case "spec.serviceAccountName":
					val = p.template.Spec.ServiceAccountName
				}
			case e.ValueFrom.ConfigMapKeyRef != nil:
				if cm, err := r.k.cms.ConfigMaps(r.k.opts.Namespace).Get(e.ValueFrom.ConfigMapKeyRef.Name); err == nil {
					val = cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
				}
			case e.ValueFrom.SecretKeyRef != nil:
				if s, err := r.k.secrets.Secrets(r.k.opts.Namespace).Get(e.ValueFrom.SecretKeyRef.Name); err == nil {
					val = string(s.Data[e.ValueFrom.SecretKeyRef.Key])
				}
			}
		} else {
			val = expandVars(val, m)
		}
		val = rewritePath(val, mounts)
		m[e.Name] = val
		env = append(env, e.Name+"="+val)
	}
	return env, m
}

type mount struct{ path, host string }

// mountMap lists the container's mounts, longest mount path first.
func (r *runner) mountMap(p *pod, c *corev1.Container) []mount {
	var ms []mount
	for _, vm := range c.VolumeMounts {
		host := filepath.Join(p.dir, "volumes", vm.Name)
		if vm.SubPath != "" {
			host = filepath.Join(host, vm.SubPath)
		}
		ms = append(ms, mount{path: strings.TrimRight(vm.MountPath, "/"), host: host})
	}
	sort.Slice(ms, func(i, j int) bool { return len(ms[i].path) > len(ms[j].path) })
	return ms
}

func rewritePath(s string, ms []mount) string {
	for _, m := range ms {
		if m.path == "" {
			continue
		}
		if s == m.path {
			return m.host
		}
		if strings.HasPrefix(s, m.path+"/") {
			return m.host + s[len(m.path):]
		}
	}
	return s
}

// rewriteArg rewrites a path argument, or the value of a --flag=value argument.
func rewriteArg(a string, ms []mount) string {
	if strings.HasPrefix(a, "-") {
		if name, val, ok := strings.Cut(a, "="); ok {
			return name + "=" + rewritePath(val, ms)
		}
		return a
	}
	return rewritePath(a, ms)
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expandVars expands $(VAR) as kubelet does for command, args and env values.
func expandVars(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := env[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

// flagValue returns the value of --name (or -name) in argv: "--name=v" or "--name v".
func flagValue(argv []string, name string) string {
	val := ""
	for i := 0; i < len(argv); i++ {
		a := strings.TrimLeft(argv[i], "-")
		if !strings.HasPrefix(argv[i], "-") {
			continue
		}
		if a == name && i+1 < len(argv) {
			val = argv[i+1]
			i++
		} else if strings.HasPrefix(a, name+"=") {
			val = a[len(name)+1:]
		}
	}
	return val
}

// dropFlags removes --name=v and --name v for every name.
func dropFlags(argv []string, names ...string) []string {
	var out []string
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		drop := false
		if strings.HasPrefix(a, "-") {
			bare := strings.TrimLeft(a, "-")
			for _, n := range names {
				if bare == n {
					drop = true
					i++ // its value
				} else if strings.HasPrefix(bare, n+"=") {
					drop = true
				}
			}
		}
		if !drop {
			out = append(out, a)
		}
	}
	return out
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// publish writes the pod's EndpointSlice: one ready FQDN endpoint 127.0.0.1 with one port per
// Service port, named as it and set to the real port its targetPort stands for.
func (r *runner) publish(p *pod, svc *corev1.Service) error {
	var ports []discoveryv1.EndpointPort
	for _, sp := range svc.Spec.Ports {
		var real int32
		var ok bool
		switch {
		case sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "":
			real, ok = p.portNames[sp.TargetPort.StrVal]
		case sp.TargetPort.IntVal != 0:
			real, ok = p.ports[sp.TargetPort.IntVal]
		default:
			real, ok = p.ports[sp.Port]
		}
		if !ok {
			real, ok = p.portNames[sp.Name]
		}
		if !ok {
			continue
		}
		ports = append(ports, discoveryv1.EndpointPort{Name: ptr.To(sp.Name), Port: ptr.To(real), Protocol: ptr.To(corev1.ProtocolTCP)})
	}
	if len(ports) == 0 {
		return fmt.Errorf("no Service port of %s maps to a container port", svc.Name)
	}
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      p.name,
			Namespace: r.k.opts.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   EndpointSliceManager,
			},
		},
		AddressType: discoveryv1.AddressTypeFQDN,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"127.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: r.k.opts.Namespace, Name: p.name},
		}},
		Ports: ports,
	}
	ctx, cancel := context.WithTimeout(r.k.ctx, 10*time.Second)
	defer cancel()
	slices := r.k.opts.Client.DiscoveryV1().EndpointSlices(r.k.opts.Namespace)
	_, err := slices.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *discoveryv1.EndpointSlice
		if cur, err = slices.Get(ctx, want.Name, metav1.GetOptions{}); err == nil {
			want.ResourceVersion = cur.ResourceVersion
			_, err = slices.Update(ctx, want, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.published, p.publishedFor = true, svc.ResourceVersion
	p.mu.Unlock()
	r.k.event("%s: endpoint slice published (%s)", p.name, portList(ports))
	return nil
}

func portList(ports []discoveryv1.EndpointPort) string {
	var s []string
	for _, p := range ports {
		s = append(s, fmt.Sprintf("%s=%d", *p.Name, *p.Port))
	}
	return strings.Join(s, ",")
}

func (r *runner) unpublish(p *pod) {
	if !p.isPublished() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.k.opts.Client.DiscoveryV1().EndpointSlices(r.k.opts.Namespace).Delete(ctx, p.name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		r.k.event("%s: deleting endpoint slice: %v", p.name, err)
		return
	}
	p.mu.Lock()
	p.published = false
	p.mu.Unlock()
	r.k.event("%s: endpoint slice deleted", p.name)
}

// stopPod removes p: its slice at once, then (in the background, after EndpointDrain) SIGTERM,
// and SIGKILL after StopGrace.
func (r *runner) stopPod(p *pod, why string) {
	r.unpublish(p)
	r.mu.Lock()
	for i, q := range r.pods {
		if q == p {
			r.pods = append(r.pods[:i:i], r.pods[i+1:]...)
			break
		}
	}
	r.mu.Unlock()
	p.mu.Lock()
	p.stopping = true
	p.ready = false
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	r.k.event("%s: stopping (%s)", p.name, why)
	if cmd == nil || done == nil {
		return
	}
	r.terminating.Add(1)
	go func() {
		defer r.terminating.Done()
		select {
		case <-done:
			return
		case <-time.After(r.k.opts.EndpointDrain):
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(r.k.opts.StopGrace):
			_ = cmd.Process.Kill()
			<-done
		}
		r.k.event("%s: pid %d stopped", p.name, cmd.Process.Pid)
	}()
}

func (r *runner) stopAll(why string) {
	r.mu.Lock()
	pods := append([]*pod(nil), r.pods...)
	r.mu.Unlock()
	for _, p := range pods {
		r.stopPod(p, why)
	}
}

// writeStatus writes the Deployment's status as its controller would from the pods.
func (r *runner) writeStatus(d *appsv1.Deployment, replicas, updated, ready, readyUpdated, desired int) {
	st := appsv1.DeploymentStatus{
		ObservedGeneration:  d.Generation,
		Replicas:            int32(replicas),
		UpdatedReplicas:     int32(updated),
		ReadyReplicas:       int32(ready),
		AvailableReplicas:   int32(ready),
		UnavailableReplicas: int32(max(desired-ready, 0)),
		Conditions:          d.Status.Conditions,
	}
	avail := corev1.ConditionFalse
	if readyUpdated >= desired {
		avail = corev1.ConditionTrue
	}
	setCondition(&st, appsv1.DeploymentAvailable, avail, "MinimumReplicasAvailable")
	prog := "NewReplicaSetAvailable"
	if updated != desired || readyUpdated < desired || replicas != desired {
		prog = "ReplicaSetUpdated"
	}
	setCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionTrue, prog)
	if statusEqual(d.Status, st) {
		return
	}
	nd := d.DeepCopy()
	nd.Status = st
	ctx, cancel := context.WithTimeout(r.k.ctx, 10*time.Second)
	defer cancel()
	if _, err := r.k.opts.Client.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, nd, metav1.UpdateOptions{}); err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && r.k.ctx.Err() == nil {
			r.k.event("%s: status: %v", r.name, err)
		}
		r.wake() // a conflict: the informer brings the new object, try again
		return
	}
}

func setCondition(st *appsv1.DeploymentStatus, typ appsv1.DeploymentConditionType, status corev1.ConditionStatus, reason string) {
	now := metav1.Now()
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type != typ {
			continue
		}
		if c.Status != status || c.Reason != reason {
			st.Conditions = append([]appsv1.DeploymentCondition(nil), st.Conditions...)
			c = &st.Conditions[i]
			if c.Status != status {
				c.LastTransitionTime = now
			}
			c.Status, c.Reason, c.LastUpdateTime = status, reason, now
		}
		return
	}
	st.Conditions = append(append([]appsv1.DeploymentCondition(nil), st.Conditions...), appsv1.DeploymentCondition{
		Type: typ, Status: status, Reason: reason, LastUpdateTime: now, LastTransitionTime: now,
	})
}

func statusEqual(a, b appsv1.DeploymentStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || a.Replicas != b.Replicas || a.UpdatedReplicas != b.UpdatedReplicas ||
		a.ReadyReplicas != b.ReadyReplicas || a.AvailableReplicas != b.AvailableReplicas ||
		a.UnavailableReplicas != b.UnavailableReplicas || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		if a.Conditions[i].Type != b.Conditions[i].Type || a.Conditions[i].Status != b.Conditions[i].Status ||
			a.Conditions[i].Reason != b.Conditions[i].Reason {
			return false
		}
	}
	return true
}

// templateHash identifies a pod template (what a ReplicaSet's pod-template-hash stands for).
func templateHash(t *corev1.PodTemplateSpec) string {
	data, _ := json.Marshal(t)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:16]
}

// freePort returns a free loopback port.
func freePort() (int32, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port), nil
}
