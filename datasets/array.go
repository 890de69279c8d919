package datasets

import (
	"fmt"
	"strings"

	"gorun/safetensors"
)

// Array is one n-dimensional array read from a file by ReadArray: its
// element type (in safetensors' spelling), shape and little-endian,
// row-major bytes. Where names it in messages: the .npy path, or the
// .safetensors path and tensor name.
type Array struct {
	Where string
	DType safetensors.DType
	Shape []int
	Data  []byte
}

// ReadArray reads one array with the readers data.tensors uses: the .npy
// file at path, or, for a path ending in .safetensors, its tensor key
// (key "" means the file's only tensor; the error lists the tensors when
// it holds several). Every dtype the formats have is read; the caller
// decides which it takes. Errors name the file and say what is wrong.
func ReadArray(path, key string) (*Array, error) {
	if !strings.HasSuffix(strings.ToLower(path), ".safetensors") {
		if key != "" {
			return nil, fmt.Errorf("%s: a .npy file holds one array; a key (%q) is for .safetensors files", path, key)
		}
		a, err := readNPY(path, false)
		if err != nil {
			return nil, err
		}
		return &Array{Where: a.where, DType: a.dtype, Shape: a.shape, Data: a.data}, nil
	}
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, err
	}
	names := f.Names()
	if key == "" {
		if len(names) != 1 {
			return nil, fmt.Errorf("%s holds %s: name the one to read", path, keyList(names))
		}
		key = names[0]
	}
	t, ok := f.Get(key)
	if !ok {
		return nil, fmt.Errorf("%s has no tensor %q; it holds %s", path, key, keyList(names))
	}
	return &Array{Where: fmt.Sprintf("%s: tensor %q", path, key), DType: t.DType, Shape: t.Shape, Data: t.Data}, nil
}
