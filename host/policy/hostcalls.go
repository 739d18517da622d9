package policy

import (
	"context"
	"fmt"
)

// handleHostCall answers the host calls a policy makes: logging is always
// allowed; everything else goes to Spec.HostCalls or gets a clear error.
func (p *Policy) handleHostCall(ctx context.Context, binding, namespace, operation string, payload []byte) ([]byte, error) {
	if binding == "kubewarden" && namespace == "tracing" && operation == "log" {
		p.logGuest(ctx, payload)
		return nil, nil
	}
	if p.hostCall != nil {
		return p.hostCall(ctx, binding, namespace, operation, payload)
	}
	return nil, fmt.Errorf("host capability %s/%s/%s is not available to policy %s", binding, namespace, operation, p.id)
}
