package capabilities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
)

// DefaultMaxCachedObjects is the default cap of one resource's cache.
const DefaultMaxCachedObjects = 10000

// DefaultCanITTL is how long a can_i answer is reused (Kubewarden: 5 s).
const DefaultCanITTL = 5 * time.Second

// KubeOptions configure the Kubernetes capability.
type KubeOptions struct {
	// Dynamic reads objects. Required.
	Dynamic dynamic.Interface
	// Mapper maps an apiVersion and kind to a resource and its scope. Required.
	Mapper meta.RESTMapper
	// Reviews creates a SubjectAccessReview (can_i); nil fails can_i.
	Reviews func(ctx context.Context, sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error)
	// MaxCachedObjects caps one resource's cache (0 = DefaultMaxCachedObjects).
	// A resource with more objects is answered by direct calls (logged once).
	// Negative: no caches, every get and list is a direct call.
	MaxCachedObjects int
	// CanITTL is how long a can_i answer is reused (0 = DefaultCanITTL).
	CanITTL time.Duration
	// RetryInterval is the wait before starting again a cache whose first
	// list failed (0 = 10 s).
	RetryInterval time.Duration
}

// Kubernetes answers kubernetes/* host calls from lazily started caches,
// falling back to direct calls. Make it with NewKubernetes or
// NewKubernetesForConfig; give it to Options.Kubernetes.
type Kubernetes struct {
	o      KubeOptions
	log    *slog.Logger
	m      *metrics
	canIs  *ttlCache
	failed string // every call fails with this text (no client)

	mu       sync.Mutex
	mappings map[Resource]*meta.RESTMapping
	caches   map[schema.GroupVersionResource]*resourceCache
	closed   bool
}

// nilKube answers when no client was configured, as Kubewarden does.
var nilKube = &Kubernetes{failed: "kube::Client was not initialized properly"}

// NewKubernetes makes the capability from clients (tests give fakes).
func NewKubernetes(o KubeOptions) (*Kubernetes, error) {
	if o.Dynamic == nil || o.Mapper == nil {
		return nil, errors.New("capabilities: KubeOptions.Dynamic and Mapper are required")
	}
	if o.MaxCachedObjects == 0 {
		o.MaxCachedObjects = DefaultMaxCachedObjects
	}
	if o.CanITTL <= 0 {
		o.CanITTL = DefaultCanITTL
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = 10 * time.Second
	}
	return &Kubernetes{
		o: o, log: slog.New(slog.DiscardHandler), m: newMetrics(),
		canIs:    newTTLCache(o.CanITTL, 10000, time.Now),
		mappings: map[Resource]*meta.RESTMapping{},
		caches:   map[schema.GroupVersionResource]*resourceCache{},
	}, nil
}

// NewKubernetesForConfig makes the capability for a cluster: a dynamic
// client, a discovery-backed RESTMapper (cached, refreshed on a miss) and
// SubjectAccessReviews. o's clients are ignored.
func NewKubernetesForConfig(cfg *rest.Config, o KubeOptions) (*Kubernetes, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second // bounds calls that take no context (discovery)
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "tollgate"
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes discovery client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	o.Dynamic = dyn
	o.Mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	o.Reviews = func(ctx context.Context, sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
		return cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	}
	return NewKubernetes(o)
}

func (k *Kubernetes) attach(m *metrics, log *slog.Logger) {
	k.m, k.log = m, log
}

// Close stops every cache.
func (k *Kubernetes) Close() {
	if k.failed != "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	for _, c := range k.caches {
		c.stopInformer()
	}
}

// mapping resolves apiVersion/kind, bounded by ctx (discovery takes no
// context); successes are kept.
func (k *Kubernetes) mapping(ctx context.Context, apiVersion, kind string) (*meta.RESTMapping, error) {
	key := Resource{apiVersion, kind}
	k.mu.Lock()
	m, ok := k.mappings[key]
	k.mu.Unlock()
	if ok {
		return m, nil
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || kind == "" {
		return nil, errorf("Cannot find resource %s/%s", apiVersion, kind)
	}
	type result struct {
		m   *meta.RESTMapping
		err error
	}
	ch := make(chan result, 1)
	go func() {
		m, err := k.o.Mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: kind}, gv.Version)
		ch <- result{m, err}
	}()
	select {
	case r := <-ch:
		if meta.IsNoMatchError(r.err) {
			return nil, errorf("Cannot find resource %s/%s", apiVersion, kind)
		}
		if r.err != nil {
			return nil, fmt.Errorf("cannot discover resource %s/%s: %w", apiVersion, kind, r.err)
		}
		k.mu.Lock()
		k.mappings[key] = r.m
		k.mu.Unlock()
		return r.m, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("cannot discover resource %s/%s: %w", apiVersion, kind, ctx.Err())
	}
}

