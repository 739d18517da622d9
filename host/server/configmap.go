package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// configMapResync re-delivers the cached ConfigMap (an unchanged content reloads nothing); the
// reflector relists on its own whenever its watch ends.
const configMapResync = 5 * time.Minute

// ConfigMapSource is an APISource: it lists and watches the one ConfigMap ns/name (field
// selector on its name, so that a Role limited to that name by resourceNames allows it) and
// delivers its key (policies.yml). The reflector retries failed lists and watches with backoff;
// each failure goes to sink.WatchError. A deleted ConfigMap, or one without the key, delivers
// nothing: the last content keeps serving.
func ConfigMapSource(cs kubernetes.Interface, ns, name, key string, logger *slog.Logger) APISource {
	return func(ctx context.Context, sink APISink) {
		lw := cache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", ns, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		})
		inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, configMapResync, cache.Indexers{})
		_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			if errors.Is(err, context.Canceled) || ctx.Err() != nil {
				return
			}
			sink.WatchError(err)
		})
		deliver := func(obj any) {
			cm, ok := obj.(*corev1.ConfigMap)
			if !ok || cm.Name != name {
				return
			}
			v, ok := cm.Data[key]
			if !ok {
				logger.Warn("the ConfigMap has no " + key + "; the last content keeps serving")
				return
			}
			sink.Update([]byte(v))
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    deliver,
			UpdateFunc: func(_, obj any) { deliver(obj) },
			DeleteFunc: func(any) { logger.Warn("the ConfigMap was deleted; the last content keeps serving") },
		})
		inf.RunWithContext(ctx)
	}
}
