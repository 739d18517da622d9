# A test fixture: entrypoint policy/main computes one value per builtin that Kubewarden's host
# offers (and that OPA's Wasm compiler leaves to the host), from input.
package policy

main = {
	"sprintf": sprintf("%d items, %v, %s", [input.n, input.f, "x"]),
	"time_now_ns": time.now_ns() > 1700000000000000000,
	"base64url": base64url.encode_no_pad("hello?"),
	"urlquery_encode": urlquery.encode("a b&c"),
	"urlquery_decode": urlquery.decode("a%20b%26c"),
	"urlquery_encode_object": urlquery.encode_object({"a": "1", "b": ["2", "3"]}),
	"urlquery_decode_object": urlquery.decode_object("a=1&b=2&b=3"),
	"json_is_valid": [json.is_valid("{}"), json.is_valid("{")],
	"json_patch": json.patch({"a": 1}, [{"op": "add", "path": "/b", "value": 2}]),
	"yaml_marshal": yaml.marshal({"a": [1, 2]}),
	"yaml_unmarshal": yaml.unmarshal("a: [1, 2]"),
	"yaml_is_valid": yaml.is_valid("a: ["),
	"hex_encode": hex.encode("hi"),
	"hex_decode": hex.decode("6869"),
	"glob_quote_meta": glob.quote_meta("*.example.com"),
	"regex_split": regex.split("[,;]", "a,b;c"),
	"regex_template_match": regex.template_match("urn:foo:{.*}", "urn:foo:bar:baz", "{", "}"),
	"regex_find_n": regex.find_n("[0-9]+", "a1b22c333", 2),
	"semver_is_valid": [semver.is_valid("1.2.3"), semver.is_valid("1.2")],
	"semver_compare": semver.compare("1.2.3", "1.10.0"),
	"trace": trace("tracing"),
}
