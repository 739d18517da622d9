package jsonengine

// cel-go's parser stops an expression nested deeper than its recursion limit
// (250 levels of one grammar rule) by panicking from a parse listener and
// recovering in Parse. TinyGo cannot recover on WebAssembly, so under TinyGo
// such an expression trapped the module in validate_settings instead of
// being refused. Every level of (), [] or {} nests the grammar's expr rule
// once, so an expression whose brackets nest 250 deep (outside string
// literals and comments) is one cel-go refuses: compileExpression refuses it first,
// with cel-go's own message. Deep nesting without brackets (chained
// conditionals, unary operators) still reaches the parser.

// maxRecursionDepth is cel-go's default parser recursion limit, which the
// apiserver keeps.
const maxRecursionDepth = 250

const recursionLimitIssue = "ERROR: <input>:-1:0: expression recursion limit exceeded: 250"

// bracketDepth is the deepest nesting of (), [] and {} in a CEL expression,
// not counting string and bytes literals (quoted, triple-quoted, raw) and
// line comments.
func bracketDepth(expr string) int {
	depth, deepest := 0, 0
	for i := 0; i < len(expr); i++ {
		switch c := expr[i]; c {
		case '(', '[', '{':
			depth++
			if depth > deepest {
				deepest = depth
			}
		case ')', ']', '}':
			if depth > 0 {
				depth--
			}
		case '/':
			if i+1 < len(expr) && expr[i+1] == '/' {
				for i < len(expr) && expr[i] != '\n' {
					i++
				}
			}
		case '"', '\'':
			raw := i > 0 && (expr[i-1] == 'r' || expr[i-1] == 'R')
			quote := string(c)
			if i+2 < len(expr) && expr[i+1] == c && expr[i+2] == c {
				quote = expr[i : i+3]
			}
			i += len(quote)
			for i < len(expr) && !(len(expr)-i >= len(quote) && expr[i:i+len(quote)] == quote) {
				if expr[i] == '\\' && !raw {
					i++
				}
				i++
			}
			i += len(quote) - 1
		}
	}
	return deepest
}