func optDebug(s *string) string {
	if s == nil {
		return "None"
	}
	return "Some(" + strconv.Quote(*s) + ")"
}

func (k *Kubernetes) get(ctx context.Context, r *GetResourceRequest) ([]byte, error) {
	if k.failed != "" {
		return nil, errors.New(k.failed)
	}
	mp, err := k.mapping(ctx, r.APIVersion, r.Kind)
	if err != nil {
		return nil, err
	}
	ns := ""
	if mp.Scope.Name() == meta.RESTScopeNameNamespace {
		if r.Namespace == nil || *r.Namespace == "" {
			return nil, errorf("Resource %s/%s is namespaced, but no namespace was provided", r.APIVersion, r.Kind)
		}
		ns = *r.Namespace
	}
	const capName = "kubernetes/get_resource"
	var obj map[string]any
	mask := newFieldMask(masks(r.FieldMasks))
	if r.DisableCache {
		k.m.cache(ctx, capName, "bypass")
	} else if rc := k.cacheFor(mp, Resource{r.APIVersion, r.Kind}); rc != nil {
		if st := rc.store(); st != nil {
			key := r.Name
			if ns != "" {
				key = ns + "/" + r.Name
			}
			if o, ok, _ := st.GetByKey(key); ok {
				if u, ok := o.(*unstructured.Unstructured); ok {
					k.m.cache(ctx, capName, "hit")
					return rc.encoded(key, u, mask)
				}
			}
		}
	}
	if obj == nil {
		if !r.DisableCache {
			k.m.cache(ctx, capName, "miss")
		}
		u, err := k.o.Dynamic.Resource(mp.Resource).Namespace(ns).Get(ctx, r.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, errorf("Cannot find %s/%s named '%s' inside of namespace '%s'", r.APIVersion, r.Kind, r.Name, optDebug(r.Namespace))
		}
		if err != nil {
			return nil, err
		}
		stripObject(u)
		obj = u.Object
	}
	return json.Marshal(mask.apply(obj))
}

func masks(p *[]string) []string {
	if p == nil {
		return nil
	}
	return *p
}

func (k *Kubernetes) listByNamespace(ctx context.Context, r *ListByNamespaceRequest) ([]byte, error) {
	if k.failed != "" {
		return nil, errors.New(k.failed)
	}
	mp, err := k.mapping(ctx, r.APIVersion, r.Kind)
	if err != nil {
		return nil, err
	}
	if mp.Scope.Name() != meta.RESTScopeNameNamespace {
		return nil, errorf("resource %s/%s is cluster wide. Cannot search for it inside of a namespace", r.APIVersion, r.Kind)
	}
	return k.list(ctx, mp, "kubernetes/list_resources_by_namespace", r.APIVersion, r.Kind, r.Namespace,
		r.LabelSelector, r.FieldSelector, r.DisableCache, masks(r.FieldMasks))
}

func (k *Kubernetes) listAll(ctx context.Context, r *ListAllRequest) ([]byte, error) {
	if k.failed != "" {
		return nil, errors.New(k.failed)
	}
	mp, err := k.mapping(ctx, r.APIVersion, r.Kind)
	if err != nil {
		return nil, err
	}
	return k.list(ctx, mp, "kubernetes/list_resources_all", r.APIVersion, r.Kind, "",
		r.LabelSelector, r.FieldSelector, r.DisableCache, masks(r.FieldMasks))
}

// pluralName answers KubernetesGetResourcePluralName: the resource's plural
// name (v1/Service: services) as a JSON string, from discovery.
func (k *Kubernetes) pluralName(ctx context.Context, r *PluralNameRequest) ([]byte, error) {
	if k.failed != "" {
		return nil, errors.New(k.failed)
	}
	mp, err := k.mapping(ctx, r.APIVersion, r.Kind)
	if err != nil {
		return nil, err
	}
	return json.Marshal(mp.Resource.Resource)
}

