// Package engine is the compile half of gorun's engine: it turns a Spec
// (package engine/spec, built by package script from a Starlark script)
// and a Cluster (a TOML cluster file) into a Plan, checked and laid out
// before any data is read.
//
//   - graph.go builds the model's training graph from the Spec's layers:
//     values with shapes checked by each op's shape rule (package ops),
//     errors naming the layer and its script line;
//   - autodiff.go appends the backward pass: it walks the forward nodes in
//     reverse, applies each op's gradient rule (ops.Def.Grad, through the
//     ops.GradBuilder it implements) and sums the gradients of values used
//     twice; fuse.go fuses ops into one step where every backend runs the
//     fused op, and into the ops of TargetFusions only where the Plan's
//     backend says it runs them;
//   - plan.go compiles one Program per device: its buffers (ids with a
//     dtype, a planned maximum shape and an offset in one arena), its
//     steps in order — forward, backward with the gradient collectives
//     placed after the step that completes each bucket, the optimizer
//     update — and the evaluation pass;
//   - sync.go is the sync strategy's interface (SyncStrategy): where its
//     collectives go (collective.go), how the loss is scaled, what a
//     checkpoint holds; each strategy is one file (sync_allreduce.go,
//     sync_parameter_server.go, sync_local_sgd.go, sync_none.go);
//   - shards.go gives each epoch's shards and schedule (partition
//     strategies, uneven shards); the datasets themselves are package
//     datasets' (Compile asks it only for their shapes, datasets.Describe);
//   - cluster.go and clusterfile.go read and check the Cluster (a TOML
//     file, --set); the backends' names, their tables ([cpu], [cuda]) and
//     the transports that come with them are those registered in package
//     engine/target;
//   - describe.go and dot.go print a Plan (`gorun plan`, `--dot`).
//
// The compile half knows the backends only through package engine/target:
// each registers a Target (the ops it runs, its cluster-file keys, whether
// its memory is the host's, its transports), which decides the fusions
// Compile makes, the ops it refuses (a Plan with an op its backend lacks is
// a CompileError naming the op and the layer) and the memory check. A new
// backend registers a Target and edits nothing here. Compile reads no data
// (package datasets describes a dataset from its headers) and imports no
// backend.
//
// A Plan is immutable and device-neutral: it holds no memory and no run
// state. Package engine/runner trains it on devices that package
// engine/backend opens, from the backends the program registered (cmd/gorun
// registers cpu, and cuda in a -tags cuda build).
package engine
