package main

import (
	"errors"
	"testing"
)

func TestValidate(t *testing.T) {
	hostCall = func(binding, namespace, operation string, payload []byte) ([]byte, error) {
		if binding != "kubewarden" || namespace != "kubernetes" || operation != "get_resource" {
			return nil, errors.New("unexpected host call")
		}
		switch string(payload) {
		case `{"api_version":"v1","kind":"Namespace","name":"team-a","disable_cache":false}`:
			return []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a","labels":{"cost-center":"cc-1"}}}`), nil
		case `{"api_version":"v1","kind":"Namespace","name":"bare","disable_cache":false}`:
			return []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"bare"}}`), nil
		}
		return nil, errors.New("Callback evaluation failure: Cannot find v1/Namespace named 'x' inside of namespace 'None'")
	}
	tests := []struct{ ns, want string }{
		{"team-a", `{"accepted":true}`},
		{"", `{"accepted":true}`},
		{"bare", `{"accepted":false,"code":403,"message":"namespace bare has no label cost-center"}`},
		{"gone", `{"accepted":false,"code":403,"message":"cannot read namespace gone: Callback evaluation failure: Cannot find v1/Namespace named 'x' inside of namespace 'None'"}`},
	}
	for _, tt := range tests {
		out, err := validate([]byte(`{"request":{"uid":"1","namespace":"` + tt.ns + `"},"settings":{"label":"cost-center"}}`))
		if err != nil || string(out) != tt.want {
			t.Errorf("%q: got %s, %v; want %s", tt.ns, out, err, tt.want)
		}
	}
}

func TestValidateSettings(t *testing.T) {
	for in, want := range map[string]string{
		`{"label":"x"}`: `{"valid":true}`,
		`{}`:            `{"message":"settings: label is required","valid":false}`,
	} {
		out, _ := validateSettings([]byte(in))
		if string(out) != want {
			t.Errorf("%s: got %s, want %s", in, out, want)
		}
	}
}
