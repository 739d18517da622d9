package main

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/tollgate-dev/tollgate/sdk/capabilities"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// ingress is the part of an Ingress the policy reads.
type ingress struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Rules []struct {
			Host string `json:"host"`
		} `json:"rules"`
	} `json:"spec"`
}

// listIngresses is the host call: every Ingress of the cluster, pruned to the hosts (apiVersion,
// kind and metadata always stay).
var listIngresses = capabilities.ListAllResourcesRequest{
	APIVersion: "networking.k8s.io/v1",
	Kind:       "Ingress",
	FieldMasks: []string{"spec.rules.host"},
}

func validate(payload []byte) ([]byte, error) {
	var vr struct {
		Request  protocol.KubernetesAdmissionRequest `json:"request"`
		Settings json.RawMessage                     `json:"settings"`
	}
	if err := json.Unmarshal(payload, &vr); err != nil {
		return reject("cannot decode the validation request: "+err.Error(), 400)
	}
	settings, err := parseSettings(vr.Settings)
	if err != nil {
		return reject("settings: "+err.Error(), 400)
	}
	var obj ingress
	if err := json.Unmarshal(vr.Request.Object, &obj); err != nil {
		return reject("the request's object is not an Ingress: "+err.Error(), 400)
	}
	if obj.Metadata.Namespace == "" {
		obj.Metadata.Namespace = vr.Request.Namespace
	}
	if obj.Metadata.Name == "" {
		obj.Metadata.Name = vr.Request.Name
	}
	hosts := map[string]bool{}
	for _, r := range obj.Spec.Rules {
		if r.Host != "" {
			hosts[r.Host] = true
		}
	}
	if len(hosts) == 0 {
		return accept()
	}

	list, err := host.ListAllResources(listIngresses)
	if err != nil {
		return reject("cannot list the cluster's Ingresses: "+err.Error(), 500)
	}
	var conflicts []string
	for _, item := range list.Items {
		var other ingress
		if err := json.Unmarshal(item, &other); err != nil {
			return reject("the host's list of Ingresses holds an item that is not an Ingress: "+err.Error(), 500)
		}
		if other.Metadata.Namespace == obj.Metadata.Namespace {
			if other.Metadata.Name == obj.Metadata.Name || settings.AllowSameNamespace {
				continue
			}
		}
		seen := map[string]bool{}
		for _, r := range other.Spec.Rules {
			if hosts[r.Host] && !seen[r.Host] {
				seen[r.Host] = true
				conflicts = append(conflicts, `host "`+r.Host+`" is already used by Ingress `+other.Metadata.Namespace+"/"+other.Metadata.Name)
			}
		}
	}
	if len(conflicts) > 0 {
		sort.Strings(conflicts)
		return reject("Ingress "+obj.Metadata.Namespace+"/"+obj.Metadata.Name+": "+strings.Join(conflicts, "; "), 409)
	}
	return accept()
}

func accept() ([]byte, error) {
	return json.Marshal(protocol.ValidationResponse{Accepted: true})
}

func reject(msg string, code uint16) ([]byte, error) {
	return json.Marshal(protocol.ValidationResponse{Accepted: false, Message: &msg, Code: &code})
}