// listVersion is a number that changes whenever an object of the resource
// is added, updated or deleted, read from its synced cache; ok is false
// while the resource has no synced cache (not mapped yet, starting, over
// its cap, failed, caches off): lists then go to the apiserver.
func (k *Kubernetes) listVersion(r Resource) (v uint64, ok bool) {
	if k.failed != "" || k.o.MaxCachedObjects < 0 {
		return 0, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	mp, ok := k.mappings[r]
	if !ok {
		return 0, false
	}
	rc, ok := k.caches[mp.Resource]
	if !ok || rc.state.Load() != cacheSynced {
		return 0, false
	}
	return rc.changes.Load(), true
}

// cacheableFields are the field selector keys a cache answers.
var cacheableFields = map[string]bool{"metadata.name": true, "metadata.namespace": true}

func (k *Kubernetes) list(ctx context.Context, mp *meta.RESTMapping, capName, apiVersion, kind, ns string,
	labelSel, fieldSel *string, disableCache bool, fm []string) ([]byte, error) {
	ls, fs := labels.Everything(), fields.Everything()
	lsText, fsText := "", ""
	if labelSel != nil && *labelSel != "" {
		var err error
		if ls, err = labels.Parse(*labelSel); err != nil {
			return nil, fmt.Errorf("invalid label_selector %q: %w", *labelSel, err)
		}
		lsText = *labelSel
	}
	cacheable := !disableCache
	if fieldSel != nil && *fieldSel != "" {
		var err error
		if fs, err = fields.ParseSelector(*fieldSel); err != nil {
			return nil, fmt.Errorf("invalid field_selector %q: %w", *fieldSel, err)
		}
		fsText = *fieldSel
		for _, r := range fs.Requirements() {
			if !cacheableFields[r.Field] {
				cacheable = false
			}
		}
	}
	mask := newFieldMask(fm)
	var items []map[string]any
	var encodedItems []listItem // from a cache
	answered := false
	if !cacheable {
		k.m.cache(ctx, capName, "bypass")
	} else if rc := k.cacheFor(mp, Resource{apiVersion, kind}); rc != nil {
		if st := rc.store(); st != nil {
			var objs []any
			if ns == "" {
				objs = st.List()
			} else {
				objs, _ = st.ByIndex(cache.NamespaceIndex, ns)
			}
			for _, o := range objs {
				u, ok := o.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				if !ls.Matches(labels.Set(u.GetLabels())) {
					continue
				}
				if !fs.Matches(fields.Set{"metadata.name": u.GetName(), "metadata.namespace": u.GetNamespace()}) {
					continue
				}
				key := u.GetName()
				if ns := u.GetNamespace(); ns != "" {
					key = ns + "/" + key
				}
				b, err := rc.encoded(key, u, mask)
				if err != nil {
					return nil, err
				}
				encodedItems = append(encodedItems, listItem{u.GetNamespace() + "/" + u.GetName(), b})
			}
			answered = true
			k.m.cache(ctx, capName, "hit")
		}
	}
	if !answered {
		if cacheable {
			k.m.cache(ctx, capName, "miss")
		}
		l, err := k.o.Dynamic.Resource(mp.Resource).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: lsText, FieldSelector: fsText})
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			stripObject(&l.Items[i])
			items = append(items, l.Items[i].Object)
		}
	}
	for _, it := range items {
		b, err := json.Marshal(mask.apply(it))
		if err != nil {
			return nil, err
		}
		encodedItems = append(encodedItems, listItem{nsName(it), b})
	}
	sort.Slice(encodedItems, func(i, j int) bool { return encodedItems[i].key < encodedItems[j].key })
	size := 64
	for _, it := range encodedItems {
		size += len(it.b) + 1
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	buf.WriteString(`{"apiVersion":`)
	writeJSON(buf, apiVersion)
	buf.WriteString(`,"kind":`)
	writeJSON(buf, kind+"List")
	buf.WriteString(`,"metadata":{},"items":[`)
	for i, it := range encodedItems {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(it.b)
	}
	buf.WriteString("]}")
	return buf.Bytes(), nil
}

// listItem is one encoded item of a list answer and its namespace/name.
type listItem struct {
	key string
	b   []byte
}

