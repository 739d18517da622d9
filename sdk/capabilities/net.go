package capabilities

import "encoding/json"

// LookupHost returns the IP addresses of host, resolved by the host's
// resolver (net/v1/dns_lookup_host).
func (h Host) LookupHost(host string) ([]string, error) {
	payload, err := json.Marshal(host)
	if err != nil {
		return nil, err
	}
	raw, err := h.call("net", "v1/dns_lookup_host", payload)
	if err != nil {
		return nil, err
	}
	var answer struct {
		IPs []string `json:"ips"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		return nil, decodeError("net", "v1/dns_lookup_host", err)
	}
	return answer.IPs, nil
}
