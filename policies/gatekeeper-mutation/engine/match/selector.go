package match

import (
	"errors"
	"sort"
	"strconv"
	"strings"
)

// LabelSelector is a metav1.LabelSelector. It is validated when a request
// is matched against it, not when the mutator is created (as in Gatekeeper).
type LabelSelector struct {
	MatchLabels      map[string]string
	MatchExpressions []Requirement
}

// Requirement is one matchExpressions entry.
type Requirement struct {
	Key      string
	Operator string
	Values   []string
}

type selector struct {
	reqs  []Requirement // Operator: Equals, In, NotIn, Exists, DoesNotExist
	every bool
}

// compile mirrors metav1.LabelSelectorAsSelector and labels.NewRequirement.
func (ls *LabelSelector) compile() (*selector, error) {
	if len(ls.MatchLabels)+len(ls.MatchExpressions) == 0 {
		return &selector{every: true}, nil
	}
	s := &selector{}
	keys := make([]string, 0, len(ls.MatchLabels))
	for k := range ls.MatchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r := Requirement{Key: k, Operator: "Equals", Values: []string{ls.MatchLabels[k]}}
		if err := validateRequirement(r); err != nil {
			return nil, err
		}
		s.reqs = append(s.reqs, r)
	}
	for _, e := range ls.MatchExpressions {
		switch e.Operator {
		case "In", "NotIn", "Exists", "DoesNotExist":
		default:
			return nil, errors.New(strconv.Quote(e.Operator) + " is not a valid label selector operator")
		}
		if err := validateRequirement(e); err != nil {
			return nil, err
		}
		s.reqs = append(s.reqs, e)
	}
	return s, nil
}

func validateRequirement(r Requirement) error {
	var errs []string
	if msgs := qualifiedNameErrors(r.Key); len(msgs) > 0 {
		errs = append(errs, "key: Invalid value: "+strconv.Quote(r.Key)+": "+strings.Join(msgs, "; "))
	}
	switch r.Operator {
	case "In", "NotIn":
		if len(r.Values) == 0 {
			errs = append(errs, "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty")
		}
	case "Equals":
		if len(r.Values) != 1 {
			errs = append(errs, "values: Invalid value: exact-match compatibility requires one single value")
		}
	case "Exists", "DoesNotExist":
		if len(r.Values) != 0 {
			errs = append(errs, "values: Invalid value: values set must be empty for exists and does not exist")
		}
	}
	for i, v := range r.Values {
		if msgs := labelValueErrors(v); len(msgs) > 0 {
			errs = append(errs, "values["+strconv.Itoa(i)+"]: Invalid value: "+strconv.Quote(v)+": "+strings.Join(msgs, "; "))
		}
	}
	if len(errs) == 1 {
		return errors.New(errs[0])
	}
	if len(errs) > 1 {
		return errors.New("[" + strings.Join(errs, ", ") + "]")
	}
	return nil
}

func (s *selector) matches(labels map[string]string) bool {
	if s.every {
		return true
	}
	for _, r := range s.reqs {
		v, has := labels[r.Key]
		switch r.Operator {
		case "Equals":
			if !has || v != r.Values[0] {
				return false
			}
		case "In":
			if !has || !contains(r.Values, v) {
				return false
			}
		case "NotIn":
			if has && contains(r.Values, v) {
				return false
			}
		case "Exists":
			if !has {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// qualifiedName: ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]
func isQualifiedNamePart(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// IsDNS1123Subdomain validates a lowercase RFC 1123 subdomain.
func IsDNS1123Subdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(label)-1
			if !ok {
				return false
			}
		}
	}
	return true
}

const qualifiedNameFmt = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"

func qualifiedNameErrors(v string) []string {
	var errs []string
	parts := strings.Split(v, "/")
	var name string
	switch len(parts) {
	case 1:
		name = parts[0]
	case 2:
		prefix := parts[0]
		name = parts[1]
		if prefix == "" {
			errs = append(errs, "prefix part must be non-empty")
		} else if !IsDNS1123Subdomain(prefix) {
			errs = append(errs, "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")
		}
	default:
		return append(errs, "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")
	}
	switch {
	case len(name) == 0:
		errs = append(errs, "name part must be non-empty")
	case len(name) > 63:
		errs = append(errs, "name part must be no more than 63 bytes")
	}
	if len(name) > 0 && !isQualifiedNamePart(name) {
		errs = append(errs, qualifiedNameFmt)
	}
	return errs
}

func labelValueErrors(v string) []string {
	var errs []string
	if len(v) > 63 {
		errs = append(errs, "must be no more than 63 bytes")
	}
	if v != "" && !isQualifiedNamePart(v) {
		errs = append(errs, "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
	}
	return errs
}
