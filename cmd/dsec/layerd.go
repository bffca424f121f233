package main

import "github.com/dsec-dev/dsec/internal/lazy"

// `dsec layerd` is hidden: the agent starts it (with its config in the
// environment) and it must never fall through to the CLI.
func init() { lazy.MaybeMain() }
