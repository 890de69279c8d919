// Package docs holds gorun's documentation (architecture.md, the how-tos
// under howto/, the reference, the speed log) and, in its test, the checks
// that keep it and the README honest against the code: the repository
// paths they name exist, the Go identifiers they name (ops.Def,
// engine.SyncStrategy.AfterBackward, …) are declared in those packages,
// test names, make targets and gorun flags exist, quoted code matches the
// file it is quoted from, the package map lists every package and what it
// imports, and the Starlark of the partition-strategy how-to loads and
// partitions.
//
// The package has no code: it exists for its test, which `make test` runs
// with every other (`go test ./docs/` alone takes well under a second once
// built).
package docs
