package group_test

import (
	"fmt"

	"github.com/tollgate-dev/tollgate/host/group"
)

func ExampleEval() {
	expr, err := group.Parse("signed() && (trusted_registry() || !latest_tag())")
	if err != nil {
		panic(err)
	}
	verdicts := map[string]bool{"signed": true, "trusted_registry": true, "latest_tag": true}
	ok, _ := group.Eval(expr, func(member string) (bool, error) {
		fmt.Println("evaluating", member)
		return verdicts[member], nil
	})
	fmt.Println("accepted:", ok)
	// Output:
	// evaluating signed
	// evaluating trusted_registry
	// accepted: true
}

func ExampleParse() {
	_, err := group.Parse("a() && b")
	fmt.Println(err)
	// Output:
	// expected '(' after "b": members are called as b() at offset 8
}
