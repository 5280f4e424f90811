package egress

// WithDefaults returns l with each zero field set to its default, as the
// proxy applies them (the daemon's reference config lists them).
func (l Limits) WithDefaults() Limits { return l.withDefaults() }
