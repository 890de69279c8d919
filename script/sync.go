package script

import (
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"gorun/engine/spec"
)

var allreduceMaker = &configMaker{
	name:   "sync.allreduce",
	params: []string{"op?", "bucket_mb?", "overlap?", "broadcast_buffers?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		op := "mean"
		bucket := number(25)
		overlap, broadcast := true, true
		if err := unpack(name, kwargs, "op?", &op, "bucket_mb?", &bucket, "overlap?", &overlap, "broadcast_buffers?", &broadcast); err != nil {
			return nil, err
		}
		if op != "mean" && op != "sum" {
			return nil, fmt.Errorf("%s: op must be \"mean\" or \"sum\", got %q", name, op)
		}
		if bucket <= 0 {
			return nil, fmt.Errorf("%s: bucket_mb must be positive, got %g", name, float64(bucket))
		}
		return spec.Sync{Kind: spec.SyncAllReduce, Op: op, BucketMB: float64(bucket), Overlap: overlap, BroadcastBuffers: broadcast, Pos: position(thread)}, nil
	},
}

var parameterServerMaker = &configMaker{
	name:   "sync.parameter_server",
	params: []string{"root?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		root := 0
		if err := unpack(name, kwargs, "root?", &root); err != nil {
			return nil, err
		}
		if root < 0 {
			return nil, fmt.Errorf("%s: root must be ≥ 0, got %d", name, root)
		}
		return spec.Sync{Kind: spec.SyncParameterServer, Root: root, Pos: position(thread)}, nil
	},
}

var localSGDMaker = &configMaker{
	name:   "sync.local_sgd",
	params: []string{"every?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		every := 1
		if err := unpack(name, kwargs, "every?", &every); err != nil {
			return nil, err
		}
		if every < 1 {
			return nil, fmt.Errorf("%s: every must be ≥ 1, got %d", name, every)
		}
		return spec.Sync{Kind: spec.SyncLocalSGD, Every: every, Pos: position(thread)}, nil
	},
}

var noneMaker = &configMaker{
	name:   "sync.none",
	params: nil,
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		if err := unpack(name, kwargs); err != nil {
			return nil, err
		}
		return spec.Sync{Kind: spec.SyncNone, Pos: position(thread)}, nil
	},
}

// zeroParams are sync.zero's parameters; sync.fsdp takes them but stage.
var zeroParams = []string{"stage", "bucket_mb?", "overlap?", "prefetch?", "broadcast_buffers?", "root?"}

// buildZero reads sync.zero's (and sync.fsdp's) arguments; stage is 3
// for sync.fsdp.
func buildZero(thread *starlark.Thread, name string, kwargs []starlark.Tuple, fsdp bool) (any, error) {
	stage := 3
	bucket := number(25)
	overlap, broadcast := true, true
	prefetch := 1
	root := starlark.Value(starlark.None)
	var err error
	if fsdp {
		err = unpack(name, kwargs, "bucket_mb?", &bucket, "overlap?", &overlap, "prefetch?", &prefetch, "broadcast_buffers?", &broadcast, "root?", &root)
	} else {
		err = unpack(name, kwargs, "stage", &stage, "bucket_mb?", &bucket, "overlap?", &overlap, "prefetch?", &prefetch, "broadcast_buffers?", &broadcast, "root?", &root)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case root != starlark.None:
		return nil, fmt.Errorf("%s: root is a sync.parameter_server setting: ZeRO has no server, every rank updates its own shard of the parameters (leave root out, or use sync.parameter_server(root = %s))", name, root)
	case stage < 1 || stage > 3:
		return nil, fmt.Errorf("%s: stage must be 1 (shard the optimizer state), 2 (also the gradients) or 3 (also the parameters), got %d", name, stage)
	case bucket <= 0:
		return nil, fmt.Errorf("%s: bucket_mb must be positive, got %g", name, float64(bucket))
	case prefetch < 0:
		return nil, fmt.Errorf("%s: prefetch must be ≥ 0 (layers gathered ahead), got %d", name, prefetch)
	}
	return spec.Sync{Kind: spec.SyncZero, Op: "mean", Stage: stage, BucketMB: float64(bucket), Overlap: overlap, Prefetch: prefetch,
		BroadcastBuffers: broadcast, Pos: position(thread)}, nil
}

var zeroMaker = &configMaker{
	name:   "sync.zero",
	params: zeroParams,
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		return buildZero(thread, name, kwargs, false)
	},
}

var fsdpMaker = &configMaker{
	name:   "sync.fsdp",
	params: zeroParams[1:],
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		return buildZero(thread, name, kwargs, true)
	},
}

var syncModule = &starlarkstruct.Module{
	Name: "sync",
	Members: starlark.StringDict{
		"allreduce":        allreduceMaker.builtin(),
		"parameter_server": parameterServerMaker.builtin(),
		"local_sgd":        localSGDMaker.builtin(),
		"none":             noneMaker.builtin(),
		"zero":             zeroMaker.builtin(),
		"fsdp":             fsdpMaker.builtin(),
	},
}
