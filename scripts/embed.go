// Package scripts is the Starlark library shipped inside the gorun binary:
// partition strategies that load() finds after the script's folder and
// GORUN_PATH, example training scripts, and example cluster files.
package scripts

import "embed"

// Library holds the shipped .star and .toml files, by path relative to
// this folder ("partition.star", "examples/mnist.star").
//
//go:embed *.star examples/*.star clusters/*.toml
var Library embed.FS
