package cluster

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// EndpointSliceManager is the endpointslice.kubernetes.io/managed-by value of the slices that
// PublishEndpoints writes.
const EndpointSliceManager = "e2e.tollgate.dev"

// PublishEndpoints points a Service at listeners on 127.0.0.1, standing in for the kubelet and the
// endpoint controllers that this cluster lacks. It creates or updates the EndpointSlice
// "<service>-e2e" in namespace: label kubernetes.io/service-name=service, addressType FQDN (IPv4
// slices refuse loopback addresses), the one ready address 127.0.0.1, and one port per entry of
// ports, named as the Service's port (a name mismatch gives "no endpoints available") with the
// listener's real port (the Service's targetPort plays no part).
//
// kube-apiserver dials webhooks through this slice (--enable-aggregator-routing=true). It reuses
// connections: a changed slice matters for new connections only, e.g. once the old listener dies.
func (c *Cluster) PublishEndpoints(ctx context.Context, namespace, service string, ports map[string]int32) error {
	if len(ports) == 0 {
		return fmt.Errorf("cluster: endpoints for %s/%s: no ports", namespace, service)
	}
	names := make([]string, 0, len(ports))
	for name := range ports {
		names = append(names, name)
	}
	sort.Strings(names)
	slicePorts := make([]discoveryv1.EndpointPort, 0, len(names))
	for _, name := range names {
		slicePorts = append(slicePorts, discoveryv1.EndpointPort{
			Name:     ptr.To(name),
			Port:     ptr.To(ports[name]),
			Protocol: ptr.To(corev1.ProtocolTCP),
		})
	}
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      service + "-e2e",
			Namespace: namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: service,
				discoveryv1.LabelManagedBy:   EndpointSliceManager,
			},
		},
		AddressType: discoveryv1.AddressTypeFQDN,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"127.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: slicePorts,
	}
	slices := c.Client.DiscoveryV1().EndpointSlices(namespace)
	_, err := slices.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *discoveryv1.EndpointSlice
		if cur, err = slices.Get(ctx, want.Name, metav1.GetOptions{}); err == nil {
			want.ResourceVersion = cur.ResourceVersion
			_, err = slices.Update(ctx, want, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("cluster: endpoints for %s/%s: %w", namespace, service, err)
	}
	return nil
}