func writeJSON(buf *bytes.Buffer, v any) {
	b, _ := json.Marshal(v)
	buf.Write(b)
}

func nsName(o map[string]any) string {
	md, _ := o["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	n, _ := md["name"].(string)
	return ns + "/" + n
}

func (k *Kubernetes) canI(ctx context.Context, r *CanIRequest) ([]byte, error) {
	if k.failed != "" || k.o.Reviews == nil {
		return nil, errors.New("kube::Client was not initialized properly")
	}
	key, _ := json.Marshal(r.Request)
	if !r.DisableCache {
		if b, ok := k.canIs.get(string(key)); ok {
			k.m.cache(ctx, "kubernetes/can_i", "hit")
			return b, nil
		}
		k.m.cache(ctx, "kubernetes/can_i", "miss")
	} else {
		k.m.cache(ctx, "kubernetes/can_i", "bypass")
	}
	ra := r.Request.ResourceAttributes
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: r.Request.User,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: str(ra.Namespace), Verb: ra.Verb, Group: str(ra.Group), Version: str(ra.Version),
			Resource: ra.Resource, Subresource: str(ra.Subresource), Name: str(ra.Name),
		},
	}}
	if r.Request.Groups != nil {
		sar.Spec.Groups = *r.Request.Groups
	}
	res, err := k.o.Reviews(ctx, sar)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(res.Status)
	if err != nil {
		return nil, err
	}
	k.canIs.put(string(key), b)
	return b, nil
}

// resourceCache is one resource's informer, started on first use. Until it
// has synced, and after it gave up at its cap, calls go to the apiserver.
type resourceCache struct {
	k     *Kubernetes
	res   Resource
	gvr   schema.GroupVersionResource
	state atomic.Int32
	// retryAt is when a failed start may be tried again (unix nanoseconds).
	retryAt atomic.Int64
	count   atomic.Int64
	// changes counts the informer's add, update and delete events (handlers
	// run after the store changed): Cluster.Version.
	changes atomic.Uint64
	inf     atomic.Pointer[cache.SharedIndexInformer]
	stopMu  sync.Mutex
	stop    chan struct{}
	// enc keeps each object's JSON by key, for its resourceVersion: a cached
	// answer without field_masks is encoded once per object version.
	enc sync.Map // key -> encodedObject
}

// encodedObject is an object version's JSON under each field-mask set asked
// for (mask key "" is the whole object). It is never modified once stored:
// a new encoding stores a new encodedObject.
type encodedObject struct {
	rv       string
	variants []encodedVariant
}

type encodedVariant struct {
	mask string
	b    []byte
}

// maxMaskVariants bounds the encodings kept per object: policies ask a kind
// with a few fixed mask sets; a caller that varies them gets its answers
// encoded afresh rather than growing the cache.
const maxMaskVariants = 4

// encoded is u's JSON under mask (nil: whole), encoded at most once per
// resourceVersion and mask set. The bytes are shared: callers must not
// modify them.
func (c *resourceCache) encoded(key string, u *unstructured.Unstructured, mask *fieldMask) ([]byte, error) {
	rv := u.GetResourceVersion()
	mk := ""
	if mask != nil {
		mk = mask.key
	}
	var prev []encodedVariant
	if e, ok := c.enc.Load(key); ok && rv != "" && e.(encodedObject).rv == rv {
		prev = e.(encodedObject).variants
		for _, v := range prev {
			if v.mask == mk {
				return v.b, nil
			}
		}
	}
	b, err := json.Marshal(mask.apply(u.Object))
	if err != nil {
		return nil, err
	}
	if rv != "" && c.state.Load() == cacheSynced && len(prev) < maxMaskVariants {
		variants := make([]encodedVariant, len(prev), len(prev)+1)
		copy(variants, prev)
		c.enc.Store(key, encodedObject{rv, append(variants, encodedVariant{mk, b})})
	}
	return b, nil
}

const (
	cacheStarting int32 = iota
	cacheSynced
	cacheOverCap
	cacheFailed
)

