package jsonengine

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/decls"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"k8s.io/apimachinery/pkg/api/validate/content"
	apiservercel "k8s.io/apiserver/pkg/cel"
)

// The Kubernetes format library (k8s.io/apiserver/pkg/cel/library,
// format.go), declared with the same names, overload ids, types and values
// (apiservercel.Format, which the library cost estimator knows), and
// validating with the same functions and messages. k8s.io/apiserver's own
// cannot be built by TinyGo: its validators come from
// apimachinery/pkg/util/validation (which imports k8s.io/utils/net, and so
// package net) and kube-openapi's strfmt (net/mail); see
// scripts/tinygo-patches, "nonet". The names validators below are
// apimachinery's (util/validation and api/validation, generic.go: its own
// DNS checks, which say "characters" where api/validate/content says
// "bytes"; qualifiedName and labelValue are content's, which util/validation
// re-exports), the CRD formats strfmt's. TestFormatLibrary compares every
// validator with the apiserver's on a table of strings.

func formatLibraries() []cel.EnvOption { return []cel.EnvOption{cel.Lib(formatLib{})} }

type formatLib struct{}

func (formatLib) LibraryName() string { return "kubernetes.format" }

func (formatLib) CompileOptions() []cel.EnvOption {
	opts := []cel.EnvOption{
		cel.Function("validate",
			cel.MemberOverload("format-validate", []*cel.Type{apiservercel.FormatType, cel.StringType}, cel.OptionalType(cel.ListType(cel.StringType)),
				cel.BinaryBinding(formatValidate))),
		cel.Function("format.named",
			cel.Overload("format-named", []*cel.Type{cel.StringType}, cel.OptionalType(apiservercel.FormatType),
				cel.UnaryBinding(func(name ref.Val) ref.Val {
					s, ok := name.Value().(string)
					if !ok {
						return types.MaybeNoSuchOverloadErr(name)
					}
					f, ok := constantFormats[s]
					if !ok {
						return types.OptionalNone
					}
					return types.OptionalOf(f)
				}))),
	}
	for name, f := range constantFormats {
		f := f
		fn := "format." + name
		opts = append(opts, cel.Function(fn, cel.Overload(fn, []*cel.Type{}, apiservercel.FormatType, zeroArgumentBinding(func() ref.Val { return f }))))
	}
	return opts
}

func (formatLib) ProgramOptions() []cel.ProgramOption { return []cel.ProgramOption{} }

// zeroArgumentBinding is the library's ZeroArgumentFunctionBinding.
func zeroArgumentBinding(binding func() ref.Val) decls.OverloadOpt {
	return func(o *decls.OverloadDecl) (*decls.OverloadDecl, error) {
		wrapped, err := decls.FunctionBinding(func(values ...ref.Val) ref.Val { return binding() })(o)
		if err != nil {
			return nil, err
		}
		if len(wrapped.ArgTypes()) != 0 {
			return nil, fmt.Errorf("function binding must have 0 arguments")
		}
		return o, nil
	}
}

func formatValidate(arg1, arg2 ref.Val) ref.Val {
	f, ok := arg1.Value().(apiservercel.Format)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg1)
	}
	s, ok := arg2.Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg2)
	}
	res := f.ValidateFunc(s)
	if len(res) == 0 {
		return types.OptionalNone
	}
	return types.OptionalOf(types.NewStringList(types.DefaultTypeAdapter, res))
}

// The regex sizes of the library's cost estimates.
const (
	base64Length    = 84   // govalidator's base64 regex
	urlLength       = 1103 // govalidator's URL regex
	uuidPattern     = `(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$`
	dateTimePattern = `^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$`
	base64Pattern   = "^(?:[A-Za-z0-9+\\/]{4})*(?:[A-Za-z0-9+\\/]{2}==|[A-Za-z0-9+\\/]{3}=|[A-Za-z0-9+\\/]{4})$"
)

