// Package engine is the compile half of gorun's engine: it turns a Spec
// (package engine/spec, built by package script from a Starlark script)
// and a Cluster (a TOML cluster file) into a Plan, checked and laid out
// before any data is read.
//
//   - graph.go builds the model's training graph from the Spec's layers:
//     values with shapes checked by each op's shape rule (package ops),
//     errors naming the layer and its script line;
//   - autodiff.go appends the backward pass;
//   - plan.go compiles one Program per device: its buffers (ids with a
//     dtype, a planned maximum shape and an offset in one arena), its
//     steps in order — forward, backward with the gradient collectives
//     placed after the step that completes each bucket (sync.go), the
//     optimizer update — and the evaluation pass;
//   - shards.go gives each epoch's shards and schedule (partition
//     strategies, uneven shards); the datasets themselves are package
//     datasets' (Compile asks it only for their shapes, datasets.Describe);
//   - describe.go and dot.go print a Plan (`gorun plan`, `--dot`).
//
// A Plan is immutable and device-neutral: it holds no memory and no run
// state. Package engine/runner trains it on devices that package
// engine/backend opens (cpu by default, cuda with -tags cuda).
package engine