// cacheFor returns the resource's cache, starting it on first use; nil when
// caches are off.
func (k *Kubernetes) cacheFor(mp *meta.RESTMapping, res Resource) *resourceCache {
	if k.o.MaxCachedObjects < 0 {
		return nil
	}
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil
	}
	rc, ok := k.caches[mp.Resource]
	if !ok {
		rc = &resourceCache{k: k, res: res, gvr: mp.Resource}
		k.caches[mp.Resource] = rc
		k.mu.Unlock()
		go rc.start()
		return rc
	}
	k.mu.Unlock()
	if rc.state.Load() == cacheFailed && time.Now().UnixNano() > rc.retryAt.Load() &&
		rc.state.CompareAndSwap(cacheFailed, cacheStarting) {
		go rc.start()
	}
	return rc
}

// store is the synced cache's indexer, nil while it is not usable.
func (c *resourceCache) store() cache.Indexer {
	if c.state.Load() != cacheSynced {
		return nil
	}
	inf := c.inf.Load()
	if inf == nil {
		return nil
	}
	return (*inf).GetIndexer()
}

func (c *resourceCache) start() {
	k := c.k
	max := int64(k.o.MaxCachedObjects)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	l, err := k.o.Dynamic.Resource(c.gvr).List(ctx, metav1.ListOptions{Limit: 1})
	cancel()
	if err != nil {
		k.log.Warn("kubernetes cache: cannot list the resource; answering by direct calls until a retry succeeds",
			"resource", c.res.APIVersion+"/"+c.res.Kind, "error", err)
		c.retryAt.Store(time.Now().Add(k.o.RetryInterval).UnixNano())
		c.state.Store(cacheFailed)
		return
	}
	n := int64(len(l.Items))
	if rem := l.GetRemainingItemCount(); rem != nil {
		n += *rem
	}
	if n > max {
		c.overCap(n)
		return
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(k.o.Dynamic, c.gvr, metav1.NamespaceAll, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil).Informer()
	_ = inf.SetTransform(func(o any) (any, error) {
		if u, ok := o.(*unstructured.Unstructured); ok {
			stripObject(u)
		}
		return o, nil
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) {
			c.changes.Add(1)
			if c.count.Add(1) > max && c.state.Load() != cacheOverCap {
				go c.overCap(c.count.Load())
			}
		},
		UpdateFunc: func(any, any) { c.changes.Add(1) },
		DeleteFunc: func(o any) {
			c.changes.Add(1)
			c.count.Add(-1)
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
				c.enc.Delete(key)
			}
		},
	})
	stop := make(chan struct{})
	c.stopMu.Lock()
	k.mu.Lock()
	closed := k.closed
	k.mu.Unlock()
	if closed {
		c.stopMu.Unlock()
		return
	}
	c.stop = stop
	c.inf.Store(&inf)
	c.stopMu.Unlock()
	go inf.Run(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		return
	}
	if c.state.CompareAndSwap(cacheStarting, cacheSynced) {
		k.log.Info("kubernetes cache synced", "resource", c.res.APIVersion+"/"+c.res.Kind, "objects", c.count.Load())
	}
}

// overCap gives up caching the resource (logged once).
func (c *resourceCache) overCap(n int64) {
	if c.state.Swap(cacheOverCap) == cacheOverCap {
		return
	}
	c.stopInformer()
	c.enc.Clear()
	c.k.log.Warn("kubernetes cache: the resource has more objects than the cache cap; answering by direct calls",
		"resource", c.res.APIVersion+"/"+c.res.Kind, "objects", n, "cap", c.k.o.MaxCachedObjects)
}

func (c *resourceCache) stopInformer() {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	if c.stop != nil {
		close(c.stop)
		c.stop = nil
	}
	c.inf.Store(nil)
}

func (k *Kubernetes) updateSizes() {
	if k.failed != "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.caches {
		n := float64(c.count.Load())
		if c.state.Load() == cacheOverCap {
			n = -1
		}
		k.m.cacheSize.WithLabelValues(c.res.APIVersion + "/" + c.res.Kind).Set(n)
	}
}

// stripObject drops what policies never need and caches should not hold:
// managedFields and kubectl's last-applied-configuration (as Kubewarden's
// reflectors do).
func stripObject(u *unstructured.Unstructured) {
	md, ok := u.Object["metadata"].(map[string]any)
	if !ok {
		return
	}
	delete(md, "managedFields")
	if a, ok := md["annotations"].(map[string]any); ok {
		delete(a, "kubectl.kubernetes.io/last-applied-configuration")
		if len(a) == 0 {
			delete(md, "annotations")
		}
	}
}