var constantFormats = map[string]apiservercel.Format{
	"dns1123Label":           {Name: "DNS1123Label", ValidateFunc: func(s string) []string { return isDNS1123Label(s) }, MaxRegexSize: 30},
	"dns1123Subdomain":       {Name: "DNS1123Subdomain", ValidateFunc: func(s string) []string { return isDNS1123Subdomain(s) }, MaxRegexSize: 60},
	"dns1035Label":           {Name: "DNS1035Label", ValidateFunc: func(s string) []string { return isDNS1035Label(s) }, MaxRegexSize: 30},
	"qualifiedName":          {Name: "QualifiedName", ValidateFunc: content.IsLabelKey, MaxRegexSize: 60},
	"dns1123LabelPrefix":     {Name: "DNS1123LabelPrefix", ValidateFunc: func(s string) []string { return isDNS1123Label(maskTrailingDash(s)) }, MaxRegexSize: 30},
	"dns1123SubdomainPrefix": {Name: "DNS1123SubdomainPrefix", ValidateFunc: func(s string) []string { return isDNS1123Subdomain(maskTrailingDash(s)) }, MaxRegexSize: 60},
	"dns1035LabelPrefix":     {Name: "DNS1035LabelPrefix", ValidateFunc: func(s string) []string { return isDNS1035Label(maskTrailingDash(s)) }, MaxRegexSize: 30},
	"labelValue":             {Name: "LabelValue", ValidateFunc: content.IsLabelValue, MaxRegexSize: 40},
	"uri": {Name: "URI", ValidateFunc: func(s string) []string {
		if _, err := url.ParseRequestURI(s); err != nil {
			return []string{err.Error()}
		}
		return nil
	}, MaxRegexSize: urlLength},
	"uuid": {Name: "uuid", ValidateFunc: func(s string) []string {
		if !uuidRegexp.MatchString(s) {
			return []string{"does not match the UUID format"}
		}
		return nil
	}, MaxRegexSize: len(uuidPattern)},
	"byte": {Name: "byte", ValidateFunc: func(s string) []string {
		if !base64Regexp.MatchString(s) {
			return []string{"invalid base64"}
		}
		return nil
	}, MaxRegexSize: base64Length},
	"date": {Name: "date", ValidateFunc: func(s string) []string {
		if !isDate(s) {
			return []string{"invalid date"}
		}
		return nil
	}, MaxRegexSize: len(dateTimePattern)},
	"datetime": {Name: "datetime", ValidateFunc: func(s string) []string {
		if !isDateTime(s) {
			return []string{"invalid datetime"}
		}
		return nil
	}, MaxRegexSize: len(dateTimePattern)},
}

var (
	uuidRegexp     = regexp.MustCompile(uuidPattern)
	base64Regexp   = regexp.MustCompile(base64Pattern)
	dateTimeRegexp = regexp.MustCompile(dateTimePattern)
)

// isDate is strfmt's IsDate: an RFC 3339 full-date.
func isDate(s string) bool {
	_, err := time.Parse("2006-01-02", s)
	return err == nil
}

// isDateTime is strfmt's IsDateTime.
func isDateTime(s string) bool {
	if len(s) < 4 {
		return false
	}
	parts := strings.Split(strings.ToLower(s), "t")
	if len(parts) < 2 || !isDate(parts[0]) {
		return false
	}
	matches := dateTimeRegexp.FindAllStringSubmatch(parts[1], -1)
	if len(matches) == 0 || len(matches[0]) == 0 {
		return false
	}
	m := matches[0]
	return m[1] <= "23" && m[2] <= "59" && m[3] <= "59"
}

// maskTrailingDash is apimachinery's (api/validation, generic.go): a name
// used as a prefix may end in a dash.
func maskTrailingDash(name string) string {
	if len(name) > 1 && strings.HasSuffix(name, "-") {
		return name[:len(name)-2] + "a"
	}
	return name
}

// apimachinery's util/validation DNS checks, with its messages.
const (
	dns1123LabelFmt          = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
	dns1123LabelErrMsg       = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
	dns1123SubdomainFmt      = dns1123LabelFmt + "(\\." + dns1123LabelFmt + ")*"
	dns1123SubdomainErrorMsg = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
	dns1035LabelFmt          = "[a-z]([-a-z0-9]*[a-z0-9])?"
	dns1035LabelErrMsg       = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character"
)

var (
	dns1123LabelRegexp     = regexp.MustCompile("^" + dns1123LabelFmt + "$")
	dns1123SubdomainRegexp = regexp.MustCompile("^" + dns1123SubdomainFmt + "$")
	dns1035LabelRegexp     = regexp.MustCompile("^" + dns1035LabelFmt + "$")
)

func isDNS1123Label(value string) []string {
	var errs []string
	if len(value) > 63 {
		errs = append(errs, maxLenError(63))
	}
	if !dns1123LabelRegexp.MatchString(value) {
		if dns1123SubdomainRegexp.MatchString(value) {
			errs = append(errs, "must not contain dots") // a valid subdomain of a valid length
		} else {
			errs = append(errs, content.RegexError(dns1123LabelErrMsg, dns1123LabelFmt, "my-name", "123-abc"))
		}
	}
	return errs
}

func isDNS1123Subdomain(value string) []string {
	var errs []string
	if len(value) > 253 {
		errs = append(errs, maxLenError(253))
	}
	if !dns1123SubdomainRegexp.MatchString(value) {
		errs = append(errs, content.RegexError(dns1123SubdomainErrorMsg, dns1123SubdomainFmt, "example.com"))
	}
	return errs
}

func isDNS1035Label(value string) []string {
	var errs []string
	if len(value) > 63 {
		errs = append(errs, maxLenError(63))
	}
	if !dns1035LabelRegexp.MatchString(value) {
		errs = append(errs, content.RegexError(dns1035LabelErrMsg, dns1035LabelFmt, "my-name", "abc-123"))
	}
	return errs
}

// maxLenError is util/validation's MaxLenError ("characters", not content's "bytes").
func maxLenError(length int) string {
	return fmt.Sprintf("must be no more than %d characters", length)
}
