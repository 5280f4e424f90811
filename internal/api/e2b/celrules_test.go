package e2b

// The rules of this package's tests are CEL, which only a program that
// links celrules evaluates.
import _ "github.com/airlock-sandbox/airlock/internal/policy/celrules"
